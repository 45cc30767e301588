/* complex_expand.c: ir_expand_complex, the single definition of complex arithmetic in tjit: it
 * rewrites a function holding complex values (c64, c128) into the equivalent real function.
 *
 * Interface: a complex value of shape S becomes a real value of shape S ++ [2] holding (re, im)
 * on the new last axis, byte for byte the host layout of C99 complex, so a complex param or
 * result passes through jit_call untouched. Inside the function a complex value is carried as
 * two real arrays of shape S (its parts), split from a pair array on first use and joined into
 * one only where a pair array is needed (results, the operands of ops with bodies): the real
 * code between is plain elementwise and structural code that fusion turns into loops over the
 * parts. Every op is its real counterpart applied to the parts:
 *   linear ops (neg add sub select convert, the structural ops, reduce_sum, a dot with one
 *   complex operand, the sum collectives): the op on each part;
 *   mul (ar br - ai bi, ar bi + ai br); div: Smith's algorithm (no overflow of br^2 + bi^2);
 *   dot of two complex operands: four real dots (XLA's choice over Gauss's three: accuracy);
 *   exp: e^ar (cos ai, sin ai); log: (log|z|, atan2(ai, ar)); abs: the scaled hypot
 *   m sqrt(1 + (n/m)^2), m = max(|ar|, |ai|), n = min (n/m taken as 1 when n = m: 0 and inf);
 *   sqrt: the principal branch, t = sqrt((|z| + |ar|)/2), ar >= 0: (t, ai/2t), else
 *   (|ai|/2t, t with ai's sign, -0 included) (C99's csqrt but for its inf and NaN cases);
 *   real/imag: a part; conj: (re, -im); complex(x, y): (x, y); convert real -> complex: (x, 0),
 *   complex -> real: the real part (JAX's astype); eq/ne: both parts compared.
 * Bodies (scan, cond, while) are expanded the same way (their params and results change with
 * their operands'). Needs: a verified function; keeps: verified, same params and results in
 * bytes. Cost: one pass over the instructions, a few real ops per complex op.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

typedef struct cx {
  const ir_func *src;
  ir_func *nf;
  ir_ref *map;     /* src ref -> nf ref: the value, for a complex one its pair array (or NOREF) */
  ir_ref *part[2]; /* src ref of a complex value -> nf refs of its re, im parts (or NOREF) */
  jit_status st;
} cx;

static bool is_cx(const ir_func *f, ir_ref r) { return ir_dtype_is_complex(ir_type_of(f, r)->dtype); }

static bool fn_has_complex(const ir_func *f) {
  for (uint32_t i = 0; i < f->n_types; i++)
    if (ir_dtype_is_complex(f->types[i].dtype)) return true;
  for (uint32_t i = 0; i < f->n_bodies; i++)
    if (fn_has_complex(f->bodies[i])) return true;
  return false;
}

bool ir_func_has_complex(const ir_func *f) { return f && fn_has_complex(f); }

static jit_status fail(cx *c, jit_status st, const ir_ins *in, const char *why) {
  if (c->st == JIT_OK)
    c->st = jit_error(st, "expand_complex: @%s: %s%s%s:%d: %s", c->src->name,
                      in ? ir_op_name[in->op] : "", in && in->loc.file ? " at " : "",
                      in && in->loc.file ? in->loc.file : "", in ? in->loc.line : 0, why);
  return c->st;
}

/* t with dtype dt; pair: with the (re, im) axis appended. */
static ir_ty type_as(cx *c, const ir_type *t, jit_dtype dt, bool pair) {
  ir_type u = *t;
  u.dtype = dt;
  if (pair) u.dims[u.rank++] = 2;
  return ir_type_intern(c->nf, &u);
}

static ir_ref emit(cx *c, ir_op op, ir_ty ty, uint32_t n, const ir_ref *args, const ir_attr *a,
                   ir_loc loc) {
  if (ty == UINT32_MAX) return IR_NOREF;
  return ir_emit(c->nf, op, ty, n, args, a, loc);
}

/* Part k (0: re, 1: im) of complex src value r, sliced from its pair array on first use. */
static ir_ref part(cx *c, ir_ref r, int k) {
  if (c->part[k][r] != IR_NOREF) return c->part[k][r];
  const ir_type *t = ir_type_of(c->src, r);
  jit_dtype pd = ir_dtype_complex_part(t->dtype);
  ir_loc loc = c->src->ins[r].loc;
  ir_attr a = {0};
  for (int d = 0; d < t->rank; d++) {
    a.slice.limit[d] = t->dims[d];
    a.slice.stride[d] = 1;
  }
  a.slice.start[t->rank] = k;
  a.slice.limit[t->rank] = k + 1;
  a.slice.stride[t->rank] = 1;
  ir_type one = *t;
  one.dims[one.rank++] = 1;
  ir_ref s = emit(c, IR_SLICE, type_as(c, &one, pd, false), 1, &c->map[r], &a, loc);
  if (s == IR_NOREF) return IR_NOREF;
  return c->part[k][r] = emit(c, IR_RESHAPE, type_as(c, t, pd, false), 1, &s, NULL, loc);
}

/* The pair array of complex src value r, joined from its parts on first use: select(iota == 0,
   re, im) over the parts broadcast along the pair axis, elementwise code that fuses into the
   loop computing the parts (a concat would not) and keeps every bit (-0 included). */
static ir_ref pair(cx *c, ir_ref r) {
  if (c->map[r] != IR_NOREF) return c->map[r];
  const ir_type *t = ir_type_of(c->src, r);
  jit_dtype pd = ir_dtype_complex_part(t->dtype);
  ir_loc loc = c->src->ins[r].loc;
  ir_ty pty = type_as(c, t, pd, true);
  ir_attr a = {0};
  a.dims.n = (uint8_t)t->rank;
  for (int d = 0; d < t->rank; d++) a.dims.d[d] = (uint8_t)d;
  ir_ref wide[2];
  for (int k = 0; k < 2; k++)
    if ((wide[k] = emit(c, IR_BROADCAST, pty, 1, &c->part[k][r], &a, loc)) == IR_NOREF) return IR_NOREF;
  ir_attr ia = {0};
  ia.axis = t->rank;
  ir_ref idx = emit(c, IR_IOTA, type_as(c, t, JIT_I32, true), 0, NULL, &ia, loc);
  ir_attr eq = {0};
  eq.cmp = JIT_EQ;
  ir_ref zero = ir_emit_const(c->nf, type_as(c, t, JIT_I32, true), 0, loc);
  ir_ref is_re = emit(c, IR_CMP, type_as(c, t, JIT_BOOL, true), 2, (ir_ref[]){idx, zero}, &eq, loc);
  return c->map[r] = emit(c, IR_SELECT, pty, 3, (ir_ref[]){is_re, wide[0], wide[1]}, NULL, loc);
}

/* The nf ref of src operand r as a whole value (a complex one as its pair array). */
static ir_ref value(cx *c, ir_ref r) { return is_cx(c->src, r) ? pair(c, r) : c->map[r]; }

static ir_ref op1(cx *c, ir_op op, ir_ty ty, ir_ref a, ir_loc loc) { return emit(c, op, ty, 1, &a, NULL, loc); }

static ir_ref op2(cx *c, ir_op op, ir_ty ty, ir_ref a, ir_ref b, ir_loc loc) {
  return emit(c, op, ty, 2, (ir_ref[]){a, b}, NULL, loc);
}

/* The op on each part: complex operands give their part k, the others themselves. */
static void per_part(cx *c, ir_ref i, const ir_ins *in) {
  const ir_type *t = &c->src->types[in->ty];
  ir_ty pty = type_as(c, t, ir_dtype_complex_part(t->dtype), false);
  ir_ref small[4], *args = in->n_args <= 4 ? small : malloc(in->n_args * sizeof *args);
  if (!args) return (void)fail(c, JIT_ENOMEM, in, "out of memory");
  for (int k = 0; k < 2; k++) {
    for (uint32_t j = 0; j < in->n_args; j++)
      args[j] = is_cx(c->src, in->args[j]) ? part(c, in->args[j], k) : c->map[in->args[j]];
    c->part[k][i] = emit(c, in->op, pty, in->n_args, args, &in->attr, in->loc);
  }
  if (args != small) free(args);
}

/* (ar br - ai bi, ar bi + ai br) of parts a, b; op IR_MUL, or IR_DOT with dot's attributes. */
static void product(cx *c, ir_ref i, const ir_ins *in, ir_ty pty) {
  ir_ref ar = part(c, in->args[0], 0), ai = part(c, in->args[0], 1);
  ir_ref br = part(c, in->args[1], 0), bi = part(c, in->args[1], 1);
  ir_ref rr = emit(c, in->op, pty, 2, (ir_ref[]){ar, br}, &in->attr, in->loc);
  ir_ref ii = emit(c, in->op, pty, 2, (ir_ref[]){ai, bi}, &in->attr, in->loc);
  ir_ref ri = emit(c, in->op, pty, 2, (ir_ref[]){ar, bi}, &in->attr, in->loc);
  ir_ref ir = emit(c, in->op, pty, 2, (ir_ref[]){ai, br}, &in->attr, in->loc);
  c->part[0][i] = op2(c, IR_SUB, pty, rr, ii, in->loc);
  c->part[1][i] = op2(c, IR_ADD, pty, ri, ir, in->loc);
}

/* Smith's algorithm: with |br| >= |bi|, r = bi/br, d = br + bi r, a/b = ((ar + ai r)/d,
   (ai - ar r)/d); otherwise the roles of br and bi swap. Both branches are computed and one
   selected per element. */
static void divide(cx *c, ir_ref i, const ir_ins *in, ir_ty pty, ir_ty bty) {
  ir_loc l = in->loc;
  ir_ref ar = part(c, in->args[0], 0), ai = part(c, in->args[0], 1);
  ir_ref br = part(c, in->args[1], 0), bi = part(c, in->args[1], 1);
  ir_attr ge = {0};
  ge.cmp = JIT_GE;
  ir_ref big_re = emit(c, IR_CMP, bty, 2,
                       (ir_ref[]){op1(c, IR_ABS, pty, br, l), op1(c, IR_ABS, pty, bi, l)}, &ge, l);
  /* branch 1: |br| >= |bi| */
  ir_ref r1 = op2(c, IR_DIV, pty, bi, br, l);
  ir_ref d1 = op2(c, IR_ADD, pty, br, op2(c, IR_MUL, pty, bi, r1, l), l);
  ir_ref re1 = op2(c, IR_DIV, pty, op2(c, IR_ADD, pty, ar, op2(c, IR_MUL, pty, ai, r1, l), l), d1, l);
  ir_ref im1 = op2(c, IR_DIV, pty, op2(c, IR_SUB, pty, ai, op2(c, IR_MUL, pty, ar, r1, l), l), d1, l);
  /* branch 2: |br| < |bi| */
  ir_ref r2 = op2(c, IR_DIV, pty, br, bi, l);
  ir_ref d2 = op2(c, IR_ADD, pty, bi, op2(c, IR_MUL, pty, br, r2, l), l);
  ir_ref re2 = op2(c, IR_DIV, pty, op2(c, IR_ADD, pty, op2(c, IR_MUL, pty, ar, r2, l), ai, l), d2, l);
  ir_ref im2 = op2(c, IR_DIV, pty, op2(c, IR_SUB, pty, op2(c, IR_MUL, pty, ai, r2, l), ar, l), d2, l);
  c->part[0][i] = emit(c, IR_SELECT, pty, 3, (ir_ref[]){big_re, re1, re2}, NULL, l);
  c->part[1][i] = emit(c, IR_SELECT, pty, 3, (ir_ref[]){big_re, im1, im2}, NULL, l);
}

/* in copied as it is: its operands as whole values (complex ones as pair arrays), its result a
   pair array if complex (a real op, or one with bodies, which expand() expands in turn). */
static void copy_ins(cx *c, ir_ref i) {
  const ir_ins *in = &c->src->ins[i];
  const ir_type *t = &c->src->types[in->ty];
  ir_ref small[8], *args = in->n_args <= 8 ? small : malloc(in->n_args * sizeof *args);
  ir_attr a;
  if (!args || ir_attr_for_copy(c->nf, c->src, in, &a) != JIT_OK) {
    if (args != small) free(args);
    fail(c, JIT_ENOMEM, in, "out of memory");
    return;
  }
  for (uint32_t j = 0; j < in->n_args; j++) args[j] = value(c, in->args[j]);
  ir_ty ty = type_as(c, t, ir_dtype_complex_part(t->dtype), ir_dtype_is_complex(t->dtype));
  c->map[i] = emit(c, in->op, ty, in->n_args, args, &a, in->loc);
  if (args != small) free(args);
}

/* |z| of complex src value z as m sqrt(1 + q^2): no overflow or underflow of ar^2 + ai^2. */
static ir_ref modulus(cx *c, ir_ref z, ir_ty pty, ir_ty bty, ir_loc l) {
  ir_ref ar = op1(c, IR_ABS, pty, part(c, z, 0), l), ai = op1(c, IR_ABS, pty, part(c, z, 1), l);
  ir_ref m = op2(c, IR_MAX, pty, ar, ai, l), n = op2(c, IR_MIN, pty, ar, ai, l);
  ir_ref one = ir_emit_const(c->nf, pty, 1, l);
  ir_attr eq = {0};
  eq.cmp = JIT_EQ;
  ir_ref same = emit(c, IR_CMP, bty, 2, (ir_ref[]){m, n}, &eq, l);
  ir_ref q = emit(c, IR_SELECT, pty, 3, (ir_ref[]){same, one, op2(c, IR_DIV, pty, n, m, l)}, NULL, l);
  ir_ref root = op1(c, IR_SQRT, pty, op2(c, IR_ADD, pty, one, op2(c, IR_MUL, pty, q, q, l), l), l);
  return op2(c, IR_MUL, pty, m, root, l);
}

static void complex_sqrt(cx *c, ir_ref i, ir_ref z, ir_ty pty, ir_ty bty, ir_loc l) {
  ir_ref ar = part(c, z, 0), ai = part(c, z, 1);
  ir_ref zero = ir_emit_const(c->nf, pty, 0, l);
  ir_ref half = ir_emit_const(c->nf, pty, 0.5, l);
  ir_ref t = op1(c, IR_SQRT, pty,
                 op2(c, IR_MUL, pty, op2(c, IR_ADD, pty, modulus(c, z, pty, bty, l),
                                          op1(c, IR_ABS, pty, ar, l), l), half, l), l);
  ir_attr cmp = {0};
  cmp.cmp = JIT_EQ;
  ir_ref t0 = emit(c, IR_CMP, bty, 2, (ir_ref[]){t, zero}, &cmp, l);
  ir_ref two_t = op2(c, IR_ADD, pty, t, t, l);
  /* z = 0: t = 0 and ai = 0, so (0, ai) and not 0/0 */
  ir_ref im_pos = emit(c, IR_SELECT, pty, 3, (ir_ref[]){t0, ai, op2(c, IR_DIV, pty, ai, two_t, l)}, NULL, l);
  ir_ref re_neg = op2(c, IR_DIV, pty, op1(c, IR_ABS, pty, ai, l), two_t, l);
  /* ai's sign bit, -0 included (csqrt(-4 - 0i) = -2i): ai < 0 or 1/ai < 0 */
  cmp.cmp = JIT_LT;
  ir_ref inv = op2(c, IR_DIV, pty, ir_emit_const(c->nf, pty, 1, l), ai, l);
  ir_ref ai_neg = op2(c, IR_OR, bty, emit(c, IR_CMP, bty, 2, (ir_ref[]){ai, zero}, &cmp, l),
                      emit(c, IR_CMP, bty, 2, (ir_ref[]){inv, zero}, &cmp, l), l);
  ir_ref im_neg = emit(c, IR_SELECT, pty, 3, (ir_ref[]){ai_neg, op1(c, IR_NEG, pty, t, l), t}, NULL, l);
  cmp.cmp = JIT_GE;
  ir_ref ar_pos = emit(c, IR_CMP, bty, 2, (ir_ref[]){ar, zero}, &cmp, l);
  c->part[0][i] = emit(c, IR_SELECT, pty, 3, (ir_ref[]){ar_pos, t, re_neg}, NULL, l);
  c->part[1][i] = emit(c, IR_SELECT, pty, 3, (ir_ref[]){ar_pos, im_pos, im_neg}, NULL, l);
}

/* One instruction with a complex operand or result. */
static void expand_ins(cx *c, ir_ref i) {
  const ir_ins *in = &c->src->ins[i];
  const ir_type *t = &c->src->types[in->ty];
  bool cres = ir_dtype_is_complex(t->dtype);
  jit_dtype pd = ir_dtype_complex_part(t->dtype);
  ir_ty pty = type_as(c, t, cres ? pd : t->dtype, false);
  ir_ref a0 = in->n_args ? in->args[0] : IR_NOREF;
  bool cx0 = a0 != IR_NOREF && is_cx(c->src, a0);
  ir_loc l = in->loc;
  switch (in->op) {
  case IR_CONST:
    c->part[0][i] = ir_emit_const(c->nf, pty, in->attr.value, l);
    c->part[1][i] = ir_emit_const(c->nf, pty, 0, l);
    return;
  case IR_NEG:
  case IR_ADD:
  case IR_SUB:
  case IR_SELECT:
  case IR_RESHAPE:
  case IR_TRANSPOSE:
  case IR_BROADCAST:
  case IR_SLICE:
  case IR_CONCAT:
  case IR_GATHER:
  case IR_SCATTER:
  case IR_PAD:
  case IR_REV:
  case IR_REDUCE_SUM:
  case IR_SHARDING:
  case IR_ALL_REDUCE:
  case IR_ALL_GATHER:
  case IR_REDUCE_SCATTER:
  case IR_ALL_TO_ALL:
  case IR_COLLECTIVE_PERMUTE:
  case IR_SHARD_SLICE: per_part(c, i, in); return;
  case IR_DOT:
    if (is_cx(c->src, in->args[0]) && is_cx(c->src, in->args[1])) product(c, i, in, pty);
    else per_part(c, i, in); /* linear in its one complex operand */
    return;
  case IR_MUL: product(c, i, in, pty); return;
  case IR_DIV: divide(c, i, in, pty, type_as(c, t, JIT_BOOL, false)); return;
  case IR_EXP: {
    ir_ref e = op1(c, IR_EXP, pty, part(c, a0, 0), l), ai = part(c, a0, 1);
    c->part[0][i] = op2(c, IR_MUL, pty, e, op1(c, IR_COS, pty, ai, l), l);
    c->part[1][i] = op2(c, IR_MUL, pty, e, op1(c, IR_SIN, pty, ai, l), l);
    return;
  }
  case IR_LOG:
    c->part[0][i] = op1(c, IR_LOG, pty, modulus(c, a0, pty, type_as(c, t, JIT_BOOL, false), l), l);
    c->part[1][i] = op2(c, IR_ATAN2, pty, part(c, a0, 1), part(c, a0, 0), l);
    return;
  case IR_ABS: c->map[i] = modulus(c, a0, pty, type_as(c, t, JIT_BOOL, false), l); return;
  case IR_SQRT: complex_sqrt(c, i, a0, pty, type_as(c, t, JIT_BOOL, false), l); return;
  case IR_CONJ:
    c->part[0][i] = part(c, a0, 0);
    c->part[1][i] = op1(c, IR_NEG, pty, part(c, a0, 1), l);
    return;
  case IR_REAL:
  case IR_IMAG: c->map[i] = part(c, a0, in->op == IR_IMAG); return;
  case IR_COMPLEX:
    c->part[0][i] = c->map[in->args[0]];
    c->part[1][i] = c->map[in->args[1]];
    return;
  case IR_CONVERT:
    if (cx0 && cres) {
      per_part(c, i, in);
    } else if (cres) { /* real -> complex: (x, 0) */
      c->part[0][i] = op1(c, IR_CONVERT, pty, c->map[a0], l);
      c->part[1][i] = ir_emit_const(c->nf, pty, 0, l);
    } else { /* complex -> real: the real part */
      ir_ref re = part(c, a0, 0);
      bool same = re != IR_NOREF && c->nf->ins[re].ty == pty;
      c->map[i] = same ? re : op1(c, IR_CONVERT, pty, re, l);
    }
    return;
  case IR_FFT: /* the same transform on pair arrays: the bytes are the host's complex layout */
    copy_ins(c, i);
    if (c->map[i] != IR_NOREF) c->nf->ins[c->map[i]].attr.fft.pairs = 1;
    return;
  case IR_CMP: {
    ir_ref e[2];
    for (int k = 0; k < 2; k++)
      e[k] = emit(c, IR_CMP, pty, 2, (ir_ref[]){part(c, a0, k), part(c, in->args[1], k)}, &in->attr, l);
    c->map[i] = op2(c, in->attr.cmp == JIT_EQ ? IR_AND : IR_OR, pty, e[0], e[1], l);
    return;
  }
  default:
    /* a shard_map's specs name its operands' dims: the pair axis would need one more each */
    if (in->op == IR_SHARD_MAP) {
      fail(c, JIT_EUNSUPPORTED, in, "complex operands of an unpartitioned shard_map");
      return;
    }
    if (ir_op_has_body(in->op) || in->op == IR_GET) { /* operands and results as pair arrays */
      copy_ins(c, i);
      return;
    }
    fail(c, JIT_EUNSUPPORTED, in, "not defined on complex values");
    return;
  }
}

static bool touches_complex(const ir_func *f, const ir_ins *in) {
  if (ir_dtype_is_complex(f->types[in->ty].dtype)) return true;
  for (uint32_t j = 0; j < in->n_args; j++)
    if (is_cx(f, in->args[j])) return true;
  return false;
}

static jit_status expand(ir_func *f) {
  cx c = {.src = f};
  size_t n = f->n_ins ? f->n_ins : 1;
  c.map = malloc(n * sizeof *c.map);
  c.part[0] = malloc(n * sizeof *c.part[0]);
  c.part[1] = malloc(n * sizeof *c.part[1]);
  ir_ref *res = malloc((f->n_results ? f->n_results : 1) * sizeof *res);
  c.nf = ir_func_new(f->name);
  if (!c.map || !c.part[0] || !c.part[1] || !res || !c.nf) {
    fail(&c, JIT_ENOMEM, NULL, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++) c.map[i] = c.part[0][i] = c.part[1][i] = IR_NOREF;
  for (uint32_t i = 0; i < f->n_types; i++) /* the pair axis needs a free dim */
    if (ir_dtype_is_complex(f->types[i].dtype) && f->types[i].rank >= IR_MAX_RANK)
      fail(&c, JIT_EUNSUPPORTED, NULL, "a complex value has the maximum rank (the (re, im) axis "
                                       "needs one more)");
  if (f->mesh && ir_set_mesh(c.nf, f->mesh) != JIT_OK) fail(&c, JIT_ENOMEM, NULL, "out of memory");
  for (uint32_t i = 0; i < f->n_params && c.st == JIT_OK; i++) {
    const ir_type *t = ir_type_of(f, i);
    bool complex = ir_dtype_is_complex(t->dtype);
    ir_ty ty = type_as(&c, t, ir_dtype_complex_part(t->dtype), complex);
    c.map[i] = ty == UINT32_MAX ? IR_NOREF : ir_emit_param(c.nf, ty);
  }
  for (uint32_t i = f->n_params; i < f->n_ins && c.st == JIT_OK && !c.nf->oom; i++) {
    if (touches_complex(f, &f->ins[i])) expand_ins(&c, i);
    else copy_ins(&c, i);
  }
  for (uint32_t k = 0; k < f->n_results && c.st == JIT_OK; k++) res[k] = value(&c, f->results[k]);
  if (c.st == JIT_OK && (c.nf->oom || ir_set_results(c.nf, f->n_results, res) != JIT_OK))
    fail(&c, JIT_ENOMEM, NULL, "out of memory");
  for (uint32_t b = 0; b < c.nf->n_bodies && c.st == JIT_OK; b++)
    if (fn_has_complex(c.nf->bodies[b])) c.st = expand(c.nf->bodies[b]);
  if (c.st == JIT_OK) {
    ir_func_replace(f, c.nf);
    c.nf = NULL;
  }
done:
  ir_func_free(c.nf);
  free(c.map);
  free(c.part[0]);
  free(c.part[1]);
  free(res);
  return c.st;
}

jit_status ir_expand_complex(ir_func *f) {
  if (!f) return jit_error(JIT_EINVAL, "expand_complex: no function");
  return fn_has_complex(f) ? expand(f) : JIT_OK;
}
