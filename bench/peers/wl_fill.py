"""tjit-bench's seeded data (bench/workloads.c's wl_fill), reproduced for the peer scripts."""
import numpy as np

U64 = np.uint64
MASK = (1 << 64) - 1


def seed_of(workload_id, arg):
    """workloads.c's wl_fill seed: s = 0x7431, then s*131 + each char, then s*131 + arg."""
    s = 0x7431
    for ch in workload_id:
        s = (s * 131 + ord(ch)) & MASK
    return (s * 131 + arg) & MASK


def splitmix_bits(seed, n):
    """The first n outputs of splitmix64 seeded with seed, as uint64."""
    with np.errstate(over="ignore"):
        z = U64(seed) + U64(0x9E3779B97F4A7C15) * np.arange(1, n + 1, dtype=U64)
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        return z ^ (z >> U64(31))


def uniform_f32(workload_id, arg, n):
    """wl_fill's float32 values with scale 1 and offset 0: uniform over (-1, 1)."""
    bits = splitmix_bits(seed_of(workload_id, arg), n)
    u = ((bits >> U64(40)).astype(np.float64) + 0.5) / 8388608.0 - 1.0
    return u.astype(np.float32)
