/* verify.c: checks a function's structural invariants and each op's type rule; run after every
 * pass in debug and test builds, and by the parser on what it read. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/mesh_spec.h"
#include "runtime/error.h"

static jit_status why_fail(char *why, size_t n, const char *fmt, ...) JIT_PRINTF(3, 4);
static jit_status why_fail(char *why, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (n) vsnprintf(why, n, fmt, ap);
  va_end(ap);
  return JIT_EINTERNAL;
}

/* A type every later stage can use without re-checking: known dtype, rank in range, dims >= 0,
   and a product of the nonzero dims that fits int64 (so that no stride or partial product of
   ir_type_numel overflows); the same rule as shape.c's. */
static bool type_ok(const ir_type *t, char *why, size_t n) {
  if (!ir_dtype_valid(t->dtype)) {
    why_fail(why, n, "unknown dtype %d", (int)t->dtype);
    return false;
  }
  if (t->rank < 0 || t->rank > IR_MAX_RANK) {
    why_fail(why, n, "rank %d is outside 0..%d", t->rank, IR_MAX_RANK);
    return false;
  }
  int64_t prod = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) {
      why_fail(why, n, "dim %d is negative (%lld)", i, (long long)t->dims[i]);
      return false;
    }
    if (t->dims[i] == 0) continue;
    if (prod > INT64_MAX / t->dims[i]) {
      why_fail(why, n, "the product of the dims overflows int64");
      return false;
    }
    prod *= t->dims[i];
  }
  return true;
}

static bool uses_declared(ir_op op) {
  return op == IR_RESHAPE || op == IR_CONVERT || op == IR_CONST || op == IR_IOTA ||
         op == IR_BROADCAST;
}

static bool is_token(const ir_type *t) { return t->dtype == JIT_BOOL && t->rank == 0; }

/* A SCAN's operands against its body's signature (the body itself is verified by ir_verify). */
static jit_status verify_scan(const ir_func *f, const ir_ins *in, char *why, size_t why_n) {
  const ir_scan *a = &in->attr.scan;
  const ir_func *b = ir_scan_body(f, in);
  if (!b) return why_fail(why, why_n, "body %u does not exist (the function has %u)", (unsigned)a->body,
                          (unsigned)f->n_bodies);
  if (!is_token(&f->types[in->ty])) return why_fail(why, why_n, "a scan's type must be the token bool[]");
  if (a->length < 0) return why_fail(why, why_n, "length %lld is negative", (long long)a->length);
  if ((uint64_t)a->n_consts + a->n_carry > in->n_args)
    return why_fail(why, why_n, "consts=%u carry=%u but only %u operands", (unsigned)a->n_consts,
                    (unsigned)a->n_carry, (unsigned)in->n_args);
  if (b->n_params != in->n_args)
    return why_fail(why, why_n, "the body takes %u params, the scan has %u operands",
                    (unsigned)b->n_params, (unsigned)in->n_args);
  if (b->n_results < a->n_carry)
    return why_fail(why, why_n, "the body returns %u values, fewer than the %u carries",
                    (unsigned)b->n_results, (unsigned)a->n_carry);
  char t1[96], t2[96];
  for (uint32_t i = 0; i < in->n_args; i++) {
    ir_type want = f->types[f->ins[in->args[i]].ty];
    const ir_type *got = ir_type_of(b, i);
    if (i >= a->n_consts + a->n_carry) { /* an x: one slice of its leading dim */
      if (want.rank < 1 || want.dims[0] != a->length) {
        ir_format_type(&want, t1, sizeof t1);
        return why_fail(why, why_n, "xs operand %u has type %s, whose leading dim is not length %lld",
                        (unsigned)i, t1, (long long)a->length);
      }
      for (int d = 0; d + 1 < want.rank; d++) want.dims[d] = want.dims[d + 1];
      want.dims[--want.rank] = 0;
    }
    if (!ir_type_equal(&want, got)) {
      ir_format_type(&want, t1, sizeof t1);
      ir_format_type(got, t2, sizeof t2);
      return why_fail(why, why_n, "body param %u has type %s, the scan gives it %s", (unsigned)i, t2, t1);
    }
  }
  for (uint32_t i = 0; i < a->n_carry; i++) {
    const ir_type *in_t = ir_type_of(b, a->n_consts + i), *out_t = ir_type_of(b, b->results[i]);
    if (!ir_type_equal(in_t, out_t)) {
      ir_format_type(in_t, t1, sizeof t1);
      ir_format_type(out_t, t2, sizeof t2);
      return why_fail(why, why_n, "carry %u enters the body as %s but leaves it as %s", (unsigned)i, t1, t2);
    }
  }
  for (uint32_t k = a->n_carry; k < b->n_results; k++)
    if (ir_type_of(b, b->results[k])->rank >= IR_MAX_RANK)
      return why_fail(why, why_n, "y %u has rank %d: stacked it would exceed %d", (unsigned)(k - a->n_carry),
                      ir_type_of(b, b->results[k])->rank, IR_MAX_RANK);
  return JIT_OK;
}

/* Body j's params have the types of in's operands from `first` on; false after writing why. */
static bool params_match(const ir_func *f, const ir_ins *in, uint32_t first, const ir_func *b,
                         uint32_t j, char *why, size_t why_n) {
  if (b->n_params != in->n_args - first) {
    why_fail(why, why_n, "body %u takes %u params, the %s gives it %u", (unsigned)j,
             (unsigned)b->n_params, ir_op_name[in->op], (unsigned)(in->n_args - first));
    return false;
  }
  for (uint32_t i = first; i < in->n_args; i++) {
    const ir_type *want = &f->types[f->ins[in->args[i]].ty], *got = ir_type_of(b, i - first);
    if (!ir_type_equal(want, got)) {
      char t1[96], t2[96];
      ir_format_type(got, t1, sizeof t1);
      ir_format_type(want, t2, sizeof t2);
      why_fail(why, why_n, "body %u param %u has type %s, the %s gives it %s", (unsigned)j,
               (unsigned)(i - first), t1, ir_op_name[in->op], t2);
      return false;
    }
  }
  return true;
}

/* Body j returns values of the types of ref's results 0..n (want), or of the listed types. */
static bool results_match(const ir_func *b, uint32_t j, uint32_t n, const ir_type *want, char *why,
                          size_t why_n) {
  if (b->n_results != n) {
    why_fail(why, why_n, "body %u returns %u values, %u expected", (unsigned)j, (unsigned)b->n_results,
             (unsigned)n);
    return false;
  }
  for (uint32_t k = 0; k < n; k++) {
    const ir_type *got = ir_type_of(b, b->results[k]);
    if (!ir_type_equal(got, &want[k])) {
      char t1[96], t2[96];
      ir_format_type(got, t1, sizeof t1);
      ir_format_type(&want[k], t2, sizeof t2);
      why_fail(why, why_n, "body %u returns %s as result %u, %s expected", (unsigned)j, t1, (unsigned)k, t2);
      return false;
    }
  }
  return true;
}

/* A COND's branches take its args and return equal types; a WHILE's predicate returns bool[] and
   its body the carries' types. */
static jit_status verify_cond(const ir_func *f, const ir_ins *in, char *why, size_t why_n) {
  const ir_cond *a = &in->attr.cond;
  bool is_while = in->op == IR_WHILE;
  if (!is_token(&f->types[in->ty]))
    return why_fail(why, why_n, "a %s's type must be the token bool[]", ir_op_name[in->op]);
  if (is_while ? a->n_bodies != 2 : a->n_bodies < 1)
    return why_fail(why, why_n, "%u bodies", (unsigned)a->n_bodies);
  for (uint32_t j = 0; j < a->n_bodies; j++)
    if (!ir_body_at(f, in, j))
      return why_fail(why, why_n, "body %u does not exist (the function has %u)",
                      (unsigned)(a->body + j), (unsigned)f->n_bodies);
  if (is_while ? a->n_consts >= in->n_args : in->n_args < 1)
    return why_fail(why, why_n, is_while ? "no carries" : "no branch index");
  if (!is_while) {
    const ir_type *it = &f->types[f->ins[in->args[0]].ty];
    if (it->dtype != JIT_I32 || it->rank != 0) return why_fail(why, why_n, "the branch index must be i32[]");
  }
  const ir_func *b0 = ir_body(f, in);
  uint32_t n = is_while ? in->n_args - a->n_consts : b0->n_results;
  ir_type *want = malloc((n ? n : 1) * sizeof *want);
  if (!want) {
    why_fail(why, why_n, "out of memory");
    return JIT_ENOMEM;
  }
  for (uint32_t k = 0; k < n; k++)
    want[k] = is_while ? f->types[f->ins[in->args[a->n_consts + k]].ty] : *ir_type_of(b0, b0->results[k]);
  ir_type pred = {.dtype = JIT_BOOL, .rank = 0};
  bool ok = true;
  for (uint32_t j = 0; ok && j < a->n_bodies; j++) {
    const ir_func *b = ir_body_at(f, in, j);
    ok = params_match(f, in, is_while ? 0 : 1, b, j, why, why_n) &&
         (is_while && j == 0 ? results_match(b, j, 1, &pred, why, why_n)
                             : results_match(b, j, n, want, why, why_n));
  }
  free(want);
  return ok ? JIT_OK : JIT_EINTERNAL;
}

static jit_status verify_get(const ir_func *f, const ir_ins *in, char *why, size_t why_n) {
  const ir_ins *s = &f->ins[in->args[0]];
  if (!ir_op_has_body(s->op))
    return why_fail(why, why_n, "get reads a scan, cond, while or shard_map, not a '%s'",
                    ir_op_name[s->op]);
  ir_type want;
  if (in->attr.axis < 0 || in->attr.axis > UINT32_MAX ||
      !ir_result_type(f, s, (uint32_t)in->attr.axis, &want))
    return why_fail(why, why_n, "index %lld is not a result of the %s", (long long)in->attr.axis,
                    ir_op_name[s->op]);
  if (!ir_type_equal(&want, &f->types[in->ty])) {
    char t1[96], t2[96];
    ir_format_type(&f->types[in->ty], t1, sizeof t1);
    ir_format_type(&want, t2, sizeof t2);
    return why_fail(why, why_n, "declared type %s differs from the %s's result %s", t1,
                    ir_op_name[s->op], t2);
  }
  return JIT_OK;
}

/* The body runs per device on the blocks the in-specs give it; specs are over the body's mesh. */
static jit_status verify_shard_map(const ir_func *f, const ir_ins *in, char *why, size_t why_n) {
  const ir_shard_map *a = &in->attr.smap;
  const ir_func *b = ir_body(f, in);
  char t1[96], t2[96];
  if (!b) return why_fail(why, why_n, "body %u does not exist", (unsigned)a->body);
  if (!is_token(&f->types[in->ty])) return why_fail(why, why_n, "a shard_map's type must be the token bool[]");
  if (!b->mesh) return why_fail(why, why_n, "the body has no mesh");
  if (b->n_params != in->n_args || b->n_results != a->n_out)
    return why_fail(why, why_n, "the body takes %u params and returns %u, the shard_map has %u "
                    "operands and %u results", (unsigned)b->n_params, (unsigned)b->n_results,
                    (unsigned)in->n_args, (unsigned)a->n_out);
  if (in->n_args + a->n_out && !a->specs) return why_fail(why, why_n, "no specs");
  for (uint32_t i = 0; i < in->n_args + a->n_out; i++) {
    const jit_sharding *s = a->specs[i];
    if (!s || !mesh_matches_ir(s->mesh, b->mesh)) return why_fail(why, why_n, "spec %u is not over the body's mesh", (unsigned)i);
    bool is_in = i < in->n_args;
    const ir_type *local = is_in ? ir_type_of(b, i) : ir_type_of(b, b->results[i - in->n_args]);
    if (s->rank != local->rank) {
      ir_format_type(local, t1, sizeof t1);
      return why_fail(why, why_n, "%s-spec %u has %d entries for the body's %s", is_in ? "in" : "out",
                      (unsigned)(is_in ? i : i - in->n_args), s->rank, t1);
    }
    if (!is_in) continue;
    const ir_type *global = &f->types[f->ins[in->args[i]].ty];
    ir_type want = *global;
    for (int d = 0; d < global->rank; d++) {
      int64_t parts = sharding_dim_parts(s, d);
      if (global->dims[d] % parts) {
        ir_format_type(global, t1, sizeof t1);
        return why_fail(why, why_n, "operand %u (%s): dim %d does not split into %lld parts",
                        (unsigned)i, t1, d, (long long)parts);
      }
      want.dims[d] = global->dims[d] / parts;
    }
    if (!ir_type_equal(&want, local)) {
      ir_format_type(&want, t1, sizeof t1);
      ir_format_type(local, t2, sizeof t2);
      return why_fail(why, why_n, "body param %u has type %s, its block is %s", (unsigned)i, t2, t1);
    }
  }
  return JIT_OK;
}

jit_status ir_verify_ins(const ir_func *f, ir_ref r, char *why, size_t why_n) {
  const ir_ins *in = &f->ins[r];
  if ((unsigned)in->op >= IR_N_OPS) return why_fail(why, why_n, "op #%d is not an op", (int)in->op);
  const char *name = ir_op_name[in->op];
  if (r < f->n_params) {
    if (in->op != IR_PARAM)
      return why_fail(why, why_n, "instruction %u is '%s', but the first %u must be params", (unsigned)r,
                      name, (unsigned)f->n_params);
    if (in->attr.axis != (int64_t)r)
      return why_fail(why, why_n, "param %u has index %lld", (unsigned)r, (long long)in->attr.axis);
    if (in->attr.remat) /* the text form has no place for it */
      return why_fail(why, why_n, "param %u has remat tag %u", (unsigned)r, (unsigned)in->attr.remat);
  } else if (in->op == IR_PARAM) {
    return why_fail(why, why_n, "param after the first %u instructions (the params)",
                    (unsigned)f->n_params);
  }
  if (in->ty >= f->n_types)
    return why_fail(why, why_n, "type #%u does not exist (the function has %u types)", (unsigned)in->ty,
                    (unsigned)f->n_types);
  const ir_type *declared = &f->types[in->ty];
  char tmp[160];
  if (!type_ok(declared, tmp, sizeof tmp)) return why_fail(why, why_n, "bad result type: %s", tmp);
  int arity = ir_op_arity[in->op];
  if (in->op != IR_SCAN && in->op != IR_SHARD_MAP &&
      (arity < 0 ? in->n_args < 1 : in->n_args != (uint32_t)arity))
    return why_fail(why, why_n, "'%s' takes %s%d operand%s, has %u", name, arity < 0 ? "at least " : "",
                    arity < 0 ? 1 : arity, arity == 1 || arity < 0 ? "" : "s", (unsigned)in->n_args);
  if (in->n_args && !in->args) return why_fail(why, why_n, "operand list is missing");
  for (uint32_t i = 0; i < in->n_args; i++)
    if (in->args[i] >= r)
      return why_fail(why, why_n, "operand %u is %%%u, which is not defined before %%%u", (unsigned)i,
                      (unsigned)in->args[i], (unsigned)r);
  for (uint32_t i = 0; i < in->n_args; i++)
    if (ir_op_has_body(f->ins[in->args[i]].op) && in->op != IR_GET)
      return why_fail(why, why_n, "operand %u is a %s, which only 'get' may read", (unsigned)i,
                      ir_op_name[f->ins[in->args[i]].op]);
  if (in->op == IR_PARAM) return JIT_OK;
  if (in->op == IR_SCAN) return verify_scan(f, in, why, why_n);
  if (in->op == IR_GET) return verify_get(f, in, why, why_n);
  if (in->op == IR_SHARD_MAP) return verify_shard_map(f, in, why, why_n);
  if (in->op == IR_COND || in->op == IR_WHILE) return verify_cond(f, in, why, why_n);
  if (ir_op_is_collective(in->op)) {
    if (!f->mesh) return why_fail(why, why_n, "a collective in a function without a mesh");
    int64_t g = ir_mesh_group(f->mesh, in->attr.coll.axes);
    if (!g || !in->attr.coll.axes) return why_fail(why, why_n, "names an axis the mesh does not have");
    if (g != in->attr.coll.group)
      return why_fail(why, why_n, "group size %u, but its axes hold %lld devices",
                      (unsigned)in->attr.coll.group, (long long)g);
  }

  const ir_type *small[8];
  const ir_type **args = small;
  if (in->n_args > sizeof small / sizeof small[0]) {
    args = malloc(in->n_args * sizeof *args);
    if (!args) {
      why_fail(why, why_n, "out of memory");
      return JIT_ENOMEM;
    }
  }
  for (uint32_t i = 0; i < in->n_args; i++) args[i] = &f->types[f->ins[in->args[i]].ty];
  ir_type out;
  memset(&out, 0, sizeof out);
  char reason[256] = "";
  jit_status st = ir_infer_type(in->op, in->n_args, (const ir_type *const *)args, &in->attr,
                                uses_declared(in->op) ? declared : NULL, &out, reason, sizeof reason);
  if (args != small) free(args);
  if (st != JIT_OK) return why_fail(why, why_n, "%s", reason[0] ? reason : "the shape rule failed");
  if (!ir_type_equal(&out, declared)) {
    char want[96], got[96];
    ir_format_type(declared, want, sizeof want);
    ir_format_type(&out, got, sizeof got);
    return why_fail(why, why_n, "declared type %s differs from the inferred %s", want, got);
  }
  return JIT_OK;
}

jit_status ir_verify(const ir_func *f, const char *pass) {
  char head[64];
  if (pass)
    snprintf(head, sizeof head, "verify after %s", pass);
  else
    snprintf(head, sizeof head, "verify");
  const char *fn = f->name ? f->name : "?";
  if (f->oom) return jit_error(JIT_EINTERNAL, "%s: @%s: ran out of memory while being built", head, fn);
  if (f->n_params > f->n_ins)
    return jit_error(JIT_EINTERNAL, "%s: @%s: %u params but only %u instructions", head, fn,
                     (unsigned)f->n_params, (unsigned)f->n_ins);
  for (uint32_t i = 0; i < f->n_bodies; i++) {
    if (!f->bodies[i]) return jit_error(JIT_EINTERNAL, "%s: @%s: body %u is missing", head, fn, (unsigned)i);
    jit_status st = ir_verify(f->bodies[i], pass);
    if (st != JIT_OK) return st;
  }
  char why[512];
  for (ir_ref r = 0; r < f->n_ins; r++) {
    jit_status st = ir_verify_ins(f, r, why, sizeof why);
    if (st == JIT_OK) continue;
    if (st == JIT_ENOMEM) return jit_error(st, "%s: @%s: out of memory", head, fn);
    const ir_ins *in = &f->ins[r];
    char where[96] = "";
    if ((unsigned)in->op < IR_N_OPS) snprintf(where, sizeof where, " = %s", ir_op_name[in->op]);
    if (in->loc.file)
      return jit_error(JIT_EINTERNAL, "%s: @%s %%%u%s at %s:%d: %s", head, fn, (unsigned)r, where,
                       in->loc.file, in->loc.line, why);
    return jit_error(JIT_EINTERNAL, "%s: @%s %%%u%s: %s", head, fn, (unsigned)r, where, why);
  }
  if (f->n_results && !f->results)
    return jit_error(JIT_EINTERNAL, "%s: @%s: result list is missing", head, fn);
  for (uint32_t i = 0; i < f->n_results; i++)
    if (f->results[i] >= f->n_ins)
      return jit_error(JIT_EINTERNAL, "%s: @%s: result %u is %%%u, but the function has %u values", head,
                       fn, (unsigned)i, (unsigned)f->results[i], (unsigned)f->n_ins);
    else if (ir_op_has_body(f->ins[f->results[i]].op))
      return jit_error(JIT_EINTERNAL, "%s: @%s: result %u is a %s token (read it through 'get')",
                       head, fn, (unsigned)i, ir_op_name[f->ins[f->results[i]].op]);
  return JIT_OK;
}
