/* fuzz_common.h: what the IR fuzzers share: parsing bytes into functions and the size caps that
 * keep one input fast (every value at most FUZZ_MAX_ELEMS elements, at most FUZZ_MAX_INS
 * instructions per function, scans at most FUZZ_MAX_SCAN steps deep in total). */
#ifndef TJIT_FUZZ_COMMON_H
#define TJIT_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

enum { FUZZ_MAX_TEXT = 8192, FUZZ_MAX_ELEMS = 4096, FUZZ_MAX_INS = 256, FUZZ_MAX_SCAN = 64 };

/* true when f (and its bodies) is within the caps */
bool fuzz_small_enough(const ir_func *f);

/* Parses data into functions, returned in fs and n (free them with fuzz_free_funcs). */
bool fuzz_parse(const uint8_t *data, size_t size, ir_func ***fs, uint32_t *n);
void fuzz_free_funcs(ir_func **fs, uint32_t n);

/* Buffers for the params of f (filled from seed, values small enough for every op) and results;
   NULL on OOM. fuzz_free_buffers frees both. */
bool fuzz_buffers(const ir_func *f, uint64_t seed, void ***args, void ***results);
void fuzz_free_buffers(const ir_func *f, void **args, void **results);

#endif
