"""examples/cnn.c's training step in JAX, to compare with `build/cnn --batch N` (not a
tjit-bench workload; run by hand with the peers' interpreter):
    python3 bench/peers/jax_cnn.py [batch]
conv 3x3 (1 -> 8 features, SAME) + bias + relu, 2x2 max-pool, depthwise 3x3 + bias + relu,
dense 288 -> 4, mean softmax cross-entropy; value_and_grad and SGD on every weight, the
weights donated, as cnn.c's step. Random images and labels of the same shapes (the loss's
value is not compared); prints the median and minimum of 20 warm steps.
"""
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

B = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
DN = ("NHWC", "HWIO", "NHWC")


def conv_relu(x, w, b, groups):
    y = lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=DN,
                                 feature_group_count=groups)
    return jnp.maximum(y + b, 0)


def loss(ws, x, labels):
    wc, bc, wd, bd, wn, bn = ws
    h = conv_relu(x, wc, bc, 1)
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = conv_relu(h, wd, bd, 8).reshape(B, 288)
    z = h @ wn + bn
    z = z - z.max(1, keepdims=True)
    picked = jnp.take_along_axis(z, labels[:, None], 1)[:, 0]
    return jnp.mean(jnp.log(jnp.exp(z).sum(1)) - picked)


def step(ws, x, labels):
    value, grads = jax.value_and_grad(loss)(ws, x, labels)
    return tuple(w - 0.5 * g for w, g in zip(ws, grads)), value


def main():
    run = jax.jit(step, donate_argnums=0)
    r = np.random.default_rng(1)
    shapes = [(3, 3, 1, 8), (8,), (3, 3, 1, 8), (8,), (288, 4), (4,)]
    ws = tuple(jnp.asarray(r.uniform(-0.5, 0.5, s).astype(np.float32)) for s in shapes)
    x = jnp.asarray(r.uniform(-0.3, 0.3, (B, 12, 12, 1)).astype(np.float32))
    labels = jnp.asarray(r.integers(0, 4, B).astype(np.int32))
    ws, value = run(ws, x, labels)
    value.block_until_ready()
    times = []
    for _ in range(20):
        t = time.perf_counter()
        ws, value = run(ws, x, labels)
        value.block_until_ready()
        times.append(time.perf_counter() - t)
    times.sort()
    print("jax %s cnn step, batch %d: warm median %.2f ms, min %.2f ms"
          % (jax.__version__, B, times[10] * 1e3, times[0] * 1e3))


if __name__ == "__main__":
    main()
