/* transform_shard_map.c: jit_shard_map's entry point: checks the specs against the args, traces
 * the body once on one device's blocks (values of enclosing traces it uses come in replicated),
 * emits SHARD_MAP and a get per result. */
#include <stdlib.h>
#include <string.h>

#include "runtime/sharding.h"
#include "trace/subtrace.h"

/* Parses n specs over m into out[] (NULL entries on failure); false after recording. */
static bool parse_specs(op_ctx *c, jit_mesh *m, int n, const char *const *specs, const char *what,
                        jit_sharding **out) {
  for (int i = 0; i < n; i++) {
    if (!specs[i]) {
      op_fail(c, JIT_EINVAL, "%s[%d] is NULL", what, i);
      return false;
    }
    char who[32];
    snprintf(who, sizeof who, "%s[%d]", what, i);
    jit_status st = sharding_parse(m, specs[i], who, &out[i]);
    if (st != JIT_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", jit_last_error());
      op_fail(c, st, "%s", msg);
      return false;
    }
  }
  return true;
}

/* A value of type t split as s: its block, or false after recording why it does not fit. */
static bool block_type(op_ctx *c, const jit_sharding *s, const ir_type *t, const char *what, int i,
                       const char *spec, ir_type *out) {
  if (s->rank != t->rank) {
    op_fail(c, JIT_ESHARDING, "%s[%d] \"%s\" has %d entries for %s", what, i, spec, s->rank,
            trace_ty(t).s);
    return false;
  }
  *out = *t;
  for (int d = 0; d < t->rank; d++) {
    int64_t parts = sharding_dim_parts(s, d);
    if (t->dims[d] % parts) {
      op_fail(c, JIT_ESHARDING, "%s[%d] \"%s\" splits dim %d of %s into %lld parts, which does not "
              "divide it", what, i, spec, d, trace_ty(t).s, (long long)parts);
      return false;
    }
    out->dims[d] = t->dims[d] / parts;
  }
  return true;
}

void jit_shard_map(jit_trace *t, jit_trace_fn fn, void *user, const jit_mesh *m, int n_args,
                   const jit_val *args, const char *const *in_specs, int n_results,
                   jit_val *results, const char *const *out_specs) {
  op_ctx c;
  ir_func *b = NULL;
  ir_ref *refs = NULL, *captured = NULL, *operands = NULL;
  ir_type *types = NULL;
  jit_sharding **specs = NULL;
  uint32_t n_captured = 0, n_specs = 0;
  for (int i = 0; results && i < n_results; i++) results[i] = (jit_val){0};
  if (!op_begin(t, "shard_map", &c)) return;
  if (!subtrace_check_call(&c, fn, n_args, args, n_results, results)) return;
  if (!m) {
    op_fail(&c, JIT_EINVAL, "mesh is NULL");
    return;
  }
  if ((n_args && !in_specs) || (n_results && !out_specs)) {
    op_fail(&c, JIT_EINVAL, "%s is NULL", n_args && !in_specs ? "in_specs" : "out_specs");
    return;
  }
  jit_mesh *mesh = (jit_mesh *)m; /* only references are taken */
  size_t na = (size_t)n_args, nr = (size_t)n_results;
  refs = malloc((na ? na : 1) * sizeof *refs);
  types = malloc((na ? na : 1) * sizeof *types);
  if (!refs || !types) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  if (subtrace_args(&c, n_args, args, refs, types) != JIT_OK) goto done;
  jit_sharding **in_sh = calloc(na + 1, sizeof *in_sh), **out_sh = calloc(nr + 1, sizeof *out_sh);
  if (!in_sh || !out_sh) {
    free(in_sh);
    free(out_sh);
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  bool ok = parse_specs(&c, mesh, n_args, in_specs, "in_specs", in_sh) &&
            parse_specs(&c, mesh, n_results, out_specs, "out_specs", out_sh);
  for (int i = 0; ok && i < n_args; i++)
    ok = block_type(&c, in_sh[i], &types[i], "in_specs", i, in_specs[i], &types[i]);
  if (ok && subtrace_manual(&c, fn, user, n_args, types, n_results, m, &b, &captured,
                            &n_captured) != JIT_OK)
    ok = false;
  for (int k = 0; ok && k < n_results; k++) {
    const ir_type *bt = ir_type_of(b, b->results[k]);
    if (out_sh[k]->rank != bt->rank) {
      op_fail(&c, JIT_ESHARDING, "out_specs[%d] \"%s\" has %d entries for the body's result %s", k,
              out_specs[k], out_sh[k]->rank, trace_ty(bt).s);
      ok = false;
    }
  }
  /* specs: replicated for the captured values, then the in-specs, then the out-specs */
  n_specs = n_captured + (uint32_t)(na + nr);
  specs = ok ? calloc(n_specs + 1, sizeof *specs) : NULL;
  if (ok && !specs) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    ok = false;
  }
  for (uint32_t i = 0; ok && i < n_captured; i++) {
    uint8_t none[JIT_MAX_RANK] = {0}, ax[JIT_MAX_RANK][JIT_MAX_MESH_AXES] = {{0}};
    if (sharding_new(mesh, ir_type_of(c.t->f, captured[i])->rank, none,
                     (const uint8_t(*)[JIT_MAX_MESH_AXES])ax, &specs[i]) != JIT_OK) {
      op_fail(&c, JIT_ENOMEM, "out of memory");
      ok = false;
    }
  }
  for (size_t i = 0; ok && i < na; i++) specs[n_captured + i] = sharding_ref(in_sh[i]);
  for (size_t k = 0; ok && k < nr; k++) specs[n_captured + na + k] = sharding_ref(out_sh[k]);
  for (size_t i = 0; i < na; i++) sharding_unref(in_sh[i]);
  for (size_t k = 0; k < nr; k++) sharding_unref(out_sh[k]);
  free(in_sh);
  free(out_sh);
  if (!ok) goto done;
  if (!b->mesh) { /* a body without collectives still runs per device of the mesh */
    ir_mesh im;
    mesh_to_ir(m, &im);
    if (ir_set_mesh(b, &im) != JIT_OK) {
      op_fail(&c, JIT_ENOMEM, "out of memory");
      goto done;
    }
  }
  operands = malloc((n_captured + na + 1) * sizeof *operands);
  if (!operands) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < n_captured; i++) operands[i] = captured[i];
  for (size_t i = 0; i < na; i++) operands[n_captured + i] = refs[i];
  ir_func *f = c.t->f;
  ir_attr a = {0};
  a.smap.n_out = (uint32_t)nr;
  a.smap.specs = specs;
  if (ir_add_body(f, b, &a.smap.body) != JIT_OK) {
    b = NULL; /* freed by ir_add_body */
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  b = NULL;
  ir_type token = {.dtype = JIT_BOOL, .rank = 0};
  ir_ty tty = ir_type_intern(f, &token);
  ir_ref s = tty == UINT32_MAX ? IR_NOREF
             : ir_emit(f, IR_SHARD_MAP, tty, n_captured + (uint32_t)na, operands, &a, c.loc);
  if (s == IR_NOREF) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  for (uint32_t k = 0; k < nr; k++) {
    ir_type rt;
    if (!ir_result_type(f, &f->ins[s], k, &rt)) {
      op_fail(&c, JIT_ESHAPE, "result %u's global type overflows", k);
      goto done;
    }
    ir_attr g = {0};
    g.axis = k;
    ir_ty ty = ir_type_intern(f, &rt);
    results[k] = op_result(&c, ty == UINT32_MAX ? IR_NOREF : ir_emit(f, IR_GET, ty, 1, &s, &g, c.loc));
  }
done:
  for (uint32_t i = 0; specs && i < n_specs; i++) sharding_unref(specs[i]);
  free(specs);
  ir_func_free(b);
  free(refs);
  free(types);
  free(captured);
  free(operands);
}
