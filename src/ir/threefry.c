/* threefry.c: threefry2x32 on one (key, counter) pair, the interpreter's and the constant
 * folder's definition of the THREEFRY op (codegen emits the same rounds on vectors). */
#include "ir/ir.h"

static uint32_t rotl(uint32_t v, unsigned r) { return (v << r) | (v >> (32 - r)); }

/* JAX's _threefry2x32: five groups of four rounds, a key injection after each group. */
uint64_t ir_threefry2x32(uint64_t key, uint64_t count) {
  static const unsigned rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  uint32_t ks[3] = {(uint32_t)(key >> 32), (uint32_t)key, 0};
  ks[2] = ks[0] ^ ks[1] ^ 0x1BD11BDAu;
  uint32_t x0 = (uint32_t)(count >> 32) + ks[0], x1 = (uint32_t)count + ks[1];
  for (unsigned g = 0; g < 5; g++) {
    for (unsigned r = 0; r < 4; r++) {
      x0 += x1;
      x1 = rotl(x1, rot[g & 1][r]) ^ x0;
    }
    x0 += ks[(g + 1) % 3];
    x1 += ks[(g + 2) % 3] + g + 1;
  }
  return (uint64_t)x0 << 32 | x1;
}
