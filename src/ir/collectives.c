/* collectives.c: shared-memory collectives for the device threads of one process. Each call
 * publishes the member's operand, meets the others at a barrier, computes the member's own result
 * from every operand in position order, and meets them again so no operand is reused early.
 * A mutex-and-condvar barrier: race-free by construction (ThreadSanitizer sees the happens-before)
 * and deterministic, since each result is a function of the operands alone. */
#include "ir/collectives.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ir/mesh_spec.h" /* JIT_MAX_DEVICES */
#include "runtime/error.h"

struct coll_group {
  int n;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;            /* members at the current barrier */
  unsigned generation;    /* bumped when a barrier opens */
  const void **ins;       /* per position: the operand published for the current collective */
  bool aborted;           /* a member failed: barriers open at once and collectives fail */
};

jit_status coll_group_new(int n, coll_group **out) {
  *out = NULL;
  if (n < 1) return jit_error(JIT_EINVAL, "collectives: a group needs at least 1 member, got %d", n);
  coll_group *g = calloc(1, sizeof *g);
  if (!g || !(g->ins = calloc((size_t)n, sizeof *g->ins))) {
    free(g);
    return jit_error(JIT_ENOMEM, "collectives: out of memory");
  }
  g->n = n;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  *out = g;
  return JIT_OK;
}

void coll_group_free(coll_group *g) {
  if (!g) return;
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g->ins);
  free(g);
}

/* false when the group was aborted (then nobody waits for the members that will not come) */
static bool barrier(coll_group *g) {
  pthread_mutex_lock(&g->mu);
  unsigned gen = g->generation;
  if (!g->aborted && ++g->arrived == g->n) {
    g->arrived = 0;
    g->generation++;
    pthread_cond_broadcast(&g->cv);
  } else {
    while (gen == g->generation && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
  }
  bool ok = !g->aborted;
  pthread_mutex_unlock(&g->mu);
  return ok;
}

static void set_aborted(coll_group *g, bool on) {
  pthread_mutex_lock(&g->mu);
  g->aborted = on;
  if (!on) g->arrived = 0; /* a fresh start: no member is inside */
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static jit_status aborted(void) {
  return jit_error(JIT_EINTERNAL, COLL_ABORTED_MSG);
}

/* The operands of one collective: every member's, in position order. */
typedef struct coll_operands {
  int n;
  const void *const *ins;
} coll_operands;

/* Shape helpers: the elements before dim (outer) and from dim on (per outer index). */
static int64_t prod(const ir_type *t, int from, int to) {
  int64_t n = 1;
  for (int d = from; d < to; d++) n *= t->dims[d];
  return n;
}

static ir_op reduce_op(uint8_t kind) {
  return kind == IR_COLL_MAX ? IR_MAX : kind == IR_COLL_MIN ? IR_MIN : IR_ADD;
}

/* Sums of f32 and f64 in their own arithmetic: a sum of two floats rounded once to f32 equals the
   interpreter's (add in double, then round), since double holds every such sum's rounding. */
static bool fold_sum_fast(const coll_operands *g, jit_dtype dt, int64_t off, int64_t count, void *out) {
  if (dt == JIT_F32) {
    float *o = out;
    memcpy(o, (const float *)g->ins[0] + off, (size_t)count * sizeof *o);
    for (int q = 1; q < g->n; q++) {
      const float *x = (const float *)g->ins[q] + off;
      for (int64_t i = 0; i < count; i++) o[i] += x[i];
    }
    return true;
  }
  if (dt == JIT_F64) {
    double *o = out;
    memcpy(o, (const double *)g->ins[0] + off, (size_t)count * sizeof *o);
    for (int q = 1; q < g->n; q++) {
      const double *x = (const double *)g->ins[q] + off;
      for (int64_t i = 0; i < count; i++) o[i] += x[i];
    }
    return true;
  }
  return false;
}

/* max and min of f32 as the interpreter defines them: NaN wins, and of two zeros max takes +0
   and min -0 (so the fold is commutative). */
static inline float max_f32(float a, float b, bool max) {
  if (a != a) return a;
  if (b != b) return b;
  if (a != b) return (a > b) == max ? a : b;
  return (signbit(a) != 0) == max ? b : a;
}

static bool fold_minmax_fast(const coll_operands *g, jit_dtype dt, uint8_t kind, int64_t off,
                             int64_t count, void *out) {
  if (dt != JIT_F32) return false;
  bool max = kind == IR_COLL_MAX;
  float *o = out;
  memcpy(o, (const float *)g->ins[0] + off, (size_t)count * sizeof *o);
  for (int q = 1; q < g->n; q++) {
    const float *x = (const float *)g->ins[q] + off;
    for (int64_t i = 0; i < count; i++) o[i] = max_f32(o[i], x[i], max);
  }
  return true;
}

/* out[i] = fold over members q of ins[q][at(q) + i], i < count, in position order. */
static void fold(const coll_operands *g, jit_dtype dt, uint8_t kind, int64_t src_off, int64_t count,
                 void *out) {
  if (kind == IR_COLL_SUM && fold_sum_fast(g, dt, src_off, count, out)) return;
  if (kind != IR_COLL_SUM && fold_minmax_fast(g, dt, kind, src_off, count, out)) return;
  ir_op op = reduce_op(kind);
  for (int64_t i = 0; i < count; i++) {
    double acc = ir_load_f64(dt, g->ins[0], src_off + i);
    for (int q = 1; q < g->n; q++) {
      double x[2] = {acc, ir_load_f64(dt, g->ins[q], src_off + i)};
      acc = ir_eval_elementwise(op, NULL, dt, dt, x);
    }
    ir_store_f64(dt, out, i, acc);
  }
}

/* Integers reduce exactly in int64 (wrapped to the dtype), as the interpreter does. */
static void fold_int(const coll_operands *g, jit_dtype dt, uint8_t kind, int64_t src_off,
                     int64_t count, void *out) {
  for (int64_t i = 0; i < count; i++) {
    int64_t acc = ir_load_i64(dt, g->ins[0], src_off + i);
    for (int q = 1; q < g->n; q++) {
      int64_t x = ir_load_i64(dt, g->ins[q], src_off + i);
      acc = kind == IR_COLL_MAX ? (x > acc ? x : acc)
            : kind == IR_COLL_MIN ? (x < acc ? x : acc)
                                  : (int64_t)((uint64_t)acc + (uint64_t)x);
    }
    ir_store_i64(dt, out, i, acc);
  }
}

static void reduce_range(const coll_operands *g, jit_dtype dt, uint8_t kind, int64_t src_off,
                         int64_t count, void *out) {
  if (ir_dtype_is_float(dt)) fold(g, dt, kind, src_off, count, out);
  else fold_int(g, dt, kind, src_off, count, out);
}

/* Member p's result, every operand published. */
static jit_status compute(const coll_operands *g, int p, ir_op op, const ir_coll *c, const ir_type *t,
                          void *out) {
  int n = g->n;
  size_t es = jit_dtype_size(t->dtype);
  switch (op) {
  case IR_ALL_REDUCE:
    reduce_range(g, t->dtype, c->kind, 0, ir_type_numel(t), out);
    return JIT_OK;
  case IR_COLLECTIVE_PERMUTE: {
    int src = (int)((((int64_t)p - c->shift) % n + n) % n);
    memcpy(out, g->ins[src], (size_t)ir_type_numel(t) * es);
    return JIT_OK;
  }
  case IR_ALL_GATHER: { /* out[o][q][inner] = ins[q][o][inner] */
    int64_t outer = prod(t, 0, c->dim), inner = prod(t, c->dim, t->rank) * (int64_t)es;
    for (int64_t o = 0; o < outer; o++)
      for (int q = 0; q < n; q++)
        memcpy((unsigned char *)out + (o * n + q) * inner,
               (const unsigned char *)g->ins[q] + o * inner, (size_t)inner);
    return JIT_OK;
  }
  case IR_REDUCE_SCATTER: { /* chunk p of the reduction along dim */
    int64_t outer = prod(t, 0, c->dim), whole = prod(t, c->dim, t->rank), part = whole / n;
    for (int64_t o = 0; o < outer; o++)
      reduce_range(g, t->dtype, c->kind, o * whole + p * part, part,
                   (unsigned char *)out + o * part * (int64_t)es);
    return JIT_OK;
  }
  case IR_ALL_TO_ALL: { /* chunk p (along dim) of every member, concatenated along dim2 */
    ir_type o_t = *t;
    o_t.dims[c->dim] /= n;
    o_t.dims[c->dim2] *= n;
    int64_t total = ir_type_numel(&o_t), chunk = t->dims[c->dim] / n, idx[IR_MAX_RANK];
    for (int64_t j = 0; j < total; j++) {
      int64_t r = j;
      for (int d = o_t.rank; d-- > 0;) {
        idx[d] = r % o_t.dims[d];
        r /= o_t.dims[d];
      }
      int64_t span = c->dim == c->dim2 ? chunk : t->dims[c->dim2];
      int q = (int)(idx[c->dim2] / span);
      idx[c->dim2] %= span;
      idx[c->dim] += (int64_t)p * chunk;
      int64_t src = 0;
      for (int d = 0; d < t->rank; d++) src = src * t->dims[d] + idx[d];
      memcpy((unsigned char *)out + j * (int64_t)es, (const unsigned char *)g->ins[q] + src * (int64_t)es, es);
    }
    return JIT_OK;
  }
  default: /* check() refused it */
    return jit_error(JIT_EINTERNAL, "collectives: op %d", (int)op);
  }
}

/* The checks every member can make alone (so that all of them fail alike, before any waits). */
static jit_status check(const coll_operands *g, int p, ir_op op, const ir_coll *c,
                        const ir_type *t) {
  if (p < 0 || p >= g->n)
    return jit_error(JIT_EINVAL, "collectives: position %d outside the group of %d", p, g->n);
  if (op < IR_ALL_REDUCE || op > IR_AXIS_INDEX)
    return jit_error(JIT_EINVAL, "collectives: '%s' is not a collective",
                     (unsigned)op < IR_N_OPS ? ir_op_name[op] : "?");
  if (op == IR_AXIS_INDEX) return JIT_OK;
  if (!t || !ir_dtype_valid(t->dtype) || t->rank < 0 || t->rank > IR_MAX_RANK)
    return jit_error(JIT_EINVAL, "collectives: bad operand type");
  bool needs_dim = op == IR_ALL_GATHER || op == IR_REDUCE_SCATTER || op == IR_ALL_TO_ALL ||
                   op == IR_SHARD_SLICE;
  if (needs_dim && (c->dim >= t->rank || (op == IR_ALL_TO_ALL && c->dim2 >= t->rank)))
    return jit_error(JIT_EINVAL, "collectives: %s dim %u outside rank %d", ir_op_name[op],
                     (unsigned)c->dim, t->rank);
  if ((op == IR_REDUCE_SCATTER || op == IR_ALL_TO_ALL || op == IR_SHARD_SLICE) &&
      t->dims[c->dim] % g->n != 0)
    return jit_error(JIT_EINVAL, "collectives: %s splits a dim of %lld into %d parts",
                     ir_op_name[op], (long long)t->dims[c->dim], g->n);
  return JIT_OK;
}

jit_status coll_eval(int n, int p, ir_op op, const ir_coll *c, const ir_type *in_t, const void *in,
                     const void *const *ins, void *out) {
  coll_operands g = {n, ins};
  jit_status st = coll_check(n, p, op, c, in_t);
  if (st != JIT_OK) return st;
  if (op == IR_AXIS_INDEX) { /* the member's position: nothing to exchange, nobody to wait for */
    ir_store_i64(JIT_I32, out, 0, p);
    return JIT_OK;
  }
  if (op == IR_SHARD_SLICE) { /* the member's own chunk: nothing to exchange, nobody to wait for */
    size_t es = jit_dtype_size(in_t->dtype);
    int64_t outer = prod(in_t, 0, c->dim), whole = prod(in_t, c->dim, in_t->rank) * (int64_t)es;
    int64_t part = whole / n;
    for (int64_t o = 0; o < outer; o++)
      memcpy((unsigned char *)out + o * part, (const unsigned char *)in + o * whole + p * part,
             (size_t)part);
    return JIT_OK;
  }
  if (!ins)
    return jit_error(JIT_EINVAL, "collectives: %s without the members' operands", ir_op_name[op]);
  return compute(&g, p, op, c, in_t, out);
}

jit_status coll_check(int n, int p, ir_op op, const ir_coll *c, const ir_type *in_t) {
  if (!c) return jit_error(JIT_EINVAL, "collectives: attributes are NULL");
  return check(&(coll_operands){n, NULL}, p, op, c, in_t);
}

void coll_group_publish(coll_group *g, int p, const void *ptr) { g->ins[p] = ptr; }
bool coll_group_barrier(coll_group *g) { return barrier(g); }
const void *const *coll_group_published(const coll_group *g) { return g->ins; }

jit_status coll_run(coll_group *g, int p, ir_op op, const ir_coll *c, const ir_type *in_t,
                    const void *in, void *out) {
  if (!g || !c) return jit_error(JIT_EINVAL, "collectives: group or attributes is NULL");
  if (coll_is_local(op) || p < 0 || p >= g->n) /* no peer needed, or refused before any wait */
    return coll_eval(g->n, p, op, c, in_t, in, NULL, out);
  jit_status st = coll_check(g->n, p, op, c, in_t);
  if (st != JIT_OK) return st; /* every member fails alike, before any waits */
  g->ins[p] = in; /* each member writes only its own slot; the barrier publishes it */
  if (!barrier(g)) return aborted();
  st = compute(&(coll_operands){g->n, g->ins}, p, op, c, in_t, out);
  /* nobody returns (and reuses its operand) before everyone has read it */
  if (!barrier(g)) return aborted();
  return st;
}

/* ---- worlds: every group of a mesh ------------------------------------------------------------ */

struct coll_world {
  int n_axes;
  int64_t sizes[IR_MAX_MESH_AXES];
  int n_devices;
  bool *here;                         /* per device: run by this process (NULL: all are) */
  pthread_mutex_t mu;                 /* guards making groups and aborted */
  bool aborted;                       /* groups made from now on start aborted */
  coll_group **groups[1 << IR_MAX_MESH_AXES]; /* per axes mask: its groups, made on first use */
};

jit_status coll_world_new(const ir_mesh *m, coll_world **out) {
  return coll_world_new_local(m, NULL, out);
}

jit_status coll_world_new_local(const ir_mesh *m, const bool *here, coll_world **out) {
  *out = NULL;
  if (!m || m->n_axes < 1 || m->n_axes > IR_MAX_MESH_AXES)
    return jit_error(JIT_EINVAL, "collectives: a world needs a mesh of 1..%d axes", IR_MAX_MESH_AXES);
  int64_t n = 1;
  for (int i = 0; i < m->n_axes; i++) {
    if (m->sizes[i] < 1 || n * m->sizes[i] > JIT_MAX_DEVICES)
      return jit_error(JIT_EINVAL, "collectives: bad mesh axis size %lld", (long long)m->sizes[i]);
    n *= m->sizes[i];
  }
  coll_world *w = calloc(1, sizeof *w);
  if (!w || (here && !(w->here = malloc((size_t)n * sizeof *w->here)))) {
    free(w);
    return jit_error(JIT_ENOMEM, "collectives: out of memory");
  }
  if (here) memcpy(w->here, here, (size_t)n * sizeof *w->here);
  w->n_axes = m->n_axes;
  memcpy(w->sizes, m->sizes, sizeof w->sizes);
  w->n_devices = (int)n;
  pthread_mutex_init(&w->mu, NULL);
  *out = w;
  return JIT_OK;
}

static int64_t group_size(const coll_world *w, unsigned mask) {
  int64_t size = 1;
  for (int i = 0; i < w->n_axes; i++)
    if (mask >> i & 1) size *= w->sizes[i];
  return size;
}

void coll_world_free(coll_world *w) {
  if (!w) return;
  for (int mask = 0; mask < 1 << IR_MAX_MESH_AXES; mask++) {
    if (!w->groups[mask]) continue;
    for (int64_t i = 0; i < w->n_devices / group_size(w, (unsigned)mask); i++)
      coll_group_free(w->groups[mask][i]);
    free(w->groups[mask]);
  }
  pthread_mutex_destroy(&w->mu);
  free(w->here);
  free(w);
}

int coll_world_devices(const coll_world *w) { return w->n_devices; }

static void world_set_aborted(coll_world *w, bool on) {
  pthread_mutex_lock(&w->mu);
  for (int mask = 0; mask < 1 << IR_MAX_MESH_AXES; mask++) {
    if (!w->groups[mask]) continue;
    for (int64_t i = 0; i < w->n_devices / group_size(w, (unsigned)mask); i++)
      if (w->groups[mask][i]) set_aborted(w->groups[mask][i], on);
  }
  w->aborted = on;
  pthread_mutex_unlock(&w->mu);
}

void coll_world_abort(coll_world *w) { world_set_aborted(w, true); }
void coll_world_reset(coll_world *w) { world_set_aborted(w, false); }

/* Device d's group for mask (indexed by its coordinates off the mask) and its position in it. */
static void locate(const coll_world *w, unsigned mask, int d, int *group, int *pos) {
  int64_t coord[IR_MAX_MESH_AXES], r = d;
  for (int i = w->n_axes; i-- > 0;) {
    coord[i] = r % w->sizes[i];
    r /= w->sizes[i];
  }
  int64_t g = 0, p = 0;
  for (int i = 0; i < w->n_axes; i++) {
    if (mask >> i & 1) p = p * w->sizes[i] + coord[i];
    else g = g * w->sizes[i] + coord[i];
  }
  *group = (int)g;
  *pos = (int)p;
}

int coll_world_group_devices(const coll_world *w, unsigned mask, int group, int *devices) {
  int n = 0;
  for (int d = 0; d < w->n_devices; d++) {
    int g, p;
    locate(w, mask, d, &g, &p);
    if (g == group) devices[p] = d, n++;
  }
  return n;
}

/* The members of group gi of mask that this process runs. */
static int local_members(const coll_world *w, unsigned mask, int gi) {
  if (!w->here) return (int)group_size(w, mask);
  int devices[JIT_MAX_DEVICES], n = coll_world_group_devices(w, mask, gi, devices), k = 0;
  for (int q = 0; q < n; q++) k += w->here[devices[q]];
  return k;
}

jit_status coll_world_group(coll_world *w, int device, unsigned mask, coll_group **g, int *group,
                            int *pos, int *member) {
  if (device < 0 || device >= w->n_devices)
    return jit_error(JIT_EINVAL, "collectives: device %d outside the mesh of %d", device, w->n_devices);
  if (!mask || mask >> w->n_axes)
    return jit_error(JIT_EINVAL, "collectives: axes 0x%x outside the mesh's %d axes", mask, w->n_axes);
  if (w->here && !w->here[device])
    return jit_error(JIT_EINVAL, "collectives: device %d is not run by this process", device);
  int n_groups = (int)(w->n_devices / group_size(w, mask));
  locate(w, mask, device, group, pos);
  *member = *pos; /* the device's index among the group's members this process runs */
  if (w->here) {
    int devices[JIT_MAX_DEVICES];
    coll_world_group_devices(w, mask, *group, devices);
    *member = 0;
    for (int q = 0; q < *pos; q++) *member += w->here[devices[q]];
  }
  pthread_mutex_lock(&w->mu);
  jit_status st = JIT_OK;
  if (!w->groups[mask]) {
    coll_group **gs = calloc((size_t)n_groups, sizeof *gs);
    for (int i = 0; gs && i < n_groups && st == JIT_OK; i++) {
      int k = local_members(w, mask, i);
      if (k > 0) st = coll_group_new(k, &gs[i]);
    }
    if (!gs || st != JIT_OK) {
      for (int i = 0; gs && i < n_groups; i++) coll_group_free(gs[i]);
      free(gs);
      st = jit_error(JIT_ENOMEM, "collectives: out of memory");
    } else {
      for (int i = 0; i < n_groups; i++)
        if (gs[i]) gs[i]->aborted = w->aborted;
      w->groups[mask] = gs;
    }
  }
  *g = st == JIT_OK ? w->groups[mask][*group] : NULL;
  pthread_mutex_unlock(&w->mu);
  return st;
}

jit_status coll_world_run(coll_world *w, int device, ir_op op, const ir_coll *c,
                          const ir_type *in_t, const void *in, void *out) {
  if (!w || !c) return jit_error(JIT_EINVAL, "collectives: world or attributes is NULL");
  coll_group *g;
  int group, pos, member;
  jit_status st = coll_world_group(w, device, c->axes, &g, &group, &pos, &member);
  if (st != JIT_OK) return st;
  return coll_run(g, pos, op, c, in_t, in, out);
}
