"""W13 (shared/bench/WORKLOADS.md) in JAX: W4's function on bf16 arrays (tjit-bench's W4 data
rounded to bf16) under jax.jit; each dot's result is bf16, as tjit's. Run by
`tjit-bench --peers PYTHON`, or alone:
    python3 bench/peers/jax_w13.py [--reps N] [--warmups N] [--cold-only]
"""
from common import fill_float, options, time_jitted

B, D, H = 512, 1024, 4096


def main():
    o = options()
    import jax
    import jax.numpy as jnp

    shapes = [(B, D), (D, H), (H,), (H, D), (D,)]
    args = [jnp.asarray(fill_float("W4", i, s), dtype=jnp.bfloat16) for i, s in enumerate(shapes)]
    jax.block_until_ready(args)

    def mlp(x, w1, b1, w2, b2):
        return jax.nn.relu(x @ w1 + b1) @ w2 + b2

    time_jitted(jax, jax.jit(mlp), args, o)


if __name__ == "__main__":
    main()
