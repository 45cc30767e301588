"""W5 (shared/bench/WORKLOADS.md) in JAX: h_{t+1} = tanh(h_t @ wh + x_t @ wx + b) over T=1000
steps as one lax.scan returning every h, under jax.jit, on tjit-bench's data. Run by
`tjit-bench --peers PYTHON`, or alone:
    python3 bench/peers/jax_w5.py [--reps N] [--warmups N] [--cold-only]
"""
from common import fill_float, options, time_jitted

T, B, H = 1000, 32, 256
WSCALE = 0.0625  # workloads.c's W5_WSCALE, 1/sqrt(H)


def main():
    o = options()
    import jax
    import jax.numpy as jnp

    specs = [((B, H), 1.0), ((T, B, H), 1.0), ((H, H), WSCALE), ((H, H), WSCALE), ((H,), 1.0)]
    args = [jnp.asarray(fill_float("W5", i, s, sc)) for i, (s, sc) in enumerate(specs)]
    jax.block_until_ready(args)

    def rnn(h0, xs, wh, wx, b):
        def step(h, x):
            h = jnp.tanh(h @ wh + x @ wx + b)
            return h, h
        return jax.lax.scan(step, h0, xs)[1]

    time_jitted(jax, jax.jit(rnn), args, o)


if __name__ == "__main__":
    main()
