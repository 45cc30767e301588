"""W12 (shared/bench/WORKLOADS.md) in JAX and in numpy, in one process: y = fft(x) of c64 [2^20]
and y2 = rfft2(r) of f32 [1024,1024], on the same data tjit-bench draws (its splitmix64 fill,
reproduced here). JAX: both in one jax.jit (as tjit's one function); numpy: np.fft.fft then
np.fft.rfft2 (pocketfft, one thread).

Run by `tjit-bench --peers PYTHON` (bench/README.md), or alone:
    python3 bench/peers/w12_fft.py [--reps N] [--warmups N] [--cold-only]
Prints one line of JSON: JAX's figures under tjit-bench's peer keys (cold_ms: jit + the first
call; the warm median and minimum over reps, each call blocking until its results are ready),
numpy's warm median and minimum under second_*. Nothing in the test suite runs this.
"""
import argparse
import json
import time

import numpy as np

N, R = 1 << 20, 1024
from common import timed  # bench/peers/common.py
from wl_fill import uniform_f32  # bench/peers/wl_fill.py


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmups", type=int, default=3)
    ap.add_argument("--cold-only", action="store_true")
    o = ap.parse_args()
    x = uniform_f32("W12", 0, 2 * N).view(np.complex64)
    r = uniform_f32("W12", 1, R * R).reshape(R, R)

    import jax
    import jax.numpy as jnp
    xj, rj = jax.device_put(x), jax.device_put(r)
    jax.block_until_ready((xj, rj))
    t0 = time.perf_counter()
    f = jax.jit(lambda a, b: (jnp.fft.fft(a), jnp.fft.rfft2(b)))
    jax.block_until_ready(f(xj, rj))
    cold_ms = (time.perf_counter() - t0) * 1e3
    out = {"peer": "jax", "version": jax.__version__, "backend": jax.default_backend(),
           "cold_ms": cold_ms}
    if not o.cold_only:
        med, lo = timed(lambda: jax.block_until_ready(f(xj, rj)), o.reps, o.warmups)
        out.update(warm_median_ms=med, warm_min_ms=lo, reps=o.reps)
        med, lo = timed(lambda: (np.fft.fft(x), np.fft.rfft2(r)), o.reps, o.warmups)
        out.update(second_name="numpy", second_version=np.__version__, second_warm_median_ms=med,
                   second_warm_min_ms=lo)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
