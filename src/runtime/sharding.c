/* sharding.c: placement of arrays on meshes (the mesh and spec types are src/ir/mesh_spec.h):
 * jit_mesh_create on a context's devices, jit_device_put, resharding, gathering to the host. In a
 * distributed context a committed array holds only the shards of this process's devices (the
 * others are NULL); gathering one whose mesh spans other processes is collective. */
#include <stdlib.h>
#include <string.h>

#include "runtime/buffers.h"
#include "runtime/error.h"
#include "runtime/runtime.h"
#include "runtime/sharding.h"
#include "runtime/profile.h"

jit_status jit_mesh_create(jit_ctx *ctx, int n_axes, const int64_t *axis_sizes,
                           const char *const *axis_names, const int *device_ids, jit_mesh **out) {
  if (!out) return jit_error(JIT_EINVAL, "jit_mesh_create: out is NULL");
  *out = NULL;
  if (!ctx) return jit_error(JIT_EINVAL, "jit_mesh_create: ctx is NULL");
  return mesh_new(ctx, ctx->n_devices, n_axes, axis_sizes, axis_names, device_ids,
                  "jit_mesh_create", out);
}

/* ---- placement ------------------------------------------------------------------------------- */
static void *alloc_buffer(size_t nbytes) {
  size_t cap = nbytes ? nbytes : 1;
  if (cap > SIZE_MAX - (JIT_ARRAY_ALIGN - 1)) return NULL;
  cap = (cap + JIT_ARRAY_ALIGN - 1) & ~(size_t)(JIT_ARRAY_ALIGN - 1);
  void *p = NULL;
  return posix_memalign(&p, JIT_ARRAY_ALIGN, cap) == 0 ? p : NULL;
}

const jit_mesh *array_mesh(const jit_array *a) { return a->sharding ? a->sharding->mesh : NULL; }

void array_free_shards(jit_array *a) {
  if (a->shards)
    for (int i = 0; i < a->sharding->mesh->n_devices; i++) {
      if (!a->shards[i]) continue; /* another process's device */
      if (a->shard_pool) buf_pool_put(a->shard_pool, a->shards[i], a->shard_cap);
      else free(a->shards[i]);
    }
  if (a->shard_pool) buf_pool_release(a->shard_pool);
  a->shard_pool = NULL;
  free(a->shards);
  a->shards = NULL;
  sharding_unref(a->sharding);
  a->sharding = NULL;
}

/* Which distinct block of a committed array each mesh position holds, as one index (row-major
   over the dims' part counts), and the first position holding each block. blocks[pos] and
   first[block] must have room for the mesh's n_devices entries. */
static void block_map(const jit_sharding *s, int *blocks, int *first) {
  int n = s->mesh->n_devices;
  for (int i = 0; i < n; i++) first[i] = -1;
  for (int pos = 0; pos < n; pos++) {
    int64_t b = 0;
    for (int d = 0; d < s->rank; d++)
      b = b * sharding_dim_parts(s, d) + sharding_shard_index(s, pos, d);
    blocks[pos] = (int)b; /* < n: the parts of all dims multiply to at most n_devices */
    if (first[b] < 0) first[b] = pos;
  }
}

/* The rank of the process that sends block b in a gather: that of its first holder. */
static int block_owner(const jit_sharding *s, const int *first, int b) {
  return s->mesh->device_ids[first[b]] / s->mesh->ctx->n_local_devices;
}

/* Every rank sends the blocks it owns (block_owner), in block order, and receives the others':
   src[b] then points at block b's shard bytes. *bufs holds what to free afterwards (its last
   entry the send buffer unless the link kept it). */
static jit_status gather_blocks(const jit_array *a, const int *first, const void **src,
                                void ***bufs) {
  const jit_sharding *s = a->sharding;
  jit_ctx *ctx = s->mesh->ctx;
  int n = s->mesh->n_devices, np = ctx->process_count, me = ctx->process_index;
  size_t sb = a->shard_nbytes;
  jit_status st = JIT_OK;
  size_t *bytes = calloc((size_t)np, sizeof *bytes);
  void **recv = calloc((size_t)np + 1, sizeof *recv);
  *bufs = recv;
  if (!bytes || !recv) {
    free(bytes);
    return jit_error(JIT_ENOMEM, "jit_array_to_host: out of memory");
  }
  for (int b = 0; b < n; b++)
    if (first[b] >= 0) bytes[block_owner(s, first, b)] += sb;
  for (int r = 0; r < np && st == JIT_OK; r++)
    if (!(recv[r] = malloc(bytes[r] + 1))) st = jit_error(JIT_ENOMEM, "jit_array_to_host: out of memory");
  size_t *off = calloc((size_t)np, sizeof *off);
  if (!off && st == JIT_OK) st = jit_error(JIT_ENOMEM, "jit_array_to_host: out of memory");
  for (int b = 0; b < n && st == JIT_OK; b++) {
    if (first[b] < 0) continue;
    int r = block_owner(s, first, b);
    if (r == me) memcpy((char *)recv[r] + off[r], a->shards[first[b]], sb);
    src[b] = (char *)recv[r] + off[r];
    off[r] += sb;
  }
  bool kept = false;
  if (st == JIT_OK)
    st = dist_exchange(ctx, recv[me], bytes[me], recv, bytes, &kept,
                       "jit_array_to_host: gathering from the other processes");
  if (kept) recv[me] = NULL;
  free(off);
  free(bytes);
  return st;
}

jit_status array_gather(const jit_array *a, void *dst) {
  if (!a->sharding) {
    if (a->nbytes) memcpy(dst, a->data, a->nbytes);
    return JIT_OK;
  }
  const jit_sharding *s = a->sharding;
  int n = s->mesh->n_devices;
  jit_status st = JIT_OK;
  uint64_t t0 = prof_begin();
  int *blocks = malloc(2 * (size_t)n * sizeof *blocks);
  const void **src = calloc((size_t)n, sizeof *src);
  void **bufs = NULL;
  if (!blocks || !src) TRY(jit_error(JIT_ENOMEM, "jit_array_to_host: out of memory"));
  int *first = blocks + n;
  block_map(s, blocks, first);
  bool collective = false;
  TRY(mesh_read_access(s->mesh, "jit_array_to_host", &collective));
  if (collective)
    TRY(gather_blocks(a, first, src, &bufs));
  else
    for (int b = 0; b < n; b++) src[b] = first[b] >= 0 ? a->shards[first[b]] : NULL;
  size_t esize = jit_dtype_size(a->dtype);
  int64_t zero[JIT_MAX_RANK] = {0}, local[JIT_MAX_RANK];
  sharding_shard_shape(s, a->shape, local);
  for (int b = 0; b < n; b++) {
    if (first[b] < 0) continue;
    int64_t start[JIT_MAX_RANK], size[JIT_MAX_RANK];
    sharding_shard_box(s, a->shape, first[b], start, size);
    sharding_copy_box(dst, a->shape, start, src[b], local, zero, size, a->rank, esize);
  }
  prof_end(t0, "copy", "gather to host", 1, &(prof_arg){"bytes", NULL, (int64_t)a->nbytes});
fail:
  for (int r = 0; bufs && s->mesh->ctx && r < s->mesh->ctx->process_count; r++) free(bufs[r]);
  free(bufs);
  free(blocks);
  free(src);
  return st;
}

/* The overlap of a source box and a destination box: its start offsets in each, its size, and
   its element count (0: they do not meet). */
static uint64_t box_overlap(int rank, const int64_t *sstart, const int64_t *ssize,
                            const int64_t *dstart, const int64_t *dsize, int64_t *soff,
                            int64_t *doff, int64_t *size) {
  uint64_t n = 1;
  for (int d = 0; d < rank; d++) {
    int64_t lo = sstart[d] > dstart[d] ? sstart[d] : dstart[d];
    int64_t hs = sstart[d] + ssize[d], hd = dstart[d] + dsize[d];
    int64_t hi = hs < hd ? hs : hd;
    size[d] = hi > lo ? hi - lo : 0;
    soff[d] = lo - sstart[d];
    doff[d] = lo - dstart[d];
    n *= (uint64_t)size[d];
  }
  return n;
}

/* The first position of mesh s whose device is process proc's and holds block b, or -1. */
static int block_holder(const jit_sharding *s, const int *blocks, int b, int proc) {
  const jit_ctx *ctx = s->mesh->ctx;
  for (int q = 0; q < s->mesh->n_devices; q++)
    if (blocks[q] == b && (!ctx || s->mesh->device_ids[q] / ctx->n_local_devices == proc)) return q;
  return -1;
}

/* Whether every process finds, among its own devices' blocks of src, all it needs to fill its
   devices' shards of ds (then resharding needs no communication: e.g. to the same sharding, or
   to a replicated one from one replicated on every process). The same answer on every rank: it
   depends on the shardings alone. */
static bool reshard_is_local(const jit_array *src, const jit_sharding *ds) {
  const jit_sharding *ss = src->sharding;
  int ns = ss->mesh->n_devices, n_local = ss->mesh->ctx->n_local_devices;
  int *blocks = malloc(2 * (size_t)ns * sizeof *blocks);
  if (!blocks) return false; /* the gathering path reports the lack of memory */
  block_map(ss, blocks, blocks + ns);
  bool local = true;
  for (int p = 0; p < ds->mesh->n_devices && local; p++) {
    int proc = ds->mesh->device_ids[p] / n_local;
    int64_t dstart[JIT_MAX_RANK], dsize[JIT_MAX_RANK];
    sharding_shard_box(ds, src->shape, p, dstart, dsize);
    for (int b = 0; b < ns && local; b++) {
      int pos = blocks[ns + b];
      if (pos < 0) continue;
      int64_t sstart[JIT_MAX_RANK], ssize[JIT_MAX_RANK], soff[JIT_MAX_RANK], doff[JIT_MAX_RANK];
      int64_t size[JIT_MAX_RANK];
      sharding_shard_box(ss, src->shape, pos, sstart, ssize);
      if (box_overlap(src->rank, sstart, ssize, dstart, dsize, soff, doff, size) &&
          block_holder(ss, blocks, b, proc) < 0)
        local = false;
    }
  }
  free(blocks);
  return local;
}

/* Fills every shard of dst (committed, buffers allocated) from src, copying each destination
   box from the overlapping source blocks directly. A block the destination device already holds
   in src is copied locally; any other comes from the block's first holder on this process and
   counts as moved (every block needed must be on this process: see reshard_is_local). */
static jit_status reshard(const jit_array *src, jit_array *dst) {
  const jit_sharding *ds = dst->sharding, *ss = src->sharding;
  size_t esize = jit_dtype_size(src->dtype);
  int rank = src->rank;
  int ns = ss ? ss->mesh->n_devices : 1;
  int me = src->ctx ? src->ctx->process_index : 0;
  int *blocks = malloc(2 * (size_t)ns * sizeof *blocks);
  if (!blocks) return jit_error(JIT_ENOMEM, "jit_device_put: out of memory");
  int *first = blocks + ns;
  if (ss) {
    block_map(ss, blocks, first);
  } else { /* uncommitted: one block, the whole array, on device 0 */
    blocks[0] = 0;
    first[0] = 0;
  }
  /* Shard buffers hold the padded block shape; the box sits at its origin. */
  int64_t slocal[JIT_MAX_RANK], dlocal[JIT_MAX_RANK];
  if (ss) sharding_shard_shape(ss, src->shape, slocal);
  else
    for (int d = 0; d < rank; d++) slocal[d] = src->shape[d];
  sharding_shard_shape(ds, src->shape, dlocal);
  uint64_t moved = 0;
  for (int p = 0; p < ds->mesh->n_devices; p++) {
    int dev = ds->mesh->device_ids[p];
    if (!dst->shards[p]) continue; /* another process's device */
    int64_t dstart[JIT_MAX_RANK], dsize[JIT_MAX_RANK];
    sharding_shard_box(ds, src->shape, p, dstart, dsize);
    int here = ss ? mesh_position(ss->mesh, dev) : (dev == 0 ? 0 : -1);
    for (int b = 0; b < ns; b++) {
      if (first[b] < 0) continue;
      int64_t sstart[JIT_MAX_RANK], ssize[JIT_MAX_RANK];
      if (ss) {
        sharding_shard_box(ss, src->shape, first[b], sstart, ssize);
      } else {
        for (int d = 0; d < rank; d++) sstart[d] = 0, ssize[d] = src->shape[d];
      }
      int64_t size[JIT_MAX_RANK], soff[JIT_MAX_RANK], doff[JIT_MAX_RANK];
      uint64_t n = box_overlap(rank, sstart, ssize, dstart, dsize, soff, doff, size);
      if (n == 0) continue;
      int from = here >= 0 && blocks[here] == b ? here : ss ? block_holder(ss, blocks, b, me) : 0;
      if (from < 0) { /* reshard_is_local said otherwise: a bug, not a crash */
        free(blocks);
        return jit_error(JIT_EINTERNAL, "jit_device_put: block %d is not on process %d", b, me);
      }
      const char *sbuf = ss ? src->shards[from] : src->data;
      sharding_copy_box(dst->shards[p], dlocal, doff, sbuf, slocal, soff, size, rank, esize);
      int from_dev = ss ? ss->mesh->device_ids[from] : 0;
      if (from_dev != dev) moved += n * esize;
    }
  }
  free(blocks);
  dst->bytes_moved = moved;
  return JIT_OK;
}

jit_status jit_device_put(const jit_array *a, const jit_sharding *s, jit_array **out) {
  static const char who[] = "jit_device_put";
  jit_status st = JIT_OK;
  jit_array *b = NULL;
  if (!out) return jit_error(JIT_EINVAL, "%s: out is NULL", who);
  *out = NULL;
  if (!a) return jit_error(JIT_EINVAL, "%s: array is NULL", who);
  TRY(array_check_live(a, who));
  if (!s) return jit_error(JIT_EINVAL, "%s: sharding is NULL", who);
  if (s->mesh->ctx != a->ctx)
    return jit_error(JIT_EINVAL, "%s: the sharding's mesh belongs to %s than the array", who,
                     s->mesh->ctx ? "another jit_ctx" : "no jit_ctx (it was read from IR text)");
  TRY(sharding_check_array(s, a->dtype, a->rank, a->shape, who));

  int n = s->mesh->n_devices;
  b = calloc(1, sizeof *b);
  if (!b) return jit_error(JIT_ENOMEM, "%s: out of memory", who);
  b->ctx = a->ctx;
  b->dtype = a->dtype;
  b->rank = a->rank;
  for (int d = 0; d < a->rank; d++) b->shape[d] = a->shape[d];
  b->nbytes = a->nbytes;
  b->sharding = sharding_ref((jit_sharding *)s);
  b->serial = array_next_serial(); /* the shards' contents, written before anyone reads them */
  b->shards = calloc((size_t)n, sizeof *b->shards);
  if (!b->shards) TRY(jit_error(JIT_ENOMEM, "%s: out of memory", who));
  int64_t local[JIT_MAX_RANK];
  sharding_shard_shape(s, a->shape, local);
  size_t shard = jit_dtype_size(a->dtype); /* <= nbytes: no overflow */
  for (int d = 0; d < a->rank; d++) shard *= (size_t)local[d];
  b->shard_nbytes = shard;
  for (int i = 0; i < n; i++) {
    if (!ctx_device_local(a->ctx, s->mesh->device_ids[i])) continue;
    b->shards[i] = alloc_buffer(shard);
    if (!b->shards[i])
      TRY(jit_error(JIT_ENOMEM, "%s: out of memory allocating %d shards of %zu bytes", who, n,
                    shard));
  }
  uint64_t t0 = prof_begin();
  bool collective = false;
  if (a->sharding) TRY(mesh_read_access(a->sharding->mesh, who, &collective));
  if (collective && !reshard_is_local(a, s)) {
    /* blocks on other processes: gathered first (collective), then cut as from the host */
    jit_array whole = *a;
    whole.sharding = NULL;
    whole.shards = NULL;
    whole.data = malloc(a->nbytes + 1);
    if (!whole.data) TRY(jit_error(JIT_ENOMEM, "%s: out of memory", who));
    st = array_gather(a, whole.data);
    if (st == JIT_OK) st = reshard(&whole, b);
    free(whole.data);
    TRY(st);
  } else {
    TRY(reshard(a, b));
  }
  prof_end(t0, "copy", "device_put", 2,
           (prof_arg[]){{"bytes", NULL, (int64_t)b->nbytes}, {"moved", NULL, (int64_t)b->bytes_moved}});
  *out = b;
  return JIT_OK;
fail:
  jit_array_free(b);
  return st;
}

/* ---- jit_call: committed args ------------------------------------------------------------------ */
jit_status sharding_check_call(const char *fn_name, int n_args, jit_array *const *args) {
  int first = -1;
  for (int i = 0; i < n_args; i++) {
    if (!args[i]->sharding) continue;
    if (first < 0) {
      first = i;
      continue;
    }
    const jit_mesh *a = args[first]->sharding->mesh, *b = args[i]->sharding->mesh;
    if (mesh_same_devices(a, b)) continue;
    char ta[160], tb[160], ia[256], ib[256];
    ir_type t;
    array_type(args[first], &t);
    ir_format_type(&t, ta, sizeof ta);
    array_type(args[i], &t);
    ir_format_type(&t, tb, sizeof tb);
    mesh_format_ids(a, 32, ia, sizeof ia);
    mesh_format_ids(b, 32, ib, sizeof ib);
    return jit_error(JIT_ESHARDING,
                     "jit_call: %s: Received incompatible devices for jitted computation. Got "
                     "argument args[%d] of %s with shape %s and device ids %s on platform CPU and "
                     "argument args[%d] of %s with shape %s and device ids %s on platform CPU",
                     fn_name, first, fn_name, ta, ia, i, fn_name, tb, ib);
  }
  return JIT_OK;
}

/* ---- partitioned calls -------------------------------------------------------------------------- */
jit_status array_new_committed(jit_ctx *ctx, const ir_type *t, jit_sharding *s, jit_array **out) {
  static const char who[] = "jit_call";
  jit_status st = JIT_OK;
  *out = NULL;
  jit_array *b = calloc(1, sizeof *b);
  if (!b) return jit_error(JIT_ENOMEM, "%s: out of memory", who);
  int n = s->mesh->n_devices;
  b->ctx = ctx;
  b->dtype = t->dtype;
  b->rank = t->rank;
  for (int d = 0; d < t->rank; d++) b->shape[d] = t->dims[d];
  if (!array_byte_size(t->dtype, t->rank, t->dims, &b->nbytes))
    TRY(jit_error(JIT_ESHAPE, "%s: a result's byte size overflows", who));
  b->sharding = sharding_ref(s);
  b->serial = array_next_serial(); /* the shards' contents, written before anyone reads them */
  b->shards = calloc((size_t)n, sizeof *b->shards);
  if (!b->shards) TRY(jit_error(JIT_ENOMEM, "%s: out of memory", who));
  int64_t local[JIT_MAX_RANK];
  sharding_shard_shape(s, b->shape, local);
  array_byte_size(t->dtype, t->rank, local, &b->shard_nbytes);
  /* from the context's reuse pool: warm calls get blocks whose pages are already mapped */
  buf_pool_retain(ctx->buffers);
  b->shard_pool = ctx->buffers;
  for (int i = 0; i < n; i++) {
    size_t cap = 0;
    if (!ctx_device_local(ctx, s->mesh->device_ids[i])) continue; /* another process's */
    b->shards[i] = buf_pool_get(ctx->buffers, b->shard_nbytes ? b->shard_nbytes : 1, &cap);
    if (!b->shards[i])
      TRY(jit_error(JIT_ENOMEM, "%s: out of memory allocating %d shards of %zu bytes", who, n,
                    b->shard_nbytes));
    b->shard_cap = cap;
  }
  *out = b;
  return JIT_OK;
fail:
  jit_array_free(b);
  return st;
}

/* The only split dim when every dim before it has size 1 (each block is then one contiguous
   run of the global buffer), else -1. */
static int contiguous_split(const jit_sharding *s, const int64_t *shape) {
  int split = -1;
  for (int d = 0; d < s->rank; d++) {
    if (!s->n_dim_axes[d]) continue;
    if (split >= 0) return -1;
    split = d;
  }
  for (int d = 0; d < split; d++)
    if (shape[d] != 1) return -1;
  return split;
}

jit_status sharding_device_blocks(const jit_array *a, jit_sharding *s, const void **blocks,
                                  jit_array **tmp) {
  *tmp = NULL;
  int n = s->mesh->n_devices;
  if (a->sharding && sharding_equal(a->sharding, s)) {
    for (int i = 0; i < n; i++) blocks[i] = a->shards[i];
    return JIT_OK;
  }
  if (!a->sharding) {
    if (sharding_is_replicated(s)) { /* read-only: every device reads the one copy */
      for (int i = 0; i < n; i++) blocks[i] = a->data;
      return JIT_OK;
    }
    int split = contiguous_split(s, a->shape);
    if (split >= 0) {
      size_t row = jit_dtype_size(a->dtype);
      for (int d = split + 1; d < a->rank; d++) row *= (size_t)a->shape[d];
      for (int i = 0; i < n; i++) {
        int64_t start[JIT_MAX_RANK], size[JIT_MAX_RANK];
        sharding_shard_box(s, a->shape, i, start, size);
        blocks[i] = (const char *)a->data + (size_t)start[split] * row;
      }
      return JIT_OK;
    }
  }
  jit_status st = jit_device_put(a, s, tmp);
  if (st != JIT_OK) return st;
  for (int i = 0; i < n; i++) blocks[i] = (*tmp)->shards[i];
  return JIT_OK;
}

/* ---- processes ----------------------------------------------------------------------------- */
jit_status jit_array_from_process_local(const jit_sharding *s, jit_dtype dt, int rank,
                                        const int64_t *global_shape, const void *local_data,
                                        size_t local_bytes, jit_array **out) {
  static const char who[] = "jit_array_from_process_local";
  if (!out) return jit_error(JIT_EINVAL, "%s: out is NULL", who);
  *out = NULL;
  if (!s) return jit_error(JIT_EINVAL, "%s: sharding is NULL", who);
  jit_ctx *ctx = s->mesh->ctx;
  if (!ctx) return jit_error(JIT_EINVAL, "%s: the sharding's mesh belongs to no jit_ctx", who);
  if (jit_dtype_size(dt) == 0) return jit_error(JIT_EINVAL, "%s: invalid dtype %d", who, (int)dt);
  if (rank < 0 || rank > JIT_MAX_RANK)
    return jit_error(JIT_ESHAPE, "%s: rank %d is out of range 0..%d", who, rank, JIT_MAX_RANK);
  if (rank > 0 && !global_shape)
    return jit_error(JIT_EINVAL, "%s: global_shape is NULL for rank %d", who, rank);
  for (int d = 0; d < rank; d++)
    if (global_shape[d] < 0)
      return jit_error(JIT_ESHAPE, "%s: dim %d is %lld (must be >= 0)", who, d,
                       (long long)global_shape[d]);
  jit_status st = sharding_check_array(s, dt, rank, global_shape, who);
  if (st != JIT_OK) return st;
  ir_type t = {.dtype = dt, .rank = rank};
  for (int d = 0; d < rank; d++) t.dims[d] = global_shape[d];
  int n = s->mesh->n_devices;
  int *blocks = malloc(2 * (size_t)n * sizeof *blocks), *slot = calloc((size_t)n, sizeof *slot);
  jit_array *a = NULL;
  if (!blocks || !slot) TRY(jit_error(JIT_ENOMEM, "%s: out of memory", who));
  block_map(s, blocks, blocks + n);
  TRY(array_new_committed(ctx, &t, (jit_sharding *)s, &a));
  /* this process's positions in device order; each distinct block takes the next slot */
  int n_slots = 0;
  for (int b = 0; b < n; b++) slot[b] = -1;
  for (int id = 0; id < ctx->n_devices; id++) {
    int p = mesh_position(s->mesh, id);
    if (p < 0 || !ctx_device_local(ctx, id) || slot[blocks[p]] >= 0) continue;
    slot[blocks[p]] = n_slots++;
  }
  if (local_bytes != (size_t)n_slots * a->shard_nbytes || (local_bytes && !local_data))
    TRY(jit_error(JIT_EINVAL, "%s: %s %zu bytes of local data, but this process's devices hold "
                  "%d distinct blocks of %zu bytes (%zu bytes)", who,
                  local_data ? "got" : "NULL for", local_bytes, n_slots, a->shard_nbytes,
                  (size_t)n_slots * a->shard_nbytes));
  for (int p = 0; p < n; p++)
    if (a->shards[p] && a->shard_nbytes)
      memcpy(a->shards[p], (const char *)local_data + (size_t)slot[blocks[p]] * a->shard_nbytes,
             a->shard_nbytes);
  *out = a;
  a = NULL;
fail:
  jit_array_free(a);
  free(blocks);
  free(slot);
  return st;
}
