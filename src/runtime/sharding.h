/* sharding.h: placing arrays on meshes (the mesh and sharding structures are ir/mesh_spec.h): the
 * helpers shared by jit_device_put, jit_call, dumps and the partitioned calls. */
#ifndef TJIT_SHARDING_H
#define TJIT_SHARDING_H

#include "ir/mesh_spec.h"

/* ---- placement (sharding.c): committed arrays -------------------------------------------------
   A committed array (made by jit_device_put) has a sharding and one buffer per device of its mesh
   (replicas hold copies) and data == NULL; an uncommitted one has sharding == NULL and its whole
   value in data, on device 0. */
jit_status array_gather(const jit_array *a, void *dst);  /* committed -> global row-major bytes */
void array_free_shards(jit_array *a);                    /* frees shards and the sharding */
/* The device ids a committed array lives on, in mesh order (NULL: uncommitted). */
const jit_mesh *array_mesh(const jit_array *a);

/* jit_call: JIT_ESHARDING when committed args live on different device lists
   (message in JAX's words, naming both lists); fn_name names the function. */
jit_status sharding_check_call(const char *fn_name, int n_args, jit_array *const *args);

/* ---- partitioned calls (sharding.c) ------------------------------------------------------------- */
/* A committed array of type t laid out as s, its shards (from ctx's buffer pool) uninitialized:
   how a partitioned call makes its results. */
jit_status array_new_committed(jit_ctx *ctx, const ir_type *t, jit_sharding *s, jit_array **out);
/* blocks[pos] = the block of a that mesh position pos of s holds, read-only: the array's own
   shards when it is laid out as s, pointers into an uncommitted array's data when the blocks are
   contiguous runs of it (replicated, or split on the leading non-unit dim only), else the shards
   of *tmp, a copy made by resharding (free it after the call). */
jit_status sharding_device_blocks(const jit_array *a, jit_sharding *s, const void **blocks,
                                  jit_array **tmp);

#endif /* TJIT_SHARDING_H */
