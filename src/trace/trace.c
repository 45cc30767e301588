/* trace.c: the tracer's core: runs a trace function into an IR function, keeps the table from
 * jit_val handles to instructions, the sticky error and the pending location; op helpers. */
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_internal.h"

/* The tracer's only static state, an atomic counter, so that concurrent traces stay
   independent; it only makes tags differ between traces. */
static atomic_uint next_tag;

trace_text trace_ty(const ir_type *t) {
  trace_text r;
  ir_format_type(t, r.s, sizeof r.s);
  return r;
}

trace_text trace_num(double v) {
  trace_text r;
  if (isnan(v)) {
    snprintf(r.s, sizeof r.s, "nan");
    return r;
  }
  if (v == floor(v) && fabs(v) < 1e15) { /* integers as integers: 100, not 1e+02 */
    snprintf(r.s, sizeof r.s, "%.0f", v);
    return r;
  }
  for (int p = 1; p <= 17; p++) {
    snprintf(r.s, sizeof r.s, "%.*g", p, v);
    if (strtod(r.s, NULL) == v) break;
  }
  return r;
}

trace_text trace_i64list(int n, const int64_t *v) {
  trace_text r;
  size_t len = 0;
  r.s[len++] = '[';
  for (int i = 0; i < n && len < sizeof r.s - 24; i++)
    len += (size_t)snprintf(r.s + len, sizeof r.s - len, "%s%lld", i ? "," : "", (long long)v[i]);
  snprintf(r.s + len, sizeof r.s - len, "]");
  return r;
}

trace_text trace_intlist(int n, const int *v) {
  trace_text r;
  size_t len = 0;
  r.s[len++] = '[';
  for (int i = 0; i < n && len < sizeof r.s - 16; i++)
    len += (size_t)snprintf(r.s + len, sizeof r.s - len, "%s%d", i ? "," : "", v[i]);
  snprintf(r.s + len, sizeof r.s - len, "]");
  return r;
}

/* ---- errors and locations ------------------------------------------------------------------- */

static jit_status record(jit_trace *t, const char *op, ir_loc loc, jit_status s, const char *fmt,
                         va_list ap) {
  if (t->status != JIT_OK) return t->status;
  size_t n = sizeof t->msg;
  int w = snprintf(t->msg, n, "%s", t->name);
  if (op && w >= 0 && (size_t)w < n) w += snprintf(t->msg + w, n - (size_t)w, ": %s", op);
  if (loc.file && w >= 0 && (size_t)w < n)
    w += snprintf(t->msg + w, n - (size_t)w, " at %s:%d", loc.file, loc.line);
  if (w >= 0 && (size_t)w < n) w += snprintf(t->msg + w, n - (size_t)w, ": ");
  if (w >= 0 && (size_t)w < n) vsnprintf(t->msg + w, n - (size_t)w, fmt, ap);
  t->status = s;
  jit_error(s, "%s", t->msg);
  return s;
}

jit_status op_fail(op_ctx *c, jit_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(c->t, c->op, c->loc, s, fmt, ap);
  va_end(ap);
  return s;
}

static jit_status trace_fail_at(jit_trace *t, jit_status s, const char *fmt, ...) JIT_PRINTF(3, 4);
static jit_status trace_fail_at(jit_trace *t, jit_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(t, t->outer_op, t->outer_loc, s, fmt, ap);
  va_end(ap);
  return s;
}

jit_trace *jit_trace_at(jit_trace *t, const char *file, int line) {
  if (!t) return t;
  if (t->n_locs == TRACE_MAX_LOCS) {
    /* nesting this deep: the oldest entry is the least likely to be popped correctly */
    memmove(t->locs, t->locs + 1, (TRACE_MAX_LOCS - 1) * sizeof *t->locs);
    t->n_locs--;
  }
  t->locs[t->n_locs++] = (ir_loc){.file = file, .line = file ? line : 0};
  return t;
}

bool op_begin(jit_trace *t, const char *op, op_ctx *c) {
  if (!t) return false;
  c->t = t;
  c->op = op;
  c->loc = t->n_locs ? t->locs[--t->n_locs] : (ir_loc){0}; /* a location belongs to one op */
  return t->status == JIT_OK;
}

void jit_trace_fail(jit_trace *t, const char *message) {
  op_ctx c;
  if (!op_begin(t, NULL, &c)) return;
  op_fail(&c, JIT_EINVAL, "%s", message ? message : "trace failed");
}

const void *jit_trace_static_args(jit_trace *t, size_t *len) {
  if (len) *len = t ? t->req->static_len : 0;
  return t ? t->req->static_args : NULL;
}

/* ---- the value table ------------------------------------------------------------------------- */

static trace_val *lookup(jit_trace *t, jit_val v) {
  uint32_t idx = v.id & TRACE_INDEX_MASK;
  if (!t || v.id >> TRACE_INDEX_BITS != t->tag || idx == 0 || idx > t->n_vals) return NULL;
  return &t->vals[idx - 1];
}

static jit_val add_val(op_ctx *c, trace_val tv);

/* The value of an enclosing trace's handle v inside t (captured through every trace between,
   each of which must allow it), or NULL when it cannot be. A weak scalar is copied (it has no
   ref); a typed value becomes a placeholder param of t. */
static trace_val *capture(op_ctx *c, jit_trace *t, jit_val v) {
  if (!t->req || !t->req->captured || !t->parent) return NULL;
  for (uint32_t k = 0; k < t->n_caps; k++)
    if (t->caps[k].outer.id == v.id) return lookup(t, t->caps[k].local);
  trace_val *pv = lookup(t->parent, v);
  if (!pv) pv = capture(c, t->parent, v);
  if (!pv) return NULL;
  trace_val local = *pv;
  local.shape = NULL;
  op_ctx here = {.t = t, .op = c->op, .loc = c->loc};
  if (pv->ref == IR_NOREF) { /* a weak scalar: a copy of its value */
    jit_val nv = add_val(&here, local);
    return nv.id ? lookup(t, nv) : NULL;
  }
  if (!ir_grow((void **)&t->caps, &t->cap_caps, t->n_caps + 1, sizeof *t->caps)) {
    op_fail(c, JIT_ENOMEM, "out of memory");
    return NULL;
  }
  ir_ty ty = ir_type_intern(t->f, ir_type_of(t->parent->f, pv->ref));
  ir_attr a = {0};
  a.axis = -1; /* a placeholder, see finish_captures */
  ir_ref outer_ref = pv->ref;
  local.ref = ty == UINT32_MAX ? IR_NOREF : ir_emit(t->f, IR_PARAM, ty, 0, NULL, &a, (ir_loc){0});
  if (local.ref == IR_NOREF) {
    op_fail(c, JIT_ENOMEM, "out of memory");
    return NULL;
  }
  jit_val nv = add_val(&here, local);
  if (!nv.id) return NULL;
  t->caps[t->n_caps++] = (trace_capture){v, outer_ref, local.ref, nv};
  return lookup(t, nv);
}

trace_val *op_val(op_ctx *c, jit_val v, const char *what) {
  trace_val *tv = lookup(c->t, v);
  if (!tv && v.id && c->t->req && c->t->req->captured) {
    tv = capture(c, c->t, v);
    if (!tv && c->t->status == JIT_OK) {
      jit_trace *p = c->t->parent;
      while (p && !lookup(p, v)) p = p->parent;
      if (p) {
        op_fail(c, JIT_EINVAL, "%s is a value of an enclosing trace that cannot be captured here "
                               "(only scan bodies capture)", what);
        return NULL;
      }
    }
    if (tv) return tv;
  }
  if (!tv) {
    jit_trace *p = c->t->parent;
    while (p && !lookup(p, v)) p = p->parent;
    if (v.id == 0)
      op_fail(c, JIT_EINVAL, "%s is an invalid value (id 0)", what);
    else if (p) /* a closure over the caller's value: transformations take values as args */
      op_fail(c, JIT_EINVAL,
              "%s is a value of the enclosing trace, not of %s's function (pass it as an "
              "argument)",
              what, c->t->outer_op);
    else
      op_fail(c, JIT_EINVAL, "%s is not a value of this trace (id %#x)", what, (unsigned)v.id);
  }
  return tv;
}

static jit_val add_val(op_ctx *c, trace_val tv) {
  jit_trace *t = c->t;
  if (t->n_vals == t->cap_vals) {
    if (t->n_vals >= TRACE_INDEX_MASK) {
      op_fail(c, JIT_EUNSUPPORTED, "more than %u values in one trace", TRACE_INDEX_MASK);
      return (jit_val){0};
    }
    uint32_t cap = t->cap_vals ? t->cap_vals * 2 : 64;
    if (cap > TRACE_INDEX_MASK) cap = TRACE_INDEX_MASK;
    trace_val *v = realloc(t->vals, cap * sizeof *v);
    if (!v) {
      op_fail(c, JIT_ENOMEM, "out of memory");
      return (jit_val){0};
    }
    t->vals = v;
    t->cap_vals = cap;
  }
  t->vals[t->n_vals++] = tv;
  return (jit_val){(t->tag << TRACE_INDEX_BITS) | t->n_vals};
}

jit_val op_result(op_ctx *c, ir_ref r) {
  if (r == IR_NOREF || c->t->status != JIT_OK) return (jit_val){0};
  return add_val(c, (trace_val){.ref = r});
}

jit_val op_weak_result(op_ctx *c, double v) {
  if (c->t->status != JIT_OK) return (jit_val){0};
  return add_val(c, (trace_val){.ref = IR_NOREF, .weak = true, .value = v});
}

int jit_val_rank(jit_trace *t, jit_val x) {
  trace_val *tv = lookup(t, x);
  if (!tv) return -1;
  return tv->ref == IR_NOREF ? 0 : ir_type_of(t->f, tv->ref)->rank;
}

const int64_t *jit_val_shape(jit_trace *t, jit_val x) {
  trace_val *tv = lookup(t, x);
  if (!tv) return NULL;
  if (!tv->shape) {
    /* a copy in the trace's arena: f->types moves when it grows, the copy never does */
    int rank = tv->ref == IR_NOREF ? 0 : ir_type_of(t->f, tv->ref)->rank;
    int64_t *s = ir_arena_array(&t->arena, rank ? (size_t)rank : 1, sizeof *s);
    if (!s) return NULL;
    if (rank) memcpy(s, ir_type_of(t->f, tv->ref)->dims, (size_t)rank * sizeof *s);
    tv->shape = s;
  }
  return tv->shape;
}

jit_dtype jit_val_dtype(jit_trace *t, jit_val x) {
  trace_val *tv = lookup(t, x);
  if (!tv) return (jit_dtype)-1; /* not a dtype: jit_dtype_name says "?", jit_full rejects it */
  return tv->ref == IR_NOREF ? JIT_F32 : ir_type_of(t->f, tv->ref)->dtype;
}

/* ---- emission ------------------------------------------------------------------------------- */

ir_ref op_emit(op_ctx *c, ir_op op, uint32_t n_args, const ir_ref *args, const ir_attr *attr,
               const ir_type *declared) {
  ir_func *f = c->t->f;
  const ir_type *small[4] = {0}, **tys = small;
  ir_ref r = IR_NOREF;
  if (c->t->status != JIT_OK) return IR_NOREF;
  if (n_args > 4 && !(tys = malloc(n_args * sizeof *tys))) {
    op_fail(c, JIT_ENOMEM, "out of memory");
    return IR_NOREF;
  }
  for (uint32_t i = 0; i < n_args; i++) tys[i] = ir_type_of(f, args[i]);
  ir_type out;
  char why[768];
  jit_status st = ir_infer_type(op, n_args, tys, attr, declared, &out, why, sizeof why);
  if (st != JIT_OK) {
    op_fail(c, st, "%s", why);
    goto done;
  }
  r = ir_emit(f, op, ir_type_intern(f, &out), n_args, args, attr, c->loc);
  if (r == IR_NOREF) op_fail(c, JIT_ENOMEM, "out of memory");
done:
  if (tys != small) free(tys);
  return r;
}

ir_ref op_binary(op_ctx *c, ir_op op, ir_ref x, ir_ref y) {
  ir_ref a[2] = {x, y};
  return op_emit(c, op, 2, a, NULL, NULL);
}

ir_ref op_const(op_ctx *c, jit_dtype dt, int rank, const int64_t *dims, double v) {
  ir_type ty = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++) ty.dims[i] = dims[i];
  ir_attr a = {0};
  a.value = v;
  return op_emit(c, IR_CONST, 0, NULL, &a, &ty);
}

ir_ref op_typed(op_ctx *c, jit_val v, const char *what) {
  trace_val *tv = op_val(c, v, what);
  if (!tv) return IR_NOREF;
  if (tv->ref == IR_NOREF) {
    /* the first typeless use makes the weak scalar an f32 constant, shared by later ones */
    size_t i = (size_t)(tv - c->t->vals);
    ir_ref r = op_const(c, JIT_F32, 0, NULL, tv->value);
    c->t->vals[i].ref = r;
    return r;
  }
  return tv->ref;
}

ir_ref op_weak_as(op_ctx *c, const trace_val *w, jit_dtype dt) {
  if (!ir_value_fits(dt, w->value)) {
    op_fail(c, JIT_EDTYPE, "weak scalar %s cannot take dtype %s", trace_num(w->value).s,
            jit_dtype_name(dt));
    return IR_NOREF;
  }
  return op_const(c, dt, 0, NULL, w->value);
}

ir_ref op_broadcast(op_ctx *c, ir_ref x, int rank, const int64_t *dims) {
  if (x == IR_NOREF) return x;
  ir_type xt = *op_type(c, x);
  ir_type to = {.dtype = xt.dtype, .rank = rank};
  for (int i = 0; i < rank; i++) to.dims[i] = dims[i];
  if (ir_type_equal(&xt, &to)) return x;
  ir_attr a = {0};
  a.dims.n = (uint8_t)xt.rank;
  for (int i = 0; i < xt.rank; i++) a.dims.d[i] = (uint8_t)(i + rank - xt.rank);
  return op_emit(c, IR_BROADCAST, 1, &x, &a, &to);
}

ir_ref op_reshape(op_ctx *c, ir_ref x, int rank, const int64_t *dims) {
  if (x == IR_NOREF) return x;
  ir_type to = {.dtype = op_type(c, x)->dtype, .rank = rank};
  for (int i = 0; i < rank; i++) to.dims[i] = dims[i];
  if (ir_type_equal(op_type(c, x), &to)) return x;
  return op_emit(c, IR_RESHAPE, 1, &x, NULL, &to);
}

bool op_axis(int axis, int rank, int *out) {
  if (axis < -rank || axis >= rank) return false;
  *out = axis < 0 ? axis + rank : axis;
  return true;
}

bool op_check_shape(op_ctx *c, int rank, const int64_t *shape) {
  if (rank < 0 || rank > JIT_MAX_RANK) {
    op_fail(c, JIT_ESHAPE, "rank %d out of range 0..%d", rank, JIT_MAX_RANK);
    return false;
  }
  if (rank > 0 && !shape) {
    op_fail(c, JIT_EINVAL, "shape is NULL");
    return false;
  }
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0) {
      op_fail(c, JIT_ESHAPE, "negative dim in shape %s", trace_i64list(rank, shape).s);
      return false;
    }
    if (shape[i] == 0) continue;
    if (n > INT64_MAX / shape[i]) {
      op_fail(c, JIT_ESHAPE, "element count of shape %s overflows", trace_i64list(rank, shape).s);
      return false;
    }
    n *= shape[i];
  }
  return true;
}

/* ---- trace_function ---------------------------------------------------------------------- */

/* Checks the request and emits the params; on failure the error is recorded on t. */
static void add_params(jit_trace *t, jit_val *args) {
  const trace_request *req = t->req;
  op_ctx c = {.t = t, .op = NULL};
  for (int i = 0; i < req->n_args && t->status == JIT_OK; i++) {
    ir_type ty;
    char why[256];
    jit_status st =
        ir_infer_type(IR_PARAM, 0, NULL, NULL, &req->arg_types[i], &ty, why, sizeof why);
    if (st != JIT_OK) {
      trace_fail_at(t, JIT_EINVAL, "argument %d: %s", i, why);
      return;
    }
    args[i] = op_result(&c, ir_emit_param(t->f, ir_type_intern(t->f, &ty)));
    if (!args[i].id) op_fail(&c, JIT_ENOMEM, "out of memory");
  }
}

/* The result refs, checking that each result was set to a value of this trace. */
static void collect_results(jit_trace *t, const jit_val *res, ir_ref *refs) {
  op_ctx c = {.t = t, .op = NULL};
  for (int i = 0; i < t->req->n_results && t->status == JIT_OK; i++) {
    if (res[i].id == 0) {
      trace_fail_at(t, JIT_EINVAL, "result %d was not set", i);
      return;
    }
    if (!lookup(t, res[i]) && !capture(&c, t, res[i]) && t->status == JIT_OK) {
      trace_fail_at(t, JIT_EINVAL, "result %d is not a value of this trace (id %#x)", i,
                    (unsigned)res[i].id);
      return;
    }
    refs[i] = op_typed(&c, res[i], "result"); /* a weak result becomes f32 */
  }
}

/* Makes the captured placeholders real params, before the declared ones: rebuilds t->f in
   order, mapping each placeholder to its param (the scan bodies move along unchanged). */
static void finish_captures(jit_trace *t) {
  ir_func *f = t->f, *nf = ir_func_new(f->name);
  ir_ref *map = malloc((f->n_ins ? f->n_ins : 1) * sizeof *map);
  ir_ref *ops = NULL, *res = NULL;
  uint32_t ops_cap = 0;
  if (!nf || !map) goto oom;
  for (uint32_t k = 0; k < t->n_caps; k++) {
    ir_ty ty = ir_type_intern(nf, ir_type_of(f, t->caps[k].local_ref));
    map[t->caps[k].local_ref] = ty == UINT32_MAX ? IR_NOREF : ir_emit_param(nf, ty);
  }
  for (uint32_t i = 0; i < f->n_params; i++) {
    ir_ty ty = ir_type_intern(nf, ir_type_of(f, i));
    map[i] = ty == UINT32_MAX ? IR_NOREF : ir_emit_param(nf, ty);
  }
  for (uint32_t i = f->n_params; i < f->n_ins; i++) {
    const ir_ins *in = &f->ins[i];
    if (in->op == IR_PARAM) continue; /* a placeholder: mapped above */
    if (!ir_grow((void **)&ops, &ops_cap, in->n_args + 1, sizeof *ops)) goto oom;
    for (uint32_t k = 0; k < in->n_args; k++) ops[k] = map[in->args[k]];
    ir_ty ty = ir_type_intern(nf, ir_type_of(f, i));
    map[i] = ty == UINT32_MAX ? IR_NOREF : ir_emit(nf, in->op, ty, in->n_args, ops, &in->attr, in->loc);
  }
  res = malloc((f->n_results ? f->n_results : 1) * sizeof *res);
  if (!res || nf->oom) goto oom;
  for (uint32_t i = 0; i < f->n_results; i++) res[i] = map[f->results[i]];
  if (ir_set_results(nf, f->n_results, res) != JIT_OK) goto oom;
  ir_move_bodies(nf, f);
  ir_func_replace(f, nf);
  nf = NULL;
  ir_ref *outer = malloc(t->n_caps * sizeof *outer);
  if (!outer) goto oom;
  for (uint32_t k = 0; k < t->n_caps; k++) outer[k] = t->caps[k].outer_ref;
  *t->req->captured = outer;
  *t->req->n_captured = t->n_caps;
  goto done;
oom:
  trace_fail_at(t, JIT_ENOMEM, "out of memory");
done:
  ir_func_free(nf);
  free(map);
  free(ops);
  free(res);
}

jit_status trace_function(const trace_request *req, ir_func **out) {
  return trace_run(req, NULL, out);
}

jit_status trace_run(const trace_request *req, const op_ctx *outer, ir_func **out) {
  if (!out) return jit_error(JIT_EINVAL, "trace_function: out is NULL");
  *out = NULL;
  if (!req) return jit_error(JIT_EINVAL, "trace_function: request is NULL");
  const char *name = req->name ? req->name : "main";
  if (!req->fn || req->n_args < 0 || req->n_results < 0 || (req->n_args > 0 && !req->arg_types))
    return jit_error(JIT_EINVAL, "%s: invalid trace request", name);

  jit_status st = JIT_OK;
  jit_val *args = NULL, *res = NULL;
  ir_ref *refs = NULL;
  jit_trace *t = calloc(1, sizeof *t);
  if (!t) return jit_error(JIT_ENOMEM, "%s: out of memory", name);
  t->req = req;
  t->name = name;
  t->tag = atomic_fetch_add(&next_tag, 1) % TRACE_TAG_MASK + 1;
  if (outer) {
    t->outer_op = outer->op;
    t->outer_loc = outer->loc;
    t->parent = outer->t;
  }
  t->f = ir_func_new(req->name);
  size_t na = req->n_args ? (size_t)req->n_args : 1,
         nr = req->n_results ? (size_t)req->n_results : 1;
  args = calloc(na, sizeof *args);
  res = calloc(nr, sizeof *res);
  refs = calloc(nr, sizeof *refs);
  if (!t->f || !args || !res || !refs) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", name);
    goto fail;
  }

  add_params(t, args);
  if (t->status == JIT_OK) req->fn(t, args, res, req->user);
  if (t->status == JIT_OK) collect_results(t, res, refs);
  if (t->status == JIT_OK && (t->f->oom || ir_set_results(t->f, (uint32_t)req->n_results, refs)))
    trace_fail_at(t, JIT_ENOMEM, "out of memory");
  if (req->captured) {
    *req->captured = NULL;
    *req->n_captured = 0;
    if (t->status == JIT_OK && t->n_caps) finish_captures(t);
  }
  if (t->status != JIT_OK) {
    st = jit_error(t->status, "%s", t->msg);
    goto fail;
  }
  *out = t->f;
  t->f = NULL;
fail:
  ir_func_free(t->f);
  ir_arena_free(&t->arena);
  free(t->vals);
  free(t->caps);
  free(t);
  free(args);
  free(res);
  free(refs);
  return st;
}
