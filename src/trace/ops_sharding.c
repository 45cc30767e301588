/* ops_sharding.c: jit_with_sharding_constraint, a `sharding` op that pins its value's layout for
 * the partitioner (and makes the call partitioned over its mesh), and the collectives of a
 * shard_map body: jit_psum, jit_pmean, jit_all_gather (tiled: blocks concatenated along dim) and
 * jit_axis_index, over axes of the enclosing shard_map's mesh. */
#include <string.h>

#include "runtime/sharding.h"
#include "trace/trace_internal.h"

jit_val jit_with_sharding_constraint(jit_trace *t, jit_val x, const jit_sharding *s) {
  op_ctx c;
  if (!op_begin(t, "with_sharding_constraint", &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  if (!s) {
    op_fail(&c, JIT_EINVAL, "sharding is NULL");
    return (jit_val){0};
  }
  const ir_type *xt = op_type(&c, r);
  if (s->rank != xt->rank) {
    char spec[256];
    sharding_format_spec(s, spec, sizeof spec);
    op_fail(&c, JIT_ESHARDING, "the spec \"%s\" has %d entries for %s", spec, s->rank,
            trace_ty(xt).s);
    return (jit_val){0};
  }
  for (int d = 0; d < s->rank; d++) {
    int64_t parts = sharding_dim_parts(s, d);
    if (xt->dims[d] % parts) {
      char spec[256];
      sharding_format_spec(s, spec, sizeof spec);
      op_fail(&c, JIT_ESHARDING, "the spec \"%s\" splits dim %d of %s into %lld parts, which "
              "does not divide it", spec, d, trace_ty(xt).s, (long long)parts);
      return (jit_val){0};
    }
  }
  ir_attr a = {0};
  a.sharding = (jit_sharding *)s; /* the function takes its own reference */
  return op_result(&c, op_emit(&c, IR_SHARDING, 1, &r, &a, NULL));
}

/* ---- collectives inside jit_shard_map --------------------------------------------------------- */

/* The mesh of the innermost enclosing shard_map body, or NULL. */
static const jit_mesh *manual_mesh(const jit_trace *t) {
  for (; t; t = t->parent)
    if (t->req && t->req->manual_mesh) return t->req->manual_mesh;
  return NULL;
}

/* The axes named by `axis` ("x", or several joined by ',' or '+') as a mask with their group
   size; the trace's function gets the mesh its collectives need. false after recording. */
static bool axes_of(op_ctx *c, const char *axis, ir_coll *out) {
  const jit_mesh *m = manual_mesh(c->t);
  if (!m) {
    op_fail(c, JIT_EINVAL, "used outside a shard_map body (no mesh axes are bound here)");
    return false;
  }
  if (!axis || !*axis) {
    op_fail(c, JIT_EINVAL, "axis name is %s", axis ? "empty" : "NULL");
    return false;
  }
  memset(out, 0, sizeof *out);
  int64_t group = 1;
  for (const char *p = axis; *p;) {
    while (*p == ' ' || *p == ',' || *p == '+') p++;
    const char *e = p;
    while (*e && *e != ' ' && *e != ',' && *e != '+') e++;
    if (e == p) break;
    int a = mesh_axis_index(m, p, (size_t)(e - p));
    if (a < 0) {
      char names[256] = "";
      for (int i = 0; i < m->n_axes; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "",
                 m->names[i]);
      op_fail(c, JIT_EINVAL, "no mesh axis '%.*s' (the mesh has %s)", (int)(e - p), p, names);
      return false;
    }
    if (out->axes >> a & 1) {
      op_fail(c, JIT_EINVAL, "axis '%.*s' named twice in \"%s\"", (int)(e - p), p, axis);
      return false;
    }
    out->axes |= (uint8_t)(1u << a);
    group *= m->sizes[a];
    p = e;
  }
  out->group = (uint16_t)group;
  ir_func *f = c->t->f;
  if (!f->mesh) {
    ir_mesh im;
    mesh_to_ir(m, &im);
    if (ir_set_mesh(f, &im) != JIT_OK) {
      op_fail(c, JIT_ENOMEM, "out of memory");
      return false;
    }
  }
  return true;
}

static jit_val reduce_over(jit_trace *t, const char *name, jit_val x, const char *axis, bool mean) {
  op_ctx c;
  if (!op_begin(t, name, &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  ir_attr a = {0};
  if (!axes_of(&c, axis, &a.coll)) return (jit_val){0};
  const ir_type *xt = op_type(&c, r);
  if (xt->dtype == JIT_BOOL || (mean && !ir_dtype_is_float(xt->dtype))) {
    op_fail(&c, JIT_EDTYPE, "cannot %s %s", mean ? "average" : "sum", trace_ty(xt).s);
    return (jit_val){0};
  }
  a.coll.kind = IR_COLL_SUM;
  ir_ref s = op_emit(&c, IR_ALL_REDUCE, 1, &r, &a, NULL);
  if (mean && s != IR_NOREF) {
    ir_ref k = ir_emit_const(c.t->f, c.t->f->ins[s].ty, 1.0 / a.coll.group, c.loc);
    ir_ref ops[2] = {s, k};
    s = k == IR_NOREF ? IR_NOREF : op_emit(&c, IR_MUL, 2, ops, NULL, NULL);
  }
  return op_result(&c, s);
}

jit_val jit_psum(jit_trace *t, jit_val x, const char *axis) {
  return reduce_over(t, "psum", x, axis, false);
}

jit_val jit_pmean(jit_trace *t, jit_val x, const char *axis) {
  return reduce_over(t, "pmean", x, axis, true);
}

jit_val jit_all_gather(jit_trace *t, jit_val x, const char *axis, int dim) {
  op_ctx c;
  if (!op_begin(t, "all_gather", &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  ir_attr a = {0};
  if (!axes_of(&c, axis, &a.coll)) return (jit_val){0};
  const ir_type *xt = op_type(&c, r);
  int d;
  if (!op_axis(dim, xt->rank, &d)) {
    op_fail(&c, JIT_ESHAPE, "dim %d out of range for %s", dim, trace_ty(xt).s);
    return (jit_val){0};
  }
  a.coll.dim = (uint8_t)d;
  return op_result(&c, op_emit(&c, IR_ALL_GATHER, 1, &r, &a, NULL));
}

jit_val jit_axis_index(jit_trace *t, const char *axis) {
  op_ctx c;
  if (!op_begin(t, "axis_index", &c)) return (jit_val){0};
  ir_attr a = {0};
  if (!axes_of(&c, axis, &a.coll)) return (jit_val){0};
  return op_result(&c, op_emit(&c, IR_AXIS_INDEX, 0, NULL, &a, NULL));
}
