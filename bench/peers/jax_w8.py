"""W8 (shared/bench/WORKLOADS.md) in JAX: jax.value_and_grad of mean((mlp(x) - t)^2) with
respect to w1 and w2, under jax.jit, on tjit-bench's data; the loss is compared with tjit's.
Run by `tjit-bench --peers PYTHON`, or alone:
    python3 bench/peers/jax_w8.py [--reps N] [--warmups N] [--cold-only]
"""
from common import fill_float, options, time_jitted

B, D, H = 512, 1024, 4096


def main():
    o = options()
    import jax
    import jax.numpy as jnp

    shapes = [(B, D), (D, H), (H,), (H, D), (D,), (B, D)]
    args = [jnp.asarray(fill_float("W8", i, s)) for i, s in enumerate(shapes)]
    jax.block_until_ready(args)

    def loss(w1, w2, x, b1, b2, t):
        d = jax.nn.relu(x @ w1 + b1) @ w2 + b2 - t
        return jnp.sum(d * d) / (B * D)

    vg = jax.value_and_grad(loss, argnums=(0, 1))

    def step(x, w1, b1, w2, b2, t):
        return vg(w1, w2, x, b1, b2, t)

    time_jitted(jax, jax.jit(step), args, o, loss=lambda out: out[0])


if __name__ == "__main__":
    main()
