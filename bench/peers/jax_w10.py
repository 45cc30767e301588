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
import math

from common import fill_float as fill, fill_int as fill_i, options, time_jitted

B, T, D, H, V = 8, 128, 256, 4, 4096
LR = 0.1  # bench/workloads.c's W10_LR


def fill_float(arg, shape, scale, offset):
    return fill("W10", arg, shape, scale, offset)


def fill_int(arg, shape, int_range):
    return fill_i("W10", arg, shape, int_range)


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
    o = options()

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

    jstep = jax.jit(step, donate_argnums=0)
    time_jitted(jax, jstep, (ws, ids, labels), o,
                feed_back=lambda args, out: (out[0], args[1], args[2]), loss=lambda out: out[1])


if __name__ == "__main__":
    main()
