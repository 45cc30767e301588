/* ir.c: the op table's expansions, IR functions, type interning and the instruction builder. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

#include "ir/mesh_spec.h"
#include "runtime/error.h"

const char *const ir_op_name[IR_N_OPS] = {
#define OP_NAME(name, arity, flags, text) text,
    IR_OPDEF(OP_NAME)
#undef OP_NAME
};
const int ir_op_arity[IR_N_OPS] = {
#define OP_ARITY(name, arity, flags, text) arity,
    IR_OPDEF(OP_ARITY)
#undef OP_ARITY
};
const unsigned ir_op_flags[IR_N_OPS] = {
#define OP_FLAGS(name, arity, flags, text) flags,
    IR_OPDEF(OP_FLAGS)
#undef OP_FLAGS
};

ir_func *ir_func_new(const char *name) {
  ir_func *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->name = ir_arena_strdup(&f->arena, name ? name : "main");
  if (!f->name) {
    free(f);
    return NULL;
  }
  return f;
}

static void release(ir_func *f) {
  for (uint32_t i = 0; i < f->n_bodies; i++) ir_func_free(f->bodies[i]);
  free(f->bodies);
  ir_arena_free(&f->arena);
  free(f->types);
  free(f->ins);
  free(f->results);
  free(f->mesh);
  for (uint32_t i = 0; i < f->n_held; i++) sharding_unref(f->held[i]);
  free(f->held);
}

void ir_func_free(ir_func *f) {
  if (!f) return;
  release(f);
  free(f);
}

void ir_func_replace(ir_func *dst, ir_func *src) {
  /* a rebuilt function keeps the mesh of the one it replaces (passes build without one) */
  if (!src->mesh) {
    src->mesh = dst->mesh;
    dst->mesh = NULL;
  }
  release(dst);
  *dst = *src;
  free(src);
}

bool ir_grow(void **p, uint32_t *cap, uint32_t need, size_t size) {
  if (need <= *cap) return true;
  uint64_t n = *cap ? (uint64_t)*cap * 2 : 16;
  while (n < need) n *= 2;
  if (n > UINT32_MAX - 1 || n > SIZE_MAX / size) return false;
  void *q = realloc(*p, (size_t)n * size);
  if (!q) return false;
  *p = q;
  *cap = (uint32_t)n;
  return true;
}

int64_t ir_type_numel(const ir_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

bool ir_type_equal(const ir_type *a, const ir_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

ir_ty ir_type_intern(ir_func *f, const ir_type *t) {
  /* Functions hold tens of distinct types at most; newest first finds repeats fast. */
  for (uint32_t i = f->n_types; i-- > 0;)
    if (ir_type_equal(&f->types[i], t)) return i;
  if (!ir_grow((void **)&f->types, &f->cap_types, f->n_types + 1, sizeof *f->types)) {
    f->oom = true;
    return UINT32_MAX;
  }
  ir_type *n = &f->types[f->n_types];
  memset(n, 0, sizeof *n);
  n->dtype = t->dtype;
  n->rank = t->rank;
  for (int i = 0; i < t->rank; i++) n->dims[i] = t->dims[i];
  return f->n_types++;
}

ir_ty ir_type_make(ir_func *f, jit_dtype dt, int rank, const int64_t *dims) {
  ir_type t = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  return ir_type_intern(f, &t);
}

/* Locations of consecutive instructions mostly share one file: compare with the last one by
   content (a pointer alone can be reused by another string once its owner is freed). */
static const char *intern_file(ir_func *f, const char *file) {
  if (!file) return NULL;
  if (f->last_file && (file == f->last_file || strcmp(file, f->last_file) == 0)) {
    return f->last_file;
  }
  char *copy = ir_arena_strdup(&f->arena, file);
  if (!copy) return NULL;
  f->last_file = copy;
  return copy;
}

ir_ref ir_emit(ir_func *f, ir_op op, ir_ty ty, uint32_t n_args, const ir_ref *args,
               const ir_attr *attr, ir_loc loc) {
  if (f->oom || ty == UINT32_MAX) goto oom;
  if (!ir_grow((void **)&f->ins, &f->cap_ins, f->n_ins + 1, sizeof *f->ins)) goto oom;
  ir_ref *copy = NULL;
  if (n_args) {
    copy = ir_arena_array(&f->arena, n_args, sizeof *copy);
    if (!copy) goto oom;
    memcpy(copy, args, n_args * sizeof *copy);
  }
  const char *file = intern_file(f, loc.file);
  if (loc.file && !file) goto oom;
  ir_ins *in = &f->ins[f->n_ins];
  memset(in, 0, sizeof *in);
  in->op = op;
  in->ty = ty;
  in->n_args = n_args;
  in->args = copy;
  if (op == IR_SHARDING && attr && attr->sharding) {
    /* the instruction's sharding lives as long as f: f holds a reference */
    if (!ir_grow((void **)&f->held, &f->cap_held, f->n_held + 1, sizeof *f->held)) goto oom;
    f->held[f->n_held++] = sharding_ref(attr->sharding);
  }
  jit_sharding **specs = NULL;
  if (op == IR_SHARD_MAP && attr && attr->smap.specs) { /* f's own copy of the specs, held */
    uint32_t n = n_args + attr->smap.n_out;
    if (n && !(specs = ir_arena_array(&f->arena, n, sizeof *specs))) goto oom;
    if (!ir_grow((void **)&f->held, &f->cap_held, f->n_held + n, sizeof *f->held)) goto oom;
    for (uint32_t i = 0; i < n; i++) f->held[f->n_held++] = specs[i] = sharding_ref(attr->smap.specs[i]);
  }
  if (attr) memcpy(&in->attr, attr, sizeof in->attr);
  if (specs) in->attr.smap.specs = specs;
  in->loc.file = file;
  in->loc.line = loc.line;
  return f->n_ins++;
oom:
  f->oom = true;
  return IR_NOREF;
}

ir_ref ir_emit_param(ir_func *f, ir_ty ty) {
  ir_attr a = {0};
  a.axis = f->n_params;
  ir_ref r = ir_emit(f, IR_PARAM, ty, 0, NULL, &a, (ir_loc){0});
  if (r != IR_NOREF) f->n_params++;
  return r;
}

ir_ref ir_emit_const(ir_func *f, ir_ty ty, double value, ir_loc loc) {
  ir_attr a = {0};
  a.value = value;
  return ir_emit(f, IR_CONST, ty, 0, NULL, &a, loc);
}

jit_status ir_set_results(ir_func *f, uint32_t n, const ir_ref *refs) {
  ir_ref *r = NULL;
  if (n) {
    r = malloc(n * sizeof *r);
    if (!r) {
      f->oom = true;
      return jit_error(JIT_ENOMEM, "out of memory");
    }
    memcpy(r, refs, n * sizeof *r);
  }
  free(f->results);
  f->results = r;
  f->n_results = n;
  return JIT_OK;
}

ir_func *ir_func_clone(const ir_func *f) {
  ir_func *c = ir_func_new(f->name);
  if (!c) return NULL;
  for (uint32_t i = 0; i < f->n_types; i++)
    if (ir_type_intern(c, &f->types[i]) != i) goto fail;
  for (uint32_t i = 0; i < f->n_ins; i++) {
    const ir_ins *in = &f->ins[i];
    if (ir_emit(c, in->op, in->ty, in->n_args, in->args, &in->attr, in->loc) == IR_NOREF)
      goto fail;
  }
  c->n_params = f->n_params;
  if (ir_set_results(c, f->n_results, f->results) != JIT_OK) goto fail;
  if (f->mesh && ir_set_mesh(c, f->mesh) != JIT_OK) goto fail;
  for (uint32_t i = 0; i < f->n_bodies; i++) {
    uint32_t index = 0;
    ir_func *b = ir_func_clone(f->bodies[i]);
    if (!b || ir_add_body(c, b, &index) != JIT_OK) goto fail;
  }
  return c;
fail:
  ir_func_free(c);
  return NULL;
}

jit_status ir_add_body(ir_func *f, ir_func *body, uint32_t *index) {
  if (!ir_grow((void **)&f->bodies, &f->cap_bodies, f->n_bodies + 1, sizeof *f->bodies)) {
    ir_func_free(body);
    f->oom = true;
    return jit_error(JIT_ENOMEM, "out of memory");
  }
  *index = f->n_bodies;
  f->bodies[f->n_bodies++] = body;
  return JIT_OK;
}

jit_status ir_set_mesh(ir_func *f, const ir_mesh *m) {
  ir_mesh *c = malloc(sizeof *c);
  if (!c) {
    f->oom = true;
    return jit_error(JIT_ENOMEM, "out of memory");
  }
  *c = *m;
  free(f->mesh);
  f->mesh = c;
  return JIT_OK;
}

int64_t ir_mesh_group(const ir_mesh *m, unsigned mask) {
  int64_t n = 1;
  for (int i = 0; i < IR_MAX_MESH_AXES; i++)
    if (mask >> i & 1) {
      if (i >= m->n_axes) return 0;
      n *= m->sizes[i];
    }
  return mask >> IR_MAX_MESH_AXES ? 0 : n;
}

uint32_t ir_n_bodies(const ir_ins *in) {
  if (in->op == IR_COND || in->op == IR_WHILE) return in->attr.cond.n_bodies;
  return in->op == IR_SCAN || in->op == IR_SHARD_MAP;
}

const ir_func *ir_body_at(const ir_func *f, const ir_ins *in, uint32_t j) {
  if (j >= ir_n_bodies(in)) return NULL;
  uint64_t b = in->op == IR_SCAN ? in->attr.scan.body : in->op == IR_SHARD_MAP ? in->attr.smap.body
                                                                             : in->attr.cond.body;
  return b + j < f->n_bodies ? f->bodies[b + j] : NULL;
}

const ir_func *ir_body(const ir_func *f, const ir_ins *in) {
  return ir_body_at(f, in, in->op == IR_WHILE ? 1 : 0);
}

bool ir_result_type(const ir_func *f, const ir_ins *in, uint32_t k, ir_type *out) {
  if (in->op == IR_SCAN) return ir_scan_result_type(f, in, k, out);
  const ir_func *b = ir_body(f, in);
  if ((in->op == IR_COND || in->op == IR_WHILE) && b && k < b->n_results && b->results[k] < b->n_ins) {
    *out = *ir_type_of(b, b->results[k]);
    return true;
  }
  if (!b || k >= b->n_results || k >= in->attr.smap.n_out || b->results[k] >= b->n_ins ||
      !in->attr.smap.specs)
    return false;
  *out = *ir_type_of(b, b->results[k]);
  const jit_sharding *s = in->attr.smap.specs[in->n_args + k];
  if (!s || s->rank != out->rank) return false;
  for (int d = 0; d < out->rank; d++) {
    int64_t parts = sharding_dim_parts(s, d);
    if (out->dims[d] > INT64_MAX / parts) return false;
    out->dims[d] *= parts;
  }
  return true;
}

const ir_func *ir_scan_body(const ir_func *f, const ir_ins *scan) {
  return scan->op == IR_SCAN && scan->attr.scan.body < f->n_bodies ? f->bodies[scan->attr.scan.body]
                                                                    : NULL;
}

bool ir_scan_result_type(const ir_func *f, const ir_ins *scan, uint32_t k, ir_type *out) {
  const ir_func *b = ir_scan_body(f, scan);
  if (!b || k >= b->n_results || b->results[k] >= b->n_ins) return false;
  *out = *ir_type_of(b, b->results[k]);
  if (k < scan->attr.scan.n_carry) return true;
  if (out->rank >= IR_MAX_RANK) return false;
  for (int d = out->rank; d > 0; d--) out->dims[d] = out->dims[d - 1];
  out->dims[0] = scan->attr.scan.length;
  out->rank++;
  return true;
}

void ir_move_bodies(ir_func *dst, ir_func *src) {
  dst->bodies = src->bodies;
  dst->n_bodies = src->n_bodies;
  dst->cap_bodies = src->cap_bodies;
  src->bodies = NULL;
  src->n_bodies = src->cap_bodies = 0;
}

jit_status ir_attr_for_copy(ir_func *dst, const ir_func *src, const ir_ins *in, ir_attr *out) {
  *out = in->attr;
  /* a collective names axes of its function's mesh: a copy takes the mesh along */
  if (ir_op_is_collective(in->op) && !dst->mesh && src->mesh && ir_set_mesh(dst, src->mesh) != JIT_OK)
    return jit_error(JIT_ENOMEM, "out of memory");
  uint32_t n = ir_n_bodies(in);
  for (uint32_t j = 0; j < n; j++) { /* the copies stay consecutive, as the bodies were */
    const ir_func *b = ir_body_at(src, in, j);
    ir_func *copy = b ? ir_func_clone(b) : NULL;
    if (!copy) {
      dst->oom = true;
      return jit_error(JIT_ENOMEM, "out of memory");
    }
    uint32_t index = 0;
    if (ir_add_body(dst, copy, &index) != JIT_OK) return jit_error(JIT_ENOMEM, "out of memory");
    if (j == 0) {
      if (in->op == IR_SCAN) out->scan.body = index;
      else if (in->op == IR_SHARD_MAP) out->smap.body = index;
      else out->cond.body = index;
    }
  }
  return JIT_OK;
}

jit_status ir_copy_marked(ir_func *dst, const ir_func *src, const bool *keep, ir_ref *map) {
  ir_ref small[8], *ops = small;
  uint32_t cap = 8;
  for (uint32_t i = src->n_params; i < src->n_ins; i++) {
    const ir_ins *in = &src->ins[i];
    if (keep && !keep[i]) continue;
    if (in->n_args > cap) {
      if (ops != small) free(ops);
      cap = in->n_args;
      if (!(ops = malloc(cap * sizeof *ops))) {
        dst->oom = true;
        return jit_error(JIT_ENOMEM, "out of memory");
      }
    }
    for (uint32_t k = 0; k < in->n_args; k++) ops[k] = map[in->args[k]];
    ir_attr a;
    ir_ty ty = ir_type_intern(dst, ir_type_of(src, i));
    map[i] = ty == UINT32_MAX || ir_attr_for_copy(dst, src, in, &a) != JIT_OK
                 ? IR_NOREF
                 : ir_emit(dst, in->op, ty, in->n_args, ops, &a, in->loc);
    if (map[i] == IR_NOREF) {
      if (ops != small) free(ops);
      return jit_error(JIT_ENOMEM, "out of memory");
    }
  }
  if (ops != small) free(ops);
  return JIT_OK;
}

jit_status ir_copy_into(ir_func *dst, const ir_func *src, ir_ref *map) {
  return ir_copy_marked(dst, src, NULL, map);
}
