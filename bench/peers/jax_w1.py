"""W1 (shared/bench/WORKLOADS.md) in JAX: y = tanh(0.5 x + 0.25) * (1 / (1 + exp(-x))) over
x: f32 [16777216] under jax.jit, on tjit-bench's data; then in torch (2 threads, eager:
torch.tanh and torch.sigmoid) where the interpreter has it. Run by `tjit-bench --peers PYTHON`,
or alone:
    python3 bench/peers/jax_w1.py [--reps N] [--warmups N] [--cold-only]
"""
from common import fill_float, options, time_jitted, torch_second

N = 16777216


def main():
    o = options()
    import jax
    import jax.numpy as jnp

    host = [fill_float("W1", 0, (N,))]
    args = [jnp.asarray(a) for a in host]
    jax.block_until_ready(args)

    def eltwise(x):
        return jnp.tanh(0.5 * x + 0.25) * (1.0 / (1.0 + jnp.exp(-x)))

    def in_torch(torch, t):
        return lambda: torch.tanh(0.5 * t[0] + 0.25) * torch.sigmoid(t[0])

    time_jitted(jax, jax.jit(eltwise), args, o, second=lambda: torch_second(in_torch, host, o))


if __name__ == "__main__":
    main()
