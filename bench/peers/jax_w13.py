"""W13 (shared/bench/WORKLOADS.md) in JAX: W4's function on bf16 arrays (tjit-bench's W4 data
rounded to bf16) under jax.jit; each dot's result is bf16, as tjit's. Run by
`tjit-bench --peers PYTHON`, or alone:
    python3 bench/peers/jax_w13.py [--reps N] [--warmups N] [--cold-only]
"""
import jax_w4  # bench/peers/jax_w4.py

if __name__ == "__main__":
    import jax.numpy as jnp

    jax_w4.main(jnp.bfloat16)
