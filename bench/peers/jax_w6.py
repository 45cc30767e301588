"""W6 (shared/bench/WORKLOADS.md) in JAX: the one-example loss mean((x_i @ w - y_i)^2) under
jax.vmap over x and y (w unbatched), jax.jit, on tjit-bench's data. Run by
`tjit-bench --peers PYTHON`, or alone:
    python3 bench/peers/jax_w6.py [--reps N] [--warmups N] [--cold-only]
"""
from common import fill_float, options, time_jitted

N, D, O = 4096, 512, 64


def main():
    o = options()
    import jax
    import jax.numpy as jnp

    args = [jnp.asarray(fill_float("W6", i, s)) for i, s in enumerate([(N, D), (D, O), (N, O)])]
    jax.block_until_ready(args)

    def example(x, w, y):
        d = x @ w - y
        return jnp.sum(d * d) / O

    time_jitted(jax, jax.jit(jax.vmap(example, in_axes=(0, None, 0))), args, o)


if __name__ == "__main__":
    main()
