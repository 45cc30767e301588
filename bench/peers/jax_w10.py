"""W10 (shared/bench/WORKLOADS.md) in JAX: one SGD step of examples/transformer_model.h's model,
jax.jit(value_and_grad) + SGD with the weights donated, on the same data tjit-bench draws (its
splitmix64 fill, reproduced here), so that the loss can be compared with tjit's.

Run by `tjit-bench --peers PYTHON` (bench/README.md), or alone:
    python3 bench/peers/jax_w10.py [--reps N] [--warmups N] [--cold-only]
Prints one line of JSON: jax's version, cold_ms (jit + the first call, after `import jax` and the
data are ready, as tjit-bench's cold excludes its context and arrays), the warm median and
minimum over reps (each call blocks until its results are ready), and the first call's loss.
Nothing in the test suite runs this.
"""
import argparse
import json
import math
import statistics
import time

import numpy as np

B, T, D, H, V = 8, 128, 256, 4, 4096
LR = 0.1  # bench/workloads.c's W10_LR
from wl_fill import seed_of, splitmix_bits  # bench/peers/wl_fill.py

U64 = np.uint64


def fill_float(arg, shape, scale, offset):
    bits = splitmix_bits(seed_of("W10", arg), int(np.prod(shape)))
    u = ((bits >> U64(40)).astype(np.float64) + 0.5) / 8388608.0 - 1.0
    return (np.float32(offset) + (u * scale).astype(np.float32)).reshape(shape)


def fill_int(arg, shape, int_range):
    bits = splitmix_bits(seed_of("W10", arg), int(np.prod(shape)))
    return ((bits >> U64(40)) % U64(int_range)).astype(np.int32).reshape(shape)


# (shape, scale, offset) of the weights, in transformer_model.h's order
WEIGHTS = [
    ((V, D), 1.0, 0.0),                          # wte
    ((T, D), 1.0, 0.0),                          # wpe
    ((D,), 0.0, 1.0), ((D,), 0.0, 0.0),          # ln1 g, b
    ((D, 3 * D), 1 / math.sqrt(D), 0.0),         # wqkv
    ((D, D), 1 / math.sqrt(D), 0.0),             # wo
    ((D,), 0.0, 1.0), ((D,), 0.0, 0.0),          # ln2 g, b
    ((D, 4 * D), 1 / math.sqrt(D), 0.0),         # w1
    ((4 * D,), 0.0, 0.0),                        # b1
    ((4 * D, D), 1 / math.sqrt(4 * D), 0.0),     # w2
    ((D,), 0.0, 0.0),                            # b2
    ((D,), 0.0, 1.0), ((D,), 0.0, 0.0),          # lnf g, b
    ((D, V), 1 / math.sqrt(D), 0.0),             # wout
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmups", type=int, default=3)
    ap.add_argument("--cold-only", action="store_true")
    o = ap.parse_args()

    import jax
    import jax.numpy as jnp

    ws = [jnp.asarray(fill_float(i, s, sc, off)) for i, (s, sc, off) in enumerate(WEIGHTS)]
    n_w = len(ws)
    ids = jnp.asarray(fill_int(n_w, (B, T), V))
    labels = jnp.asarray(fill_int(n_w + 1, (B, T), V))
    jax.block_until_ready((ws, ids, labels))

    def layernorm(x, g, b):
        d = x - x.mean(-1, keepdims=True)
        var = (d * d).mean(-1, keepdims=True)
        return d * jax.lax.rsqrt(var + 1e-5) * g + b

    def loss(w, ids, labels):
        (wte, wpe, g1, b1n, wqkv, wo, g2, b2n, w1, b1, w2, b2, gf, bf, wout) = w
        x = (jnp.take(wte, ids, axis=0) + wpe).reshape(B * T, D)
        h = layernorm(x, g1, b1n)
        qkv = h @ wqkv

        def heads(m):
            return m.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)

        q, k, v = heads(qkv[:, :D]), heads(qkv[:, D:2 * D]), heads(qkv[:, 2 * D:])
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(D // H)
        causal = jnp.arange(T)[:, None] >= jnp.arange(T)[None, :]
        s = jnp.where(causal, s, -1e30)
        p = jax.nn.softmax(s, axis=-1)
        a = jnp.einsum("bhqk,bhkd->bhqd", p, v).transpose(0, 2, 1, 3).reshape(B * T, D)
        x = x + a @ wo
        h = jax.nn.gelu(layernorm(x, g2, b2n) @ w1 + b1, approximate=False)
        x = x + h @ w2 + b2
        logits = layernorm(x, gf, bf) @ wout
        z = logits - logits.max(-1, keepdims=True)
        lse = jnp.log(jnp.exp(z).sum(-1, keepdims=True))
        picked = jnp.take_along_axis(z, labels.reshape(B * T, 1), axis=1)
        return jnp.mean(lse - picked)

    def step(w, ids, labels):
        l, g = jax.value_and_grad(loss)(w, ids, labels)
        return [wi - LR * gi for wi, gi in zip(w, g)], l

    t0 = time.perf_counter()
    jstep = jax.jit(step, donate_argnums=0)
    ws, l = jstep(ws, ids, labels)
    jax.block_until_ready((ws, l))
    cold_ms = (time.perf_counter() - t0) * 1e3
    out = {"peer": "jax", "version": jax.__version__, "backend": jax.default_backend(),
           "cold_ms": cold_ms, "loss": float(l)}
    if not o.cold_only:
        for _ in range(o.warmups):
            ws, l = jstep(ws, ids, labels)
            jax.block_until_ready((ws, l))
        times = []
        for _ in range(o.reps):
            t0 = time.perf_counter()
            ws, l = jstep(ws, ids, labels)
            jax.block_until_ready((ws, l))
            times.append(time.perf_counter() - t0)
        out.update(warm_median_ms=statistics.median(times) * 1e3, warm_min_ms=min(times) * 1e3,
                   reps=o.reps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
