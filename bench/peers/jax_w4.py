"""W4 (shared/bench/WORKLOADS.md) in JAX: y = relu(x @ w1 + b1) @ w2 + b2 under jax.jit, on
tjit-bench's data. Run by `tjit-bench --peers PYTHON`, or alone:
    python3 bench/peers/jax_w4.py [--reps N] [--warmups N] [--cold-only]
"""
from common import fill_float, options, time_jitted

B, D, H = 512, 1024, 4096


def main(dtype=None):
    """W4 on its data as dtype (jax_w13.py: bfloat16), float32 by default."""
    o = options()
    import jax
    import jax.numpy as jnp

    shapes = [(B, D), (D, H), (H,), (H, D), (D,)]
    args = [jnp.asarray(fill_float("W4", i, s), dtype=dtype) for i, s in enumerate(shapes)]
    jax.block_until_ready(args)

    def mlp(x, w1, b1, w2, b2):
        return jax.nn.relu(x @ w1 + b1) @ w2 + b2

    time_jitted(jax, jax.jit(mlp), args, o)


if __name__ == "__main__":
    main()
