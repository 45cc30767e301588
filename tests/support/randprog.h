/* randprog.h: the seeded random-program generator shared by the differential tests. */
#ifndef TJIT_TEST_RANDPROG_H
#define TJIT_TEST_RANDPROG_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"

/* A random program of 1..3 params of one dtype (later ones may have a dim of 1, broadcast) and
   3..14 ops; exact[k] says whether result k rounds exactly as the interpreter does (else it is
   a float within a few ulp); *n_res = 1..3 results. Same seed, same program. */
ir_func *rp_random_program(uint64_t seed, bool *exact, uint32_t *n_res);

#endif
