/* print.c: the IR's text form (the dump format and tjit-opt's input language).
 * Output parses back with ir_parse into the same function: print(parse(print(f))) == print(f).
 * A scan lists its result types and opens a block holding its body, a function printed 4 columns
 * deeper with its own value numbers:
 *   %2 = scan %0, %1 consts=0 carry=1 length=5 reverse=1 : (f32[3], f32[5,3]) {   # a.c:7
 *     func @body(%0: f32[3], %1: f32[3]) -> (f32[3], f32[3]) { ... }
 *   }
 *   %3 = get %2 index=0 : f32[3]
 * (reverse=1 only when set); its results are read by `get`. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/mesh_spec.h"
#include "runtime/error.h"

/* The column (0-based) where a location comment's '#' goes, so that locations line up. */
enum { LOC_COLUMN = 66 };

static const char *const cmp_names[] = {"eq", "ne", "lt", "le", "gt", "ge"};

/* Names come from the dtype table itself; an out-of-range dtype (broken IR being dumped for a
   verifier message) prints as "?" rather than reading past the table. */
static const char *dtype_name(jit_dtype d) {
  static const char *const names[] = {
#define DTYPE_NAME(name, text, bytes) text,
      JIT_DTYPE_DEF(DTYPE_NAME)
#undef DTYPE_NAME
  };
  return (unsigned)d < sizeof names / sizeof names[0] ? names[d] : "?";
}

/* A line under construction: instructions are built in memory first because the location
   comment's padding depends on the line's length. Fixed size: the longest instruction (a
   slice of rank 8 with 20-digit entries, or a concat with many operands) is handled by
   flushing, see put(). */
typedef struct line {
  FILE *out;
  ir_note_fn note;     /* ir_print_annotated's: text after a value's type, or NULL */
  void *note_ctx;
  int depth;           /* 0: the top function (only its values are annotated) */
  char buf[1024];
  size_t len;     /* bytes in buf */
  size_t col;     /* column of the line so far, including flushed bytes */
  bool err;
} line;

static void flush(line *l) {
  if (l->len && fwrite(l->buf, 1, l->len, l->out) != l->len) l->err = true;
  l->len = 0;
}

static void put(line *l, const char *s, size_t n) {
  if (n > sizeof l->buf - l->len) flush(l);
  if (n > sizeof l->buf) {
    if (fwrite(s, 1, n, l->out) != n) l->err = true;
  } else {
    memcpy(l->buf + l->len, s, n);
    l->len += n;
  }
  l->col += n;
}

static void puts_(line *l, const char *s) { put(l, s, strlen(s)); }

static void lprintf(line *l, const char *fmt, ...) JIT_PRINTF(2, 3);
static void lprintf(line *l, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) {
    l->err = true;
    return;
  }
  put(l, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

int ir_format_type(const ir_type *t, char *buf, size_t n) {
  size_t len = 0;
  int w = snprintf(buf, n, "%s[", dtype_name(t->dtype));
  if (w < 0) return w;
  len += (size_t)w;
  int rank = t->rank < 0 ? 0 : t->rank > IR_MAX_RANK ? IR_MAX_RANK : t->rank;
  for (int i = 0; i < rank; i++) {
    w = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "%s%lld", i ? "," : "",
                 (long long)t->dims[i]);
    if (w < 0) return w;
    len += (size_t)w;
  }
  w = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "]");
  if (w < 0) return w;
  len += (size_t)w;
  return (int)len;
}

void ir_print_type(const ir_type *t, FILE *out) {
  char buf[256];
  ir_format_type(t, buf, sizeof buf);
  fputs(buf, out);
}

static void put_type(line *l, const ir_type *t) {
  char buf[256];
  ir_format_type(t, buf, sizeof buf);
  puts_(l, buf);
}

static void put_ty(line *l, const ir_func *f, ir_ty ty) {
  if (ty < f->n_types)
    put_type(l, &f->types[ty]);
  else
    lprintf(l, "<bad type #%u>", (unsigned)ty);
}

/* Integral values below 2^53 print as plain integers (10, not 1e+01); others as the shortest
   %g form that reads back as the same double. */
static void put_double(line *l, double v) {
  if (isnan(v)) {
    puts_(l, "nan");
    return;
  }
  if (isinf(v)) {
    puts_(l, v < 0 ? "-inf" : "inf");
    return;
  }
  char buf[64];
  if (v == floor(v) && fabs(v) < 9007199254740992.0 && !(v == 0 && signbit(v))) {
    snprintf(buf, sizeof buf, "%.0f", v);
    puts_(l, buf);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  puts_(l, buf);
}

static void put_dims(line *l, const uint8_t *d, int n) {
  puts_(l, "[");
  for (int i = 0; i < n; i++) lprintf(l, "%s%u", i ? "," : "", (unsigned)d[i]);
  puts_(l, "]");
}

static void put_i64s(line *l, const int64_t *v, int n) {
  puts_(l, "[");
  for (int i = 0; i < n; i++) lprintf(l, "%s%lld", i ? "," : "", (long long)v[i]);
  puts_(l, "]");
}

static int clamp_n(int n) { return n < 0 ? 0 : n > IR_MAX_RANK ? IR_MAX_RANK : n; }

/* The rank of in's first operand, or -1 when the (possibly malformed) function cannot say. */
static int operand0_rank(const ir_func *f, const ir_ins *in) {
  if (in->n_args < 1 || in->args[0] >= f->n_ins || f->ins[in->args[0]].ty >= f->n_types) return -1;
  return f->types[f->ins[in->args[0]].ty].rank;
}

/* The attributes of in, in the fixed order of the text format, each preceded by a space. */
static void put_attrs(line *l, const ir_func *f, const ir_ins *in) {
  const ir_attr *a = &in->attr;
  switch (in->op) {
  case IR_IOTA:
    lprintf(l, " dim=%lld", (long long)a->axis);
    break;
  case IR_CONCAT:
    lprintf(l, " axis=%lld", (long long)a->axis);
    break;
  case IR_SORT:
    lprintf(l, " axis=%lld keys=%u index=%u", (long long)a->axis, a->sort.n_keys, a->sort.index);
    if (a->sort.descending) lprintf(l, " descending=%u", a->sort.descending);
    break;
  case IR_FFT: {
    int n = a->fft.n_dims <= IR_FFT_MAX_DIMS ? a->fft.n_dims : 0;
    if (a->fft.type <= IR_IRFFT_C2R) lprintf(l, " type=%s", ir_fft_type_name[a->fft.type]);
    else lprintf(l, " type=<bad %u>", a->fft.type);
    puts_(l, " lengths=");
    put_i64s(l, a->fft.lengths, n);
    lprintf(l, " pairs=%u", a->fft.pairs);
    break;
  }
  case IR_CMP:
    if ((unsigned)a->cmp < sizeof cmp_names / sizeof cmp_names[0])
      lprintf(l, " dir=%s", cmp_names[a->cmp]);
    else
      lprintf(l, " dir=<bad %d>", (int)a->cmp);
    break;
  case IR_TRANSPOSE:
    puts_(l, " perm=");
    put_dims(l, a->dims.d, clamp_n(a->dims.n));
    break;
  case IR_BROADCAST:
    puts_(l, " dims=");
    put_dims(l, a->dims.d, clamp_n(a->dims.n));
    break;
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX:
  case IR_REDUCE_MIN:
  case IR_REV:
  case IR_REDUCE_PROD:
    puts_(l, " axes=");
    put_dims(l, a->dims.d, clamp_n(a->dims.n));
    break;
  case IR_SLICE: {
    /* The slice struct has no count: it has one entry per operand dim (= result dim). */
    int n = in->n_args == 1 ? operand0_rank(f, in) : -1;
    if (n < 0 && in->ty < f->n_types) n = f->types[in->ty].rank;
    n = clamp_n(n);
    puts_(l, " start=");
    put_i64s(l, a->slice.start, n);
    puts_(l, " limit=");
    put_i64s(l, a->slice.limit, n);
    puts_(l, " stride=");
    put_i64s(l, a->slice.stride, n);
    break;
  }
  case IR_GATHER:
  case IR_SCATTER: {
    const ir_gather *g = &a->gather;
    bool gather = in->op == IR_GATHER;
    puts_(l, gather ? " offset_dims=" : " window_dims=");
    put_dims(l, g->offset_dims.d, clamp_n(g->offset_dims.n));
    puts_(l, gather ? " collapsed=" : " inserted=");
    put_dims(l, g->collapsed.d, clamp_n(g->collapsed.n));
    puts_(l, " start_map=");
    put_dims(l, g->start_map.d, clamp_n(g->start_map.n));
    lprintf(l, " index_dim=%u", (unsigned)g->index_dim);
    if (gather) {
      int n = in->n_args == 2 ? operand0_rank(f, in) : 0;
      puts_(l, " sizes=");
      put_i64s(l, g->sizes, clamp_n(n));
    } else {
      lprintf(l, " combine=%s", g->combine == IR_COMBINE_ADD ? "add" : "set");
    }
    lprintf(l, " mode=%s", g->mode == IR_INDEX_FILL ? "fill" : "clip");
    break;
  }
  case IR_PAD: {
    int n = in->ty < f->n_types ? clamp_n(f->types[in->ty].rank) : 0;
    puts_(l, " lo=");
    put_i64s(l, a->pad.lo, n);
    puts_(l, " hi=");
    put_i64s(l, a->pad.hi, n);
    puts_(l, " interior=");
    put_i64s(l, a->pad.interior, n);
    break;
  }
  case IR_CONV: {
    int n = clamp_n(operand0_rank(f, in)), ns = n >= 2 ? n - 2 : 0;
    const ir_conv *c = &a->conv;
    static const char *const keys[] = {" strides=", " pad_lo=", " pad_hi=", " lhs_dil=", " rhs_dil="};
    const int64_t *lists[] = {c->stride, c->pad_lo, c->pad_hi, c->lhs_dil, c->rhs_dil};
    puts_(l, " lhs=");
    put_dims(l, c->lhs, n);
    puts_(l, " rhs=");
    put_dims(l, c->rhs, n);
    puts_(l, " out=");
    put_dims(l, c->out, n);
    for (int i = 0; i < 5; i++) {
      puts_(l, keys[i]);
      put_i64s(l, lists[i], ns);
    }
    lprintf(l, " groups=%lld batch_groups=%lld", (long long)c->groups, (long long)c->batch_groups);
    break;
  }
  case IR_REDUCE_WINDOW:
  case IR_SELECT_SCATTER: {
    int n = clamp_n(operand0_rank(f, in));
    const ir_window *w = &a->window;
    static const char *const kinds[] = {"sum", "max", "min"};
    if (w->kind <= JIT_WINDOW_MIN) lprintf(l, " reduce=%s", kinds[w->kind]);
    else lprintf(l, " reduce=<bad %u>", w->kind);
    puts_(l, " window=");
    put_i64s(l, w->size, n);
    puts_(l, " strides=");
    put_i64s(l, w->stride, n);
    puts_(l, " pad_lo=");
    put_i64s(l, w->pad_lo, n);
    puts_(l, " pad_hi=");
    put_i64s(l, w->pad_hi, n);
    break;
  }
  case IR_DOT:
    if (a->dot.n_batch) {
      puts_(l, " batch=");
      put_dims(l, a->dot.lhs_batch, clamp_n(a->dot.n_batch));
      puts_(l, "x");
      put_dims(l, a->dot.rhs_batch, clamp_n(a->dot.n_batch));
    }
    puts_(l, " contract=");
    put_dims(l, a->dot.lhs_contract, clamp_n(a->dot.n_contract));
    puts_(l, "x");
    put_dims(l, a->dot.rhs_contract, clamp_n(a->dot.n_contract));
    break;
  case IR_SCAN:
    lprintf(l, " consts=%u carry=%u length=%lld", (unsigned)a->scan.n_consts,
            (unsigned)a->scan.n_carry, (long long)a->scan.length);
    if (a->scan.reverse) puts_(l, " reverse=1");
    break;
  case IR_WHILE:
    lprintf(l, " consts=%u", (unsigned)a->cond.n_consts);
    break;
  case IR_GET:
    lprintf(l, " index=%lld", (long long)a->axis);
    break;
  case IR_SHARD_MAP: {
    const ir_func *b = ir_body(f, in);
    if (b && b->mesh) {
      puts_(l, " mesh[");
      for (int i = 0; i < b->mesh->n_axes && i < IR_MAX_MESH_AXES; i++)
        lprintf(l, "%s%s=%lld", i ? "," : "", b->mesh->names[i], (long long)b->mesh->sizes[i]);
      puts_(l, "]");
    }
    for (int part = 0; part < 2; part++) {
      uint32_t from = part ? in->n_args : 0, to = part ? in->n_args + a->smap.n_out : in->n_args;
      puts_(l, part ? " out=[" : " in=[");
      for (uint32_t i = from; i < to; i++) {
        char buf[256];
        if (i > from) puts_(l, ", ");
        if (!a->smap.specs || !a->smap.specs[i]) puts_(l, "<no spec>");
        else if (sharding_format_spec(a->smap.specs[i], buf, sizeof buf) < (int)sizeof buf)
          lprintf(l, "\"%s\"", buf);
        else puts_(l, "<spec too long>");
      }
      puts_(l, "]");
    }
    break;
  }
  case IR_SHARDING: {
    char buf[512];
    if (!a->sharding) puts_(l, " <no sharding>");
    else if (sharding_format(a->sharding, buf, sizeof buf) < (int)sizeof buf) lprintf(l, " %s", buf);
    else puts_(l, " <sharding too long>");
    break;
  }
  case IR_ALL_REDUCE:
  case IR_ALL_GATHER:
  case IR_REDUCE_SCATTER:
  case IR_ALL_TO_ALL:
  case IR_COLLECTIVE_PERMUTE:
  case IR_SHARD_SLICE:
  case IR_AXIS_INDEX: {
    static const char *const kinds[] = {"sum", "max", "min"};
    const ir_coll *c = &a->coll;
    puts_(l, " over=[");
    for (int i = 0, k = 0; i < 8; i++) {
      if (!(c->axes >> i & 1)) continue;
      if (k++) puts_(l, ",");
      if (f->mesh && i < f->mesh->n_axes) puts_(l, f->mesh->names[i]);
      else lprintf(l, "<axis %d>", i);
    }
    puts_(l, "]");
    if (in->op == IR_ALL_REDUCE || in->op == IR_REDUCE_SCATTER)
      lprintf(l, " kind=%s", c->kind < 3 ? kinds[c->kind] : "<bad>");
    if (in->op == IR_ALL_GATHER || in->op == IR_REDUCE_SCATTER || in->op == IR_ALL_TO_ALL ||
        in->op == IR_SHARD_SLICE)
      lprintf(l, " dim=%u", (unsigned)c->dim);
    if (in->op == IR_ALL_TO_ALL) lprintf(l, " dim2=%u", (unsigned)c->dim2);
    if (in->op == IR_COLLECTIVE_PERMUTE) lprintf(l, " shift=%d", (int)c->shift);
    break;
  }
  default:
    break;
  }
  if (a->remat) lprintf(l, " remat=%u", (unsigned)a->remat);
}

/* A scan's result types `(T1, T2)`, from its body. */
static void put_scan_types(line *l, const ir_func *f, const ir_ins *in) {
  const ir_func *b = ir_body(f, in);
  if (!b) {
    puts_(l, "<bad body>");
    return;
  }
  puts_(l, "(");
  for (uint32_t k = 0; k < b->n_results; k++) {
    ir_type t;
    if (k) puts_(l, ", ");
    if (ir_result_type(f, in, k, &t)) put_type(l, &t);
    else puts_(l, "<bad result>");
  }
  puts_(l, ")");
}

static void put_note(line *l, ir_ref r) {
  char buf[512];
  if (!l->note || l->depth) return;
  buf[0] = '\0';
  l->note(l->note_ctx, r, buf, sizeof buf);
  if (buf[0]) lprintf(l, " %s", buf);
}

static void put_ins(line *l, const ir_func *f, ir_ref r, int indent) {
  const ir_ins *in = &f->ins[r];
  const char *name = (unsigned)in->op < IR_N_OPS ? ir_op_name[in->op] : "<bad op>";
  lprintf(l, "%*s  %%%u = %s", indent, "", (unsigned)r, name);
  if (in->op == IR_CONST) {
    puts_(l, " ");
    put_double(l, in->attr.value);
  }
  for (uint32_t i = 0; i < in->n_args; i++) lprintf(l, "%s%%%u", i ? ", " : " ", (unsigned)in->args[i]);
  put_attrs(l, f, in);
  puts_(l, " : ");
  if (ir_op_has_body(in->op)) {
    put_scan_types(l, f, in);
    puts_(l, " {");
  } else {
    put_ty(l, f, in->ty);
    put_note(l, r);
  }
  if (in->loc.file) {
    size_t pad = l->col < LOC_COLUMN ? LOC_COLUMN - l->col : 1;
    while (pad--) put(l, " ", 1);
    puts_(l, "# ");
    puts_(l, in->loc.file);
    lprintf(l, ":%d", in->loc.line);
  }
}

/* f at indent spaces; a scan's body follows its line, nested 4 deeper, closed by `}`. */
static void print_func(line *l, const ir_func *f, int indent) {
  l->col = 0;
  lprintf(l, "%*sfunc @", indent, "");
  puts_(l, f->name ? f->name : "");
  puts_(l, "(");
  uint32_t np = f->n_params < f->n_ins ? f->n_params : f->n_ins;
  for (uint32_t i = 0; i < np; i++) {
    lprintf(l, "%s%%%u: ", i ? ", " : "", (unsigned)i);
    put_ty(l, f, f->ins[i].ty);
    put_note(l, i);
  }
  puts_(l, ") -> ");
  if (f->n_results != 1) puts_(l, "(");
  for (uint32_t i = 0; i < f->n_results; i++) {
    if (i) puts_(l, ", ");
    ir_ref r = f->results[i];
    if (r < f->n_ins)
      put_ty(l, f, f->ins[r].ty);
    else
      lprintf(l, "<bad ref %%%u>", (unsigned)r);
  }
  if (f->n_results != 1) puts_(l, ")");
  if (f->mesh) {
    puts_(l, " mesh[");
    for (int i = 0; i < f->mesh->n_axes && i < IR_MAX_MESH_AXES; i++)
      lprintf(l, "%s%s=%lld", i ? "," : "", f->mesh->names[i], (long long)f->mesh->sizes[i]);
    puts_(l, "]");
  }
  puts_(l, " {\n");
  for (ir_ref r = np; r < f->n_ins; r++) {
    l->col = 0;
    put_ins(l, f, r, indent);
    puts_(l, "\n");
    flush(l);
    uint32_t nb = ir_n_bodies(&f->ins[r]);
    if (nb && indent < 64) { /* deeper nesting than that is a broken function, not a program */
      l->depth++;
      for (uint32_t j = 0; j < nb; j++) { /* a cond's branches, a while's predicate and body */
        const ir_func *b = ir_body_at(f, &f->ins[r], j);
        if (b) print_func(l, b, indent + 4);
        else lprintf(l, "%*s    <bad body>\n", indent, "");
      }
      l->depth--;
      lprintf(l, "%*s  }\n", indent, "");
    }
  }
  lprintf(l, "%*s  return", indent, "");
  for (uint32_t i = 0; i < f->n_results; i++) lprintf(l, "%s%%%u", i ? ", " : " ", (unsigned)f->results[i]);
  lprintf(l, "\n%*s}\n", indent, "");
  flush(l);
}

jit_status ir_print(const ir_func *f, FILE *out) { return ir_print_annotated(f, out, NULL, NULL); }

jit_status ir_print_annotated(const ir_func *f, FILE *out, ir_note_fn note, void *ctx) {
  line l = {.out = out, .note = note, .note_ctx = ctx};
  print_func(&l, f, 0);
  if (l.err || ferror(out)) return jit_error(JIT_EIO, "ir_print: writing the IR text failed");
  return JIT_OK;
}
