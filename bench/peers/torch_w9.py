"""W9 (shared/bench/WORKLOADS.md) against torch: one x @ w of f32 [2048, 2048] on tjit-bench's W9
data, torch.matmul on 2 threads (the issue's yardstick: tjit's sharded W9 against torch's single
matmul), and numpy's (OpenBLAS) in the same process. Needs torch in the interpreter given to
`tjit-bench --peers PYTHON` (it exits with status 1 otherwise); or alone:
    python3 bench/peers/torch_w9.py [--reps N] [--warmups N] [--cold-only]
Prints one line of JSON: torch's figures under tjit-bench's peer keys (cold_ms: the first call
in this process; the warm median and minimum over reps), numpy's under second_*.
Nothing in the test suite runs this.
"""
import json
import sys
import time

import numpy as np

from common import fill_float, options, timed

N = 2048


def main():
    o = options()
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"error": "no torch in this interpreter: %s" % e}))
        sys.exit(1)
    torch.set_num_threads(2)
    x = fill_float("W9", 0, (N, N))
    w = fill_float("W9", 1, (N, N))
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)
    t0 = time.perf_counter()
    torch.matmul(xt, wt)
    cold_ms = (time.perf_counter() - t0) * 1e3
    out = {"peer": "torch", "version": torch.__version__.split("+")[0], "backend": "cpu",
           "cold_ms": cold_ms}
    if not o.cold_only:
        med, lo = timed(lambda: torch.matmul(xt, wt), o.reps, o.warmups)
        out.update(warm_median_ms=med, warm_min_ms=lo, reps=o.reps)
        med, lo = timed(lambda: x @ w, o.reps, o.warmups)
        out.update(second_name="numpy", second_version=np.__version__, second_warm_median_ms=med,
                   second_warm_min_ms=lo)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
