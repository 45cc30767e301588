/* array.c: host arrays: one dense, 64-byte aligned, row-major buffer on device 0, copied in from
 * and out to user memory; the executor makes its outputs here from IR result types. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/buffers.h"
#include "runtime/error.h"
#include "runtime/runtime.h"
#include "runtime/sharding.h"

bool array_byte_size(jit_dtype dt, int rank, const int64_t *shape, size_t *out) {
  size_t n = jit_dtype_size(dt);
  bool zero = false;
  /* A zero dim makes the array empty whatever the other dims are; only then is an otherwise
     overflowing product fine. */
  for (int i = 0; i < rank; i++) zero |= shape[i] == 0;
  if (zero) {
    *out = 0;
    return true;
  }
  for (int i = 0; i < rank; i++) {
    if ((uint64_t)shape[i] > SIZE_MAX / n) return false;
    n *= (size_t)shape[i];
  }
  *out = n;
  return true;
}

static _Atomic uint64_t last_serial;

uint64_t array_next_serial(void) { return atomic_fetch_add(&last_serial, 1) + 1; }

/* Makes an array with a validated type and uninitialized contents. Never hands out a NULL data
   pointer, even for an empty array, so that kernels and memcpy need no special case. */
static jit_status array_alloc(jit_ctx *ctx, jit_dtype dt, int rank, const int64_t *shape,
                              size_t nbytes, const char *who, jit_array **out) {
  jit_array *a = calloc(1, sizeof *a);
  if (!a) return jit_error(JIT_ENOMEM, "%s: out of memory", who);
  /* Blocks are whole cache lines at least, so vector loops may read to the end of the last. */
  a->data = buf_pool_get(ctx->buffers, nbytes, &a->cap);
  if (!a->data) goto oom;
  a->pool = ctx->buffers;
  buf_pool_retain(a->pool);
  a->ctx = ctx;
  a->dtype = dt;
  a->rank = rank;
  for (int i = 0; i < rank; i++) a->shape[i] = shape[i];
  a->nbytes = nbytes;
  a->serial = array_next_serial();
  *out = a;
  return JIT_OK;
oom:
  free(a);
  return jit_error(JIT_ENOMEM, "%s: out of memory allocating %zu bytes", who, nbytes);
}

jit_status array_new_type(jit_ctx *ctx, const ir_type *t, jit_array **out) {
  size_t nbytes;
  *out = NULL;
  if (!array_byte_size(t->dtype, t->rank, t->dims, &nbytes))
    return jit_error(JIT_ESHAPE, "jit_call: result size overflows");
  return array_alloc(ctx, t->dtype, t->rank, t->dims, nbytes, "jit_call", out);
}

void array_type(const jit_array *a, ir_type *out) {
  memset(out, 0, sizeof *out);
  out->dtype = a->dtype;
  out->rank = a->rank;
  for (int i = 0; i < a->rank; i++) out->dims[i] = a->shape[i];
}

jit_status array_check_live(const jit_array *a, const char *who) {
  if (!a || !a->donated_to[0]) return JIT_OK;
  return jit_error(JIT_EINVAL, "%s: the array was donated to a call of '%s' and is deleted", who,
                   a->donated_to);
}

jit_status array_adopt(jit_array *donor, const ir_type *t, jit_array **out) {
  jit_array *a = calloc(1, sizeof *a);
  *out = NULL;
  if (!a) return jit_error(JIT_ENOMEM, "jit_call: out of memory");
  a->ctx = donor->ctx;
  a->dtype = t->dtype;
  a->rank = t->rank;
  for (int i = 0; i < t->rank; i++) a->shape[i] = t->dims[i];
  a->nbytes = donor->nbytes;
  a->data = donor->data;
  a->pool = donor->pool; /* the donor's reference moves with the buffer */
  a->cap = donor->cap;
  a->serial = array_next_serial(); /* what the call writes there is new contents */
  donor->data = NULL;
  donor->pool = NULL;
  donor->cap = 0;
  *out = a;
  return JIT_OK;
}

/* Gives back a's shards and its buffer (to its pool, or free()). */
static void release_buffers(jit_array *a) {
  array_free_shards(a);
  if (a->pool) {
    buf_pool_put(a->pool, a->data, a->cap);
    buf_pool_release(a->pool);
  } else {
    free(a->data);
  }
}

void array_delete_donated(jit_array *a, const char *fn_name) {
  release_buffers(a);
  a->data = NULL;
  a->pool = NULL;
  a->cap = 0;
  snprintf(a->donated_to, sizeof a->donated_to, "%s", fn_name && fn_name[0] ? fn_name : "fn");
}

jit_status jit_array_from_host(jit_ctx *ctx, jit_dtype dt, int rank, const int64_t *shape,
                               const void *data, jit_array **out) {
  static const char who[] = "jit_array_from_host";
  if (!out) return jit_error(JIT_EINVAL, "%s: out is NULL", who);
  *out = NULL;
  if (!ctx) return jit_error(JIT_EINVAL, "%s: ctx is NULL", who);
  if (jit_dtype_size(dt) == 0) return jit_error(JIT_EINVAL, "%s: invalid dtype %d", who, (int)dt);
  if (rank < 0 || rank > JIT_MAX_RANK)
    return jit_error(JIT_ESHAPE, "%s: rank %d is out of range 0..%d", who, rank, JIT_MAX_RANK);
  if (rank > 0 && !shape) return jit_error(JIT_EINVAL, "%s: shape is NULL for rank %d", who, rank);
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0)
      return jit_error(JIT_ESHAPE, "%s: dim %d is %lld (must be >= 0)", who, i,
                       (long long)shape[i]);
  size_t nbytes;
  if (!array_byte_size(dt, rank, shape, &nbytes))
    return jit_error(JIT_ESHAPE, "%s: the byte size of a %s array of this shape overflows", who,
                     jit_dtype_name(dt));
  if (nbytes > 0 && !data)
    return jit_error(JIT_EINVAL, "%s: data is NULL for %zu bytes", who, nbytes);
  jit_array *a;
  jit_status st = array_alloc(ctx, dt, rank, shape, nbytes, who, &a);
  if (st != JIT_OK) return st;
  if (nbytes) memcpy(a->data, data, nbytes);
  *out = a;
  return JIT_OK;
}

jit_status jit_array_to_host(const jit_array *a, void *dst, size_t dst_bytes) {
  if (!a) return jit_error(JIT_EINVAL, "jit_array_to_host: array is NULL");
  jit_status live = array_check_live(a, "jit_array_to_host");
  if (live != JIT_OK) return live;
  if (dst_bytes < a->nbytes) {
    ir_type t;
    char ty[160];
    array_type(a, &t);
    ir_format_type(&t, ty, sizeof ty);
    return jit_error(JIT_EINVAL, "jit_array_to_host: buffer of %zu bytes is too small for %s (%zu bytes)",
                     dst_bytes, ty, a->nbytes);
  }
  if (a->nbytes && !dst) return jit_error(JIT_EINVAL, "jit_array_to_host: dst is NULL");
  /* A committed array is gathered from its shards (sharding.c). */
  if (a->nbytes) return array_gather(a, dst);
  return JIT_OK;
}

int jit_array_rank(const jit_array *a) { return a ? a->rank : -1; }
const int64_t *jit_array_shape(const jit_array *a) { return a ? a->shape : NULL; }
/* An arbitrary but valid dtype for NULL: the accessor has no way to report an error. */
jit_dtype jit_array_dtype(const jit_array *a) { return a ? a->dtype : JIT_F32; }
size_t jit_array_nbytes(const jit_array *a) { return a ? a->nbytes : 0; }

void jit_array_free(jit_array *a) {
  if (!a) return;
  release_buffers(a);
  free(a);
}
