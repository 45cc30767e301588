"""W3 (shared/bench/WORKLOADS.md) in JAX: y = (x - mean) / sqrt(var + 1e-5) * g + b over axis 1
of x: f32 [16384, 1024] (g, b: [1024]) under jax.jit, on tjit-bench's data; then
torch.nn.functional.layer_norm (2 threads) where the interpreter has torch. Run by
`tjit-bench --peers PYTHON`, or alone:
    python3 bench/peers/jax_w3.py [--reps N] [--warmups N] [--cold-only]
"""
from common import fill_float, options, time_jitted, torch_second

ROWS, COLS = 16384, 1024


def main():
    o = options()
    import jax
    import jax.numpy as jnp

    host = [fill_float("W3", i, s) for i, s in enumerate([(ROWS, COLS), (COLS,), (COLS,)])]
    args = [jnp.asarray(a) for a in host]
    jax.block_until_ready(args)

    def layernorm(x, g, b):
        mean = jnp.mean(x, axis=1, keepdims=True)
        d = x - mean
        var = jnp.mean(d * d, axis=1, keepdims=True)
        return d / jnp.sqrt(var + 1e-5) * g + b

    def in_torch(torch, t):
        return lambda: torch.nn.functional.layer_norm(t[0], (COLS,), t[1], t[2], 1e-5)

    time_jitted(jax, jax.jit(layernorm), args, o, second=lambda: torch_second(in_torch, host, o))


if __name__ == "__main__":
    main()
