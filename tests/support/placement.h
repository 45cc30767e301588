/* placement.h: committed arrays for tests that need a sharded arg without caring about the mesh. */
#ifndef TJIT_TEST_PLACEMENT_H
#define TJIT_TEST_PLACEMENT_H

#include "tjit.h"

/* A committed copy of x (an array of ctx) split by rows over devices 0..n-1 of ctx, on a 1-axis
   mesh named "x" (spec "x,_" for a 2-d x). *m and *s are the caller's to free, after the array.
   Fails the current test on an error. */
jit_array *pl_put_rows(jit_ctx *ctx, jit_array *x, int n, jit_mesh **m, jit_sharding **s);

#endif /* TJIT_TEST_PLACEMENT_H */
