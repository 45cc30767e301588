/* mesh_spec.h: device meshes and shardings (the structures behind jit_mesh and jit_sharding) and
 * the geometry of shards: what the IR prints, parses, verifies and partitions. Placing arrays on
 * a context's devices is the runtime's (runtime/sharding.h). */
#ifndef TJIT_MESH_SPEC_H
#define TJIT_MESH_SPEC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "tjit.h"

#define JIT_MAX_DEVICES 4096      /* sanity bound on device ids (all processes) */
#define JIT_MAX_MESH_AXES 8       /* a mesh has 1..JIT_MAX_MESH_AXES named axes */
#define JIT_MESH_AXIS_NAME_MAX 31 /* longest axis name in bytes */

/* ---- meshes (mesh.c) ----------------------------------------------------------------------------
   A mesh is immutable once made and reference counted: jit_mesh_create hands the user one
   reference (dropped by jit_mesh_free) and every sharding holds another, so a sharding stays
   valid after the user frees its mesh. Axis names are identifiers ([A-Za-z_][A-Za-z0-9_]*) other
   than "_", which partition specs use for "not sharded". */
struct jit_mesh {
  atomic_int refs;
  jit_ctx *ctx;        /* whose devices the ids name; NULL for a mesh read from IR text */
  int n_axes;          /* 1..JIT_MAX_MESH_AXES */
  int64_t sizes[JIT_MAX_MESH_AXES];                       /* each >= 1 */
  char names[JIT_MAX_MESH_AXES][JIT_MESH_AXIS_NAME_MAX + 1]; /* distinct */
  int n_devices;       /* product of sizes, 1..JIT_MAX_DEVICES */
  int *device_ids;     /* n_devices distinct ids >= 0, row-major over the axes (last fastest) */
};

/* Validates and makes a mesh (one reference). ctx may be NULL (IR text); when it is not, the ids
   must be devices of ctx, which has n_ctx_devices (ignored for NULL), and device_ids NULL means
   0..n-1. who prefixes error messages. */
jit_status mesh_new(jit_ctx *ctx, int n_ctx_devices, int n_axes, const int64_t *sizes,
                    const char *const *names, const int *device_ids, const char *who,
                    jit_mesh **out);
jit_mesh *mesh_ref(jit_mesh *m);                     /* another reference; returns m */
int  mesh_axis_index(const jit_mesh *m, const char *name, size_t len); /* -1: no such axis */
bool mesh_equal(const jit_mesh *a, const jit_mesh *b); /* same axes, sizes and device ids */
bool mesh_same_devices(const jit_mesh *a, const jit_mesh *b); /* same ids in the same order */
bool mesh_default_ids(const jit_mesh *m);            /* device_ids are 0..n_devices-1 */
void mesh_coords(const jit_mesh *m, int pos, int64_t *coords); /* position -> per-axis coords */
int  mesh_position(const jit_mesh *m, int device_id); /* index into device_ids; -1: not in m */
/* `mesh[x=2,y=4]`, or `mesh[x=2,y=4 devices=[3,2,1,0,...]]` when the ids are not 0..n-1.
   snprintf-like: returns the length the full text needs. */
int  mesh_format(const jit_mesh *m, char *buf, size_t n);
/* The mesh as a partitioned function sees it (axis names and sizes, no devices). */
void mesh_to_ir(const jit_mesh *m, ir_mesh *out);
/* m has im's axes: the same names and sizes in the same order (devices are not compared). */
bool mesh_matches_ir(const jit_mesh *m, const ir_mesh *im);
/* Writes `[0, 1, 2]` (JAX's device id list), at most max_ids ids then `, ...`. snprintf-like. */
int  mesh_format_ids(const jit_mesh *m, int max_ids, char *buf, size_t n);

/* ---- shardings (sharding_spec.c) -------------------------------------------------------------
   A sharding is a mesh plus one entry per array dim: the mesh axes that dim is split over, major
   to minor (none: not sharded). Mesh axes no entry names hold replicas. Immutable and reference
   counted like meshes. Shard geometry follows XLA: a dim of size n split into p parts gives each
   part ceil(n/p) elements, the last parts fewer or none (jit_device_put accepts only even splits,
   as JAX's device_put does, so only IR-level shardings can be uneven). */
struct jit_sharding {
  atomic_int refs;
  jit_mesh *mesh;                                  /* a counted reference */
  int rank;                                        /* spec entries, 0..JIT_MAX_RANK */
  uint8_t n_dim_axes[JIT_MAX_RANK];                /* mesh axes splitting each dim; 0: none */
  uint8_t dim_axes[JIT_MAX_RANK][JIT_MAX_MESH_AXES]; /* their mesh axis indices, major first */
};

/* Makes a sharding from its parts (for passes); an axis may split at most one dim, once. */
jit_status sharding_new(jit_mesh *m, int rank, const uint8_t *n_dim_axes,
                        const uint8_t (*dim_axes)[JIT_MAX_MESH_AXES], jit_sharding **out);
/* Parses a partition spec (the grammar of jit_sharding_create); who prefixes error messages. */
jit_status sharding_parse(jit_mesh *m, const char *spec, const char *who, jit_sharding **out);
jit_sharding *sharding_ref(jit_sharding *s);         /* another reference; returns s */
void sharding_unref(jit_sharding *s);                /* NULL is a no-op */
bool sharding_equal(const jit_sharding *a, const jit_sharding *b); /* NULL equals only NULL */
uint64_t sharding_hash(const jit_sharding *s);       /* consistent with sharding_equal */
bool sharding_is_replicated(const jit_sharding *s);  /* no dim is split */
/* The canonical spec text: `x,_`, `x+y,_`; "" for rank 0. snprintf-like. */
int  sharding_format_spec(const jit_sharding *s, char *buf, size_t n);
/* The IR form `{mesh[x=2,y=4] "x,_"}`. snprintf-like. */
int  sharding_format(const jit_sharding *s, char *buf, size_t n);
/* Parses the IR form at text (leading blanks skipped), making a mesh without a context. On
   success *end points past the closing `}`. Errors are JIT_EINVAL with a message naming what was
   expected. */
jit_status sharding_parse_text(const char *text, const char **end, jit_sharding **out);

int64_t sharding_dim_parts(const jit_sharding *s, int dim); /* product of dim's axis sizes */
int64_t sharding_shard_index(const jit_sharding *s, int pos, int dim); /* pos's part of dim */
/* The per-shard shape of a global shape: ceil(shape[d] / parts) for each dim (the padded block
   size when a split is uneven). */
void sharding_shard_shape(const jit_sharding *s, const int64_t *shape, int64_t *out);
/* The block of a global array of the given shape that mesh position pos holds: start[d] and
   size[d] for d < s->rank (size may be 0 for trailing parts of an uneven split). */
void sharding_shard_box(const jit_sharding *s, const int64_t *shape, int pos, int64_t *start,
                        int64_t *size);
/* JIT_ESHARDING unless s fits an array of this rank and shape with every split even; the message
   starts with who and names the dim, its size and the axes, like JAX's device_put. */
jit_status sharding_check_array(const jit_sharding *s, jit_dtype dt, int rank,
                                const int64_t *shape, const char *who);

/* Copies the box of the given size at src_off in src (shape src_shape) to dst_off in dst (shape
   dst_shape), rank dims of esize bytes. Trailing dims both buffers hold whole merge into one
   memcpy per row. */
void sharding_copy_box(char *dst, const int64_t *dst_shape, const int64_t *dst_off, const char *src,
                       const int64_t *src_shape, const int64_t *src_off, const int64_t *size,
                       int rank, size_t esize);

#endif /* TJIT_MESH_SPEC_H */
