/* spmd_programs.h: the sharded programs of the single-process sharding suites (test_spmd,
 * test_shard_map, test_sharded_call, test_sharding), kept here so that tests/mpi/test_mpi_suites
 * runs the same programs across processes: IR patterns with random shardings, shard_map bodies
 * with each collective and the checks of their results, a program that needs every resharding
 * collective, device_put round trips and the visualize goldens. */
#ifndef TJIT_TEST_SPMD_PROGRAMS_H
#define TJIT_TEST_SPMD_PROGRAMS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "tjit.h"

/* ---- random data and shardings -------------------------------------------------------------- */
uint64_t sp_rng(uint64_t *s); /* splitmix64 */
size_t sp_type_bytes(const ir_type *t);
/* floats uniform in [-2, 2), ints small, bool/u8 0 or 1: numel(t) values of t's dtype */
void sp_fill(const ir_type *t, void *buf, uint64_t *s);
/* got within the dtype's tolerance of want (exact for ints); prints the first miss as `what` */
bool sp_close_enough(const ir_type *t, const void *got, const void *want, const char *what);
/* A random spec for a value of type t over mesh m: each dim split by an unused axis that divides
   it (sometimes two, x+y), or not split. The same seed state gives the same spec. */
jit_sharding *sp_random_sharding(jit_mesh *m, const ir_type *t, uint64_t *s);

/* ---- IR patterns (each partitioned under every sharding of its args) ------------------------- */
/* matmul, batched matmul, softmax, data movement (transpose, reshape, concat, slice), an RNN
   (scan whose carry and xs are sharded) and an MLP */
extern const char *const sp_patterns[];
extern const int sp_n_patterns;

/* ---- shard_map programs (user: the jit_mesh, axes "x" and, for rowsum, "y") ------------------ */
/* x f32[R, C] split "x,_" over x = 4: psum of the column sums (f32[C]), pmean of the blocks
   (f32[R/4, C]), all_gather of the blocks (f32[R, C]), each device's axis_index (f32[4]) */
void sp_sm_collectives(jit_trace *t, const jit_val *a, jit_val *r, void *user);
void sp_check_sm_collectives(int rows, int cols, const float *x, const float *colsum,
                             const float *mean, const float *all, const float *idx);
/* x f32[4, 8] split "x,y" over an mx x my mesh: psum over y of the blocks ("x,_": f32[4, 8/my])
   and over x,y (replicated f32[4/mx, 8/my]); x must hold small integers (exact sums) */
void sp_sm_rowsum(jit_trace *t, const jit_val *a, jit_val *r, void *user);
void sp_check_sm_rowsum(int64_t mx, int64_t my, const float *x, const float *rows,
                        const float *all);
/* vmap of a shard_map over x = 4 (outer), and vmap inside the shard_map's body (inner): x
   f32[B, 8] gives each example's total (f32[B]) and x scaled by its device's index (f32[B, 8]) */
void sp_sm_vmap_outer(jit_trace *t, const jit_val *a, jit_val *r, void *user);
void sp_sm_vmap_inner(jit_trace *t, const jit_val *a, jit_val *r, void *user);
void sp_check_sm_vmap(int batch, const float *x, const float *tot, const float *scaled);

/* One SGD step of a linear model, loss mean((x @ w - y)^2): data-parallel (shard_map over mesh
   axis "data", per-device value_and_grad, pmean) and plain (one device, or partitioned from
   committed args: grad through a sharded call). Args w f32[D, O], x f32[N, D], y f32[N, O];
   results the new w and the loss. */
typedef struct sp_train {
  jit_mesh *m;
  float lr;
} sp_train;
void sp_train_step_sharded(jit_trace *t, const jit_val *a, jit_val *r, void *user);
void sp_train_step_plain(jit_trace *t, const jit_val *a, jit_val *r, void *user);

/* ---- partitioned calls ----------------------------------------------------------------------- */
/* y = relu(x @ w + b); results sin(y) and sum(y) */
void sp_mlp(jit_trace *t, const jit_val *a, jit_val *r, void *user);
/* Every collective the partitioner emits to reshard, in one program of an f32[8, 8] x and w
   (seeded): constraints over a mesh whose axis "x" has 4 devices force all_gather ("x,_" to
   replicated), all_to_all ("x,_" to "_,x"), shard_slice (replicated to "x,_"), reduce_scatter (a
   matmul whose contracted dim is split, wanted as "x,_") and all_reduce (another wanted
   replicated; a max over a split dim). Runs it on c over mesh m (NULL: no constraints, the
   unsharded reference) into out[SP_RESHARD_OUT]; with a mesh, checks that the partitioned
   program holds each of those collectives. */
enum { SP_RESHARD_RESULTS = 6, SP_RESHARD_OUT = 64 * 6 };
void sp_run_every_reshard(jit_ctx *c, const jit_mesh *m, float *out);
/* got against the unsharded want: bit for bit, but for the split matmuls (within f32 rounding) */
void sp_check_every_reshard(const float *got, const float *want);

/* ---- placement ------------------------------------------------------------------------------- */
/* An f32 array holding 0, 1, 2, ... (each value names its own position); gathers a and checks it */
jit_array *sp_iota_f32(jit_ctx *ctx, int rank, const int64_t *shape);
void sp_expect_iota(const jit_array *a);
/* device_put of an f32[8, 16, 8] iota from the host, then from every sharding to every other, on
   meshes of 1, 2, 4 and 8 devices (1-D, 2-D and 3-D, default and permuted device orders) of at
   most max_devices devices; each result gathers back intact, each put to where an array already
   is moves nothing. check_shards (or NULL) looks at each placed array's buffers. Across
   processes, an array on another process's devices alone cannot be read here: that is an
   error naming the process. */
void sp_round_trips(jit_ctx *ctx, int max_devices, void (*check_shards)(const jit_array *));

/* jit_array_visualize(a) must print tests/golden/visualize_NAME.txt ($TJIT_SOURCE_DIR; with
   TJIT_GOLDEN_UPDATE=1 it rewrites the file) */
void sp_expect_visualize_golden(const jit_array *a, const char *name);

#endif /* TJIT_TEST_SPMD_PROGRAMS_H */
