#!/usr/bin/env python3
"""Regenerates the .npy fixtures test_npy.c reads: files as numpy (and ml_dtypes for bf16) write
them. Run once by hand when a fixture is added; the tests themselves never need Python.

    python3 -m venv /tmp/vnp && /tmp/vnp/bin/pip install numpy ml_dtypes
    /tmp/vnp/bin/python tests/npy/make_fixtures.py

Every numeric fixture holds the 2x3 array arange(6) - 2 (u8: arange(6); bool: arange(6) % 2)
in the named dtype, so the test checks every file against one formula."""
import os

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def base(dtype):
    if dtype == np.bool_:
        return (np.arange(6) % 2).astype(np.bool_).reshape(2, 3)
    if dtype == np.uint8:
        return np.arange(6).astype(np.uint8).reshape(2, 3)
    return (np.arange(6) - 2).astype(dtype).reshape(2, 3)


def save(name, arr, version=None):
    path = os.path.join(HERE, name)
    if version is None:
        np.save(path, arr)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, arr, version=version)


for tag, dt in [("bool", np.bool_), ("i8", np.int8), ("u8", np.uint8), ("i32", np.int32),
                ("i64", np.int64), ("f16", np.float16), ("bf16", ml_dtypes.bfloat16),
                ("f32", np.float32), ("f64", np.float64)]:
    save(f"{tag}.npy", base(dt))
save("f64_big_endian.npy", base(np.dtype(">f8")))
save("i32_big_endian.npy", base(np.dtype(">i4")))
save("f32_fortran.npy", np.asfortranarray(base(np.float32)))
save("f32_v2.npy", base(np.float32), version=(2, 0))
save("f32_v3.npy", base(np.float32), version=(3, 0))
save("f64_scalar.npy", np.array(7.5))
save("f32_empty.npy", np.zeros((0, 3), np.float32))
save("u16_unsupported.npy", base(np.uint16))
