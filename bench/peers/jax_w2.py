"""W2 (shared/bench/WORKLOADS.md) in JAX: y = softmax(x, axis=1), max-subtracted, written out
as tjit-bench's W2 is (jax.nn.softmax computes the same), over x: f32 [16384, 1024] under
jax.jit, on tjit-bench's data; then torch.softmax (2 threads) where the interpreter has torch.
Run by `tjit-bench --peers PYTHON`, or alone:
    python3 bench/peers/jax_w2.py [--reps N] [--warmups N] [--cold-only]
"""
from common import fill_float, options, time_jitted, torch_second

ROWS, COLS = 16384, 1024


def main():
    o = options()
    import jax
    import jax.numpy as jnp

    host = [fill_float("W2", 0, (ROWS, COLS))]
    args = [jnp.asarray(a) for a in host]
    jax.block_until_ready(args)

    def softmax(x):
        e = jnp.exp(x - jnp.max(x, axis=1, keepdims=True))
        return e / jnp.sum(e, axis=1, keepdims=True)

    def in_torch(torch, t):
        return lambda: torch.softmax(t[0], dim=1)

    time_jitted(jax, jax.jit(softmax), args, o, second=lambda: torch_second(in_torch, host, o))


if __name__ == "__main__":
    main()
