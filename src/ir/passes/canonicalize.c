/* canonicalize.c: local rewrites to a smaller canonical form: constant folding, algebraic
 * identities, and collapsing chains of data movement (reshape, transpose, broadcast, ...).
 *
 * What it does: rebuilds the function front to back. Each instruction, its operands already
 * remapped (so already canonical), goes through the rules below until none applies; a rule
 * either replaces it by an existing value (x+0 -> x) or changes it in place (a folded op
 * becomes a CONST, reshape(reshape x) becomes reshape x) and the rules run again on the
 * result. Then it is emitted, keeping the location of the instruction it came from. Every rule
 * shrinks the function (fewer instructions, shorter chains, or an op turned into a CONST, on
 * which no rule fires), so rewriting terminates. Since rules only look at an instruction and
 * the producers of its operands, which are visited first, one sweep reaches the fixed point;
 * the pass sweeps again while a sweep still rewrote something (the second one confirms), then
 * erases what the rewrites left dead through pass_dce, as MLIR's canonicalizer erases
 * trivially dead ops.
 *
 * Folding computes with ir_eval_elementwise, the interpreter's own arithmetic, so a folded
 * program computes bit for bit what the interpreter computes on the original, with one
 * caveat taken from XLA's algebraic simplifier: x+0 -> x and x-0 -> x are applied for both
 * signs of zero, although -0.0 + +0.0 is +0.0; so a -0.0 may come out where +0.0 would have.
 * A reduce_sum of a constant folds only when every partial sum is exact in double (then any
 * summation order gives v * count, rounded once as the interpreter does); reductions over no
 * elements are left alone.
 *
 * Needs: a verified function, types interned. Keeps: types of all values (a replacement has
 * the type of what it replaces), operand order before use, PARAMs, locations. Creates no types.
 * Cost: O(instructions + operands) per sweep, two sweeps when anything changed, plus a DCE.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

typedef struct cand {   /* the instruction being canonicalized, operands in the new fn */
  ir_op op;
  ir_ty ty;
  uint32_t n_args;
  ir_ref *args;         /* scratch owned by the sweep; rules may rewrite it in place */
  ir_attr attr;
} cand;

enum { KEEP, CHANGED, REPLACED };  /* what a rule did */
#define MAX_RULE_STEPS 64          /* rules shrink, so a few steps suffice; this is a guard */

static const ir_type *type_of(const ir_func *nf, ir_ref r) { return &nf->types[nf->ins[r].ty]; }

/* v as its dtype holds it: a CONST's value may have been written with more precision. */
static double round_to(jit_dtype dt, double v) {
  union { double d[2]; int64_t i; unsigned char b[16]; } buf = {0}; /* c128: two doubles */
  ir_store_f64(dt, buf.b, 0, v);
  return ir_load_f64(dt, buf.b, 0);
}

static bool const_value(const ir_func *nf, ir_ref r, double *v) {
  const ir_ins *in = &nf->ins[r];
  if (in->op != IR_CONST) return false;
  *v = round_to(nf->types[in->ty].dtype, in->attr.value);
  return true;
}

/* A CONST equal to want; 0 matches both zeros (see the -0.0 caveat above). */
static bool const_is(const ir_func *nf, ir_ref r, double want) {
  double v;
  return const_value(nf, r, &v) && v == want;
}

static int make_const(cand *c, double v) {
  c->op = IR_CONST;
  c->n_args = 0;
  memset(&c->attr, 0, sizeof c->attr);
  c->attr.value = v;
  return CHANGED;
}

static int replace(const ir_func *nf, const cand *c, ir_ref r, ir_ref *out) {
  if (nf->ins[r].ty != c->ty) return KEEP; /* never changes a value's type */
  *out = r;
  return REPLACED;
}

/* ---- constant folding ------------------------------------------------------------------------ */

static int fold_elementwise(const ir_func *nf, cand *c) {
  double v[3];
  if (c->n_args < 1 || c->n_args > 3) return KEEP;
  for (uint32_t k = 0; k < c->n_args; k++)
    if (!const_value(nf, c->args[k], &v[k])) return KEEP;
  /* The last operand has the data dtype (SELECT's first is the predicate). */
  jit_dtype in_dt = type_of(nf, c->args[c->n_args - 1])->dtype;
  jit_dtype out_dt = nf->types[c->ty].dtype;
  double r = ir_eval_elementwise(c->op, &c->attr, in_dt, out_dt, v);
  /* A CONST holds a double: an i64 or u64 result past 2^53 may not survive the trip. */
  if ((out_dt == JIT_I64 || out_dt == JIT_U64) && !(fabs(r) <= 9007199254740992.0)) return KEEP;
  return make_const(c, r);
}

/* count copies of v summed as the interpreter sums them: in double (ints in int64) from +0,
   rounded once to dt. Folded only when every partial sum is exact in double (ints: in range),
   so the result is round(v * count) whatever order the additions happen in. */
static bool exact_sum(jit_dtype dt, double v, int64_t count, double *out) {
  if (dt == JIT_BOOL) return false; /* not valid IR (reduce_sum takes ints and floats) */
  if (ir_dtype_is_int(dt)) {
    double r = v * (double)count;
    if (!(fabs(r) < 4503599627370496.0)) return false; /* below 2^52 the product was exact */
    if (round_to(dt, r) != r) return false;            /* outside the dtype's range */
    *out = r;
    return true;
  }
  if (isnan(v) || isinf(v)) {
    *out = v;
    return true;
  }
  if (v == 0) { /* the accumulator starts at +0, and +0 + -0 = +0 */
    *out = 0;
    return true;
  }
  int e;
  uint64_t m = (uint64_t)ldexp(frexp(fabs(v), &e), 53); /* |v| = m * 2^k with m odd */
  while (!(m & 1)) m >>= 1;
  const uint64_t lim = UINT64_C(1) << 53;
  if ((uint64_t)count > (lim - 1) / m) return false; /* count * m < 2^53: partial sums exact */
  *out = round_to(dt, v * (double)count);
  return true;
}

static int fold_reduce(const ir_func *nf, cand *c, double v) {
  const ir_type *in = type_of(nf, c->args[0]);
  int64_t count = 1;
  for (int i = 0; i < c->attr.dims.n; i++) count *= in->dims[c->attr.dims.d[i]];
  if (count == 0) return KEEP;
  if (c->op == IR_REDUCE_SUM) {
    double r;
    return exact_sum(in->dtype, v, count, &r) ? make_const(c, r) : KEEP;
  }
  return make_const(c, v); /* max/min of copies of v (NaN included: max/min propagate it) */
}

/* ---- the rules ------------------------------------------------------------------------------- */

static bool identity_perm(const ir_dims *d) {
  for (int i = 0; i < d->n; i++)
    if (d->d[i] != i) return false;
  return true;
}

static int movement(const ir_func *nf, cand *c, ir_ref *out) {
  ir_ref a = c->args[0];
  const ir_ins *p = &nf->ins[a];
  double v;
  /* A CONST is a splat: moving it around only changes its type. */
  if (c->op != IR_CONCAT && const_value(nf, a, &v)) return make_const(c, v);
  switch (c->op) {
  case IR_RESHAPE:
    if (p->ty == c->ty) return replace(nf, c, a, out);
    if (p->op == IR_RESHAPE) {
      c->args[0] = p->args[0];
      return CHANGED;
    }
    break;
  case IR_TRANSPOSE:
    if (identity_perm(&c->attr.dims)) return replace(nf, c, a, out);
    if (p->op == IR_TRANSPOSE) { /* result dim i = operand dim perm[i], so compose inside out */
      ir_dims q = c->attr.dims;
      for (int i = 0; i < q.n; i++) q.d[i] = p->attr.dims.d[c->attr.dims.d[i]];
      c->attr.dims = q;
      c->args[0] = p->args[0];
      return CHANGED;
    }
    break;
  case IR_BROADCAST:
    if (p->ty == c->ty && c->attr.dims.n == nf->types[c->ty].rank && identity_perm(&c->attr.dims))
      return replace(nf, c, a, out);
    if (p->op == IR_BROADCAST) { /* x dim i -> inner dims[i] -> outer dims[inner dims[i]] */
      ir_dims q = p->attr.dims;
      for (int i = 0; i < q.n; i++) q.d[i] = c->attr.dims.d[p->attr.dims.d[i]];
      c->attr.dims = q;
      c->args[0] = p->args[0];
      return CHANGED;
    }
    break;
  case IR_SLICE: {
    const ir_type *t = &nf->types[p->ty];
    for (int i = 0; i < t->rank; i++)
      if (c->attr.slice.start[i] != 0 || c->attr.slice.stride[i] != 1 ||
          c->attr.slice.limit[i] != t->dims[i])
        return KEEP;
    return replace(nf, c, a, out);
  }
  case IR_REV: /* rev(rev(x)) over the same axes is x */
    if (p->op == IR_REV && p->attr.dims.n == c->attr.dims.n &&
        memcmp(p->attr.dims.d, c->attr.dims.d, c->attr.dims.n) == 0)
      return replace(nf, c, p->args[0], out);
    break;
  case IR_CONCAT: {
    if (c->n_args == 1) return replace(nf, c, a, out);
    double v0;
    if (!const_value(nf, a, &v0)) return KEEP;
    for (uint32_t k = 1; k < c->n_args; k++)
      if (!const_value(nf, c->args[k], &v) || memcmp(&v, &v0, sizeof v) != 0) return KEEP;
    return make_const(c, v0);
  }
  default: break;
  }
  return KEEP;
}

/* A complex CONST is the splat (v, 0), but complex math on it is not real math on v (sqrt(-1)):
   complex ops fold after ir_expand_complex, on the real code. */
static bool touches_complex(const ir_func *nf, const cand *c) {
  if (ir_dtype_is_complex(nf->types[c->ty].dtype)) return true;
  for (uint32_t k = 0; k < c->n_args; k++)
    if (ir_dtype_is_complex(type_of(nf, c->args[k])->dtype)) return true;
  return false;
}

static int rules(const ir_func *nf, cand *c, ir_ref *out) {
  if ((ir_op_flags[c->op] & IR_EW) && !touches_complex(nf, c)) {
    int r = fold_elementwise(nf, c);
    if (r != KEEP) return r;
  }
  ir_ref a = c->n_args > 0 ? c->args[0] : IR_NOREF;
  ir_ref b = c->n_args > 1 ? c->args[1] : IR_NOREF;
  double v;
  switch (c->op) {
  case IR_ADD:
    if (const_is(nf, b, 0)) return replace(nf, c, a, out);
    if (const_is(nf, a, 0)) return replace(nf, c, b, out);
    break;
  case IR_SUB:
    if (const_is(nf, b, 0)) return replace(nf, c, a, out);
    break;
  case IR_MUL:
    if (const_is(nf, b, 1)) return replace(nf, c, a, out);
    if (const_is(nf, a, 1)) return replace(nf, c, b, out);
    break;
  case IR_DIV:
    if (const_is(nf, b, 1)) return replace(nf, c, a, out);
    break;
  case IR_MAX:
  case IR_MIN:
    if (a == b) return replace(nf, c, a, out);
    break;
  case IR_SELECT:
    if (const_value(nf, a, &v)) return replace(nf, c, v != 0 ? b : c->args[2], out);
    if (b == c->args[2]) return replace(nf, c, b, out);
    break;
  case IR_NEG:
    if (nf->ins[a].op == IR_NEG) return replace(nf, c, nf->ins[a].args[0], out);
    break;
  case IR_CONVERT:
    if (nf->ins[a].ty == c->ty) return replace(nf, c, a, out);
    break;
  case IR_RESHAPE:
  case IR_TRANSPOSE:
  case IR_BROADCAST:
  case IR_SLICE:
  case IR_CONCAT:
  case IR_REV:
    return movement(nf, c, out);
  case IR_GATHER: /* clamped, it reads a splat's value wherever it reads (filled: zeros too) */
    if (c->attr.gather.mode == IR_INDEX_CLIP) return movement(nf, c, out);
    break;
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX:
  case IR_REDUCE_MIN:
    if (const_value(nf, a, &v) && !touches_complex(nf, c)) return fold_reduce(nf, c, v);
    break;
  default: break;
  }
  return KEEP;
}

/* ---- the sweep ------------------------------------------------------------------------------- */

/* One front-to-back rebuild; replaces f only if some rule fired (*n_rewrites > 0). */
static jit_status sweep(ir_func *f, uint32_t *n_rewrites) {
  jit_status st = JIT_OK;
  uint32_t max_args = 1;
  for (uint32_t i = 0; i < f->n_ins; i++)
    if (f->ins[i].n_args > max_args) max_args = f->ins[i].n_args;
  ir_ref *map = malloc((f->n_ins ? f->n_ins : 1) * sizeof *map);
  ir_ref *args = malloc(max_args * sizeof *args);
  ir_func *nf = NULL;
  if (!map || !args || !(nf = pass_rebuild_begin(f, map, "canonicalize"))) {
    st = map && args ? JIT_ENOMEM : jit_error(JIT_ENOMEM, "canonicalize: out of memory");
    goto done;
  }
  *n_rewrites = 0;
  for (uint32_t i = f->n_params; i < f->n_ins; i++) {
    const ir_ins *in = &f->ins[i]; /* the old fn: nothing is emitted into it */
    cand c = {in->op, in->ty, in->n_args, args, in->attr};
    for (uint32_t k = 0; k < in->n_args; k++) args[k] = map[in->args[k]];
    ir_ref r = IR_NOREF;
    for (int step = 0; step < MAX_RULE_STEPS; step++) {
      int what = rules(nf, &c, &r);
      if (what == KEEP) break;
      ++*n_rewrites;
      if (what == REPLACED) break;
    }
    if (r == IR_NOREF) r = ir_emit(nf, c.op, c.ty, c.n_args, c.args, &c.attr, in->loc);
    if (r == IR_NOREF) break;
    map[i] = r;
  }
  if (*n_rewrites == 0 && !nf->oom) {
    ir_func_free(nf); /* nothing changed: keep f as it is */
  } else {
    st = pass_rebuild_end(f, nf, map, "canonicalize");
  }
done:
  free(args);
  free(map);
  return st;
}

jit_status pass_canonicalize(ir_func *f) {
  /* One sweep reaches the fixed point (see above); the bound only guards against a rule that
     would not shrink. */
  for (int round = 0; round < 4; round++) {
    uint32_t n = 0;
    jit_status st = sweep(f, &n);
    if (st != JIT_OK) return st;
    if (n == 0) break;
  }
  return pass_dce(f);
}
