"""What the JAX peer scripts share: tjit-bench's data (workloads.c's wl_fill, reproduced bit for
bit) and the timing protocol (cold = jit + first call in this fresh process, after `import jax`
and the data are ready; warm = median and minimum over reps after warmups, each call blocking
until its results are ready), printed as the one line of JSON tjit-bench reads.
Nothing in the test suite runs these scripts.
"""
import argparse
import json
import statistics
import time

import numpy as np

from wl_fill import seed_of, splitmix_bits  # bench/peers/wl_fill.py

U64 = np.uint64


def fill_float(workload_id, arg, shape, scale=1.0, offset=0.0):
    """Argument arg of workload_id as tjit-bench fills it: uniform(-1, 1) * scale + offset."""
    bits = splitmix_bits(seed_of(workload_id, arg), int(np.prod(shape)))
    u = ((bits >> U64(40)).astype(np.float64) + 0.5) / 8388608.0 - 1.0
    return (np.float32(offset) + (u * scale).astype(np.float32)).reshape(shape)


def fill_int(workload_id, arg, shape, int_range):
    bits = splitmix_bits(seed_of(workload_id, arg), int(np.prod(shape)))
    return ((bits >> U64(40)) % U64(int_range)).astype(np.int32).reshape(shape)


def options():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmups", type=int, default=3)
    ap.add_argument("--cold-only", action="store_true")
    return ap.parse_args()


def timed(fn, reps, warmups):
    """The median and minimum of reps calls of fn() after warmups, in ms."""
    for _ in range(warmups):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, min(times) * 1e3


def torch_second(make, host_args, o):
    """A second peer in the same process: torch (2 threads) running make(torch, tensors) -> a
    callable on host_args (numpy arrays), as the second_* keys tjit-bench prints; {} without
    torch in this interpreter."""
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(2)
    fn = make(torch, [torch.from_numpy(a) for a in host_args])
    med, lo = timed(fn, o.reps, o.warmups)
    return {"second_name": "torch", "second_version": torch.__version__.split("+")[0],
            "second_warm_median_ms": med, "second_warm_min_ms": lo}


def time_jitted(jax, fn, args, o, feed_back=None, loss=None, second=None):
    """Times fn (a jax.jit'ed function) on args and prints the JSON line.
    feed_back(args, out) -> the next call's args (donated weights); loss(out) -> a float that
    tjit-bench prints beside its own (the first call's), or None; second() -> the second_* keys
    of another library timed after JAX (torch_second), or None."""
    t0 = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out)
    cold_ms = (time.perf_counter() - t0) * 1e3
    res = {"peer": "jax", "version": jax.__version__, "backend": jax.default_backend(),
           "cold_ms": cold_ms}
    if loss is not None:
        res["loss"] = float(loss(out))
    if not o.cold_only:
        times = []
        for i in range(o.warmups + o.reps):
            if feed_back is not None:
                args = feed_back(args, out)
            t0 = time.perf_counter()
            out = fn(*args)
            jax.block_until_ready(out)
            if i >= o.warmups:
                times.append(time.perf_counter() - t0)
        res.update(warm_median_ms=statistics.median(times) * 1e3, warm_min_ms=min(times) * 1e3,
                   reps=o.reps)
        if second is not None:
            res.update(second())
    print(json.dumps(res))
