/* parse.c: reads the IR text form (print.c's output, golden tests, tjit-opt input) back into
 * functions. Hand-written lexer and recursive descent; any input gives a function or a "line:col" error. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/mesh_spec.h"
#include "runtime/error.h"

/* ---- lexer ------------------------------------------------------------------------------------ */
typedef enum tok_kind {
  T_EOF,
  T_NL,     /* end of a line; carries that line's comment */
  T_IDENT,  /* [A-Za-z_][A-Za-z0-9_]*: keywords, op names, dtypes, attribute names */
  T_NUM,    /* a sign, a digit or '.', then [A-Za-z0-9_.] (and a sign after e/E): checked on use */
  T_VAL,    /* %name */
  T_GLOBAL, /* @name */
  T_ARROW,  /* -> */
  T_PUNCT,  /* one of ( ) [ ] { } , : = */
  T_BAD     /* any other byte */
} tok_kind;

typedef struct tok {
  tok_kind k;
  const char *s;     /* the token's text (for T_VAL / T_GLOBAL including the sigil) */
  size_t n;
  int line, col;     /* 1-based */
  const char *cmt;   /* T_NL / T_EOF: the text after '#' on the line just ended, or NULL */
  size_t cmt_n;
} tok;

/* A value name and the ref it maps to: open addressing, names point into the source text. */
typedef struct slot {
  const char *s;     /* NULL: empty */
  size_t n;
  ir_ref ref;
} slot;

typedef struct parser {
  const char *pos, *end;
  int line, col;               /* of pos */
  const char *cmt;             /* comment seen on the current line, not yet attached */
  size_t cmt_n;
  tok t;                       /* the current token */
  ir_func *f;                  /* the function being read */
  slot *map;                   /* value names of f */
  size_t map_cap, map_n;
  ir_ref *args;                /* operand scratch */
  size_t args_cap;
  int depth;                   /* scan bodies being read around the current function */
} parser;

enum { MAX_SCAN_NESTING = 32 }; /* keeps hostile input from exhausting the stack */

static bool is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_name(int c) { return is_alpha(c) || is_digit(c) || c == '.'; }

static void bump(parser *p) {
  p->pos++;
  p->col++;
}

static void lex(parser *p) {
  tok *t = &p->t;
  for (;;) {
    while (p->pos < p->end && (*p->pos == ' ' || *p->pos == '\t' || *p->pos == '\r')) bump(p);
    if (p->pos < p->end && *p->pos == '#') {
      bump(p);
      p->cmt = p->pos;
      while (p->pos < p->end && *p->pos != '\n') bump(p);
      p->cmt_n = (size_t)(p->pos - p->cmt);
      continue;
    }
    break;
  }
  memset(t, 0, sizeof *t);
  t->s = p->pos;
  t->line = p->line;
  t->col = p->col;
  if (p->pos >= p->end) {
    t->k = T_EOF;
    t->cmt = p->cmt;
    t->cmt_n = p->cmt_n;
    p->cmt = NULL;
    return;
  }
  unsigned char c = (unsigned char)*p->pos;
  const char *s = p->pos;
  if (c == '\n') {
    t->k = T_NL;
    t->n = 1;
    t->cmt = p->cmt;
    t->cmt_n = p->cmt_n;
    p->cmt = NULL;
    p->pos++;
    p->line++;
    p->col = 1;
    return;
  }
  int c1 = p->pos + 1 < p->end ? (unsigned char)p->pos[1] : -1;
  if (is_alpha(c)) {
    t->k = T_IDENT;
    while (p->pos < p->end && (is_alpha(*p->pos) || is_digit(*p->pos))) bump(p);
  } else if (is_digit(c) || ((c == '-' || c == '+') && c1 >= 0 && (is_name(c1))) ||
             (c == '.' && c1 >= 0 && is_digit(c1))) {
    t->k = T_NUM;
    if (c == '-' || c == '+') bump(p);
    while (p->pos < p->end) {
      char d = *p->pos;
      if (is_name(d)) {
        bump(p);
      } else if ((d == '+' || d == '-') && (p->pos[-1] == 'e' || p->pos[-1] == 'E')) {
        bump(p);
      } else {
        break;
      }
    }
  } else if ((c == '%' || c == '@') && c1 >= 0 && (is_name(c1) || (c == '@' && c1 == '-'))) {
    t->k = c == '%' ? T_VAL : T_GLOBAL;
    bump(p);
    while (p->pos < p->end && (is_name(*p->pos) || (c == '@' && *p->pos == '-'))) bump(p);
  } else if (c == '-' && c1 == '>') {
    t->k = T_ARROW;
    bump(p);
    bump(p);
  } else if (c && strchr("()[]{},:=", c)) {
    t->k = T_PUNCT;
    bump(p);
  } else {
    t->k = T_BAD;
    bump(p);
  }
  t->n = (size_t)(p->pos - s);
}

/* ---- errors ----------------------------------------------------------------------------------- */
/* "'text'" (shortened), or a description for tokens that have no useful text. */
static const char *describe(const tok *t, char *buf, size_t n) {
  switch (t->k) {
  case T_EOF:
    return "end of input";
  case T_NL:
    return "end of line";
  case T_BAD: {
    unsigned char c = (unsigned char)t->s[0];
    if (c >= 0x21 && c < 0x7f)
      snprintf(buf, n, "'%c'", c);
    else
      snprintf(buf, n, "byte 0x%02x", c);
    return buf;
  }
  default:
    if (t->n > 40)
      snprintf(buf, n, "'%.37s...'", t->s);
    else
      snprintf(buf, n, "'%.*s'", (int)t->n, t->s);
    return buf;
  }
}

static jit_status err_at(int line, int col, const char *fmt, ...) JIT_PRINTF(3, 4);
static jit_status err_at(int line, int col, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return jit_error(JIT_EINVAL, "%d:%d: %s", line, col, msg);
}

/* "expected WHAT, found TOKEN" at the current token. */
static jit_status expected(parser *p, const char *what) {
  char buf[64];
  return err_at(p->t.line, p->t.col, "expected %s, found %s", what, describe(&p->t, buf, sizeof buf));
}

static jit_status oom(parser *p) {
  return jit_error(JIT_ENOMEM, "%d:%d: out of memory", p->t.line, p->t.col);
}

static bool is_punct(const parser *p, char c) { return p->t.k == T_PUNCT && p->t.s[0] == c; }
static bool is_word(const parser *p, const char *w) {
  return p->t.k == T_IDENT && p->t.n == strlen(w) && memcmp(p->t.s, w, p->t.n) == 0;
}

static jit_status expect_punct(parser *p, char c, const char *what) {
  if (!is_punct(p, c)) return expected(p, what);
  lex(p);
  return JIT_OK;
}

static void skip_newlines(parser *p) {
  while (p->t.k == T_NL) lex(p);
}

/* ---- value names ------------------------------------------------------------------------------ */
static uint64_t hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static slot *map_find(parser *p, const char *s, size_t n) {
  if (!p->map_cap) return NULL;
  size_t mask = p->map_cap - 1;
  for (size_t i = hash(s, n) & mask;; i = (i + 1) & mask) {
    slot *e = &p->map[i];
    if (!e->s) return e;
    if (e->n == n && memcmp(e->s, s, n) == 0) return e;
  }
}

static bool map_put(parser *p, const char *s, size_t n, ir_ref ref) {
  if ((p->map_n + 1) * 2 > p->map_cap) {
    size_t cap = p->map_cap ? p->map_cap * 2 : 64;
    slot *old = p->map, *m = calloc(cap, sizeof *m);
    if (!m) return false;
    size_t old_cap = p->map_cap;
    p->map = m;
    p->map_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
      if (old[i].s) *map_find(p, old[i].s, old[i].n) = old[i];
    free(old);
  }
  slot *e = map_find(p, s, n);
  e->s = s;
  e->n = n;
  e->ref = ref;
  p->map_n++;
  return true;
}

static void map_clear(parser *p) {
  if (p->map) memset(p->map, 0, p->map_cap * sizeof *p->map);
  p->map_n = 0;
}

/* Defines the current T_VAL token as ref (the caller has checked it is new). */
static jit_status define(parser *p, const tok *name, ir_ref ref) {
  if (!map_put(p, name->s, name->n, ref)) return oom(p);
  return JIT_OK;
}

static jit_status check_new(parser *p, const tok *name) {
  slot *e = map_find(p, name->s, name->n);
  if (e && e->s)
    return err_at(name->line, name->col, "value '%.*s' is already defined", (int)name->n, name->s);
  return JIT_OK;
}

static jit_status use_value(parser *p, ir_ref *out) {
  if (p->t.k != T_VAL) return expected(p, "a value ('%name')");
  slot *e = map_find(p, p->t.s, p->t.n);
  if (!e || !e->s)
    return err_at(p->t.line, p->t.col, "undefined value '%.*s'", (int)p->t.n, p->t.s);
  *out = e->ref;
  lex(p);
  return JIT_OK;
}

/* ---- numbers and types ------------------------------------------------------------------------ */
/* A decimal integer token (optional '-'), range-checked against int64. */
static bool tok_int(const tok *t, int64_t *out) {
  if (t->k != T_NUM) return false;
  size_t i = 0;
  bool neg = false;
  if (t->s[0] == '-' || t->s[0] == '+') {
    neg = t->s[0] == '-';
    i = 1;
  }
  if (i == t->n) return false;
  uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < t->n; i++) {
    if (!is_digit(t->s[i])) return false;
    unsigned d = (unsigned)(t->s[i] - '0');
    if (v > (lim - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return true;
}

static jit_status parse_int(parser *p, const char *what, int64_t lo, int64_t hi, int64_t *out) {
  int64_t v = 0;
  if (!tok_int(&p->t, &v) || v < lo || v > hi) return expected(p, what);
  *out = v;
  lex(p);
  return JIT_OK;
}

/* A dtype name, then '[' dims ']'. */
static jit_status parse_type(parser *p, ir_type *out) {
  memset(out, 0, sizeof *out);
  if (p->t.k != T_IDENT) return expected(p, "a type (e.g. 'f32[4]')");
  if (!ir_dtype_parse(p->t.s, p->t.n, &out->dtype)) {
    char buf[64];
    return err_at(p->t.line, p->t.col,
                  "unknown dtype %s (expected bool, i8, u8, i32, i64, f16, bf16, f32 or f64)",
                  describe(&p->t, buf, sizeof buf));
  }
  lex(p);
  jit_status st = expect_punct(p, '[', "'[' after the dtype");
  if (st) return st;
  int64_t prod = 1; /* of the nonzero dims, as the verifier requires */
  if (!is_punct(p, ']')) {
    for (;;) {
      if (out->rank == IR_MAX_RANK)
        return err_at(p->t.line, p->t.col, "too many dims: the maximum rank is %d", IR_MAX_RANK);
      int64_t d;
      if (!tok_int(&p->t, &d)) return expected(p, "a dimension size");
      if (d < 0) return expected(p, "a dimension size >= 0");
      if (d && prod > INT64_MAX / d)
        return err_at(p->t.line, p->t.col, "the product of the dims overflows int64");
      if (d) prod *= d;
      out->dims[out->rank++] = d;
      lex(p);
      if (is_punct(p, ']')) break;
      if ((st = expect_punct(p, ',', "',' or ']' in the dims"))) return st;
    }
  }
  lex(p);
  return JIT_OK;
}

static jit_status parse_type_ty(parser *p, ir_ty *ty) {
  ir_type t;
  jit_status st = parse_type(p, &t);
  if (st) return st;
  *ty = ir_type_intern(p->f, &t);
  return *ty == UINT32_MAX ? oom(p) : JIT_OK;
}

/* ---- attributes ------------------------------------------------------------------------------- */
/* '[' axis, ... ']' with each axis in 0..IR_MAX_RANK-1. */
static jit_status parse_axes(parser *p, uint8_t *d, uint8_t *n) {
  jit_status st = expect_punct(p, '[', "'[' to start a list of axes");
  if (st) return st;
  *n = 0;
  if (!is_punct(p, ']')) {
    for (;;) {
      if (*n == IR_MAX_RANK)
        return err_at(p->t.line, p->t.col, "too many axes: at most %d", IR_MAX_RANK);
      int64_t v = 0;
      if ((st = parse_int(p, "an axis (0..7)", 0, IR_MAX_RANK - 1, &v))) return st;
      d[(*n)++] = (uint8_t)v;
      if (is_punct(p, ']')) break;
      if ((st = expect_punct(p, ',', "',' or ']' in the list"))) return st;
    }
  }
  lex(p);
  return JIT_OK;
}

/* '[' int64, ... ']' with exactly n entries. */
static jit_status parse_i64s(parser *p, const char *key, int64_t *v, int n) {
  int line = p->t.line, col = p->t.col;
  jit_status st = expect_punct(p, '[', "'[' to start a list");
  if (st) return st;
  int k = 0;
  if (!is_punct(p, ']')) {
    for (;;) {
      int64_t x = 0;
      if (k == n) break;
      if ((st = parse_int(p, "an integer", INT64_MIN, INT64_MAX, &x))) return st;
      v[k++] = x;
      if (is_punct(p, ']')) break;
      if ((st = expect_punct(p, ',', "',' or ']' in the list"))) return st;
    }
  }
  if (k != n || !is_punct(p, ']'))
    return err_at(line, col, "'%s' needs %d entr%s (the operand's rank)", key, n, n == 1 ? "y" : "ies");
  lex(p);
  return JIT_OK;
}

/* '[' axes ']' 'x' '[' axes ']', both lists of the same length. */
static jit_status parse_axes_pair(parser *p, const char *key, uint8_t *l, uint8_t *r, uint8_t *n) {
  int line = p->t.line, col = p->t.col;
  uint8_t nl, nr;
  jit_status st = parse_axes(p, l, &nl);
  if (st) return st;
  if (!is_word(p, "x")) return expected(p, "'x' between the lhs and rhs lists");
  lex(p);
  if ((st = parse_axes(p, r, &nr))) return st;
  if (nl != nr)
    return err_at(line, col, "'%s' lists differ in length: %u vs %u", key, (unsigned)nl, (unsigned)nr);
  *n = nl;
  return JIT_OK;
}

enum { A_DIM = 1, A_AXIS = 2, A_DIR = 4, A_PERM = 8, A_DIMS = 16, A_AXES = 32, A_START = 64,
       A_LIMIT = 128, A_STRIDE = 256, A_BATCH = 512, A_CONTRACT = 1024, A_REMAT = 2048,
       A_CONSTS = 4096, A_CARRY = 8192, A_LENGTH = 16384, A_REVERSE = 32768, A_INDEX = 65536,
       A_OVER = 1 << 17, A_KIND = 1 << 18, A_DIM2 = 1 << 19, A_SHIFT = 1 << 20,
       A_KEYS = 1 << 21, A_DESCENDING = 1 << 22 };
enum { A_OPTIONAL = A_BATCH | A_REVERSE | A_DESCENDING };

static const struct { unsigned bit; const char *name; } attr_keys[] = {
    {A_DIM, "dim"},       {A_AXIS, "axis"},     {A_DIR, "dir"},       {A_PERM, "perm"},
    {A_DIMS, "dims"},     {A_AXES, "axes"},     {A_START, "start"},   {A_LIMIT, "limit"},
    {A_STRIDE, "stride"}, {A_BATCH, "batch"},   {A_CONTRACT, "contract"}, {A_CONSTS, "consts"},
    {A_CARRY, "carry"},   {A_LENGTH, "length"}, {A_REVERSE, "reverse"}, {A_INDEX, "index"},
    {A_OVER, "over"},     {A_KIND, "kind"},     {A_DIM2, "dim2"},     {A_SHIFT, "shift"},
    {A_KEYS, "keys"},     {A_DESCENDING, "descending"},
};

/* Attributes op accepts, and those it requires. */
static unsigned attrs_allowed(ir_op op) {
  switch (op) {
  case IR_IOTA: return A_DIM;
  case IR_CONCAT: return A_AXIS;
  case IR_SORT: return A_AXIS | A_KEYS | A_INDEX | A_DESCENDING;
  case IR_CMP: return A_DIR;
  case IR_TRANSPOSE: return A_PERM;
  case IR_BROADCAST: return A_DIMS;
  case IR_REDUCE_SUM: case IR_REDUCE_MAX: case IR_REDUCE_MIN: case IR_REV:
  case IR_REDUCE_PROD: return A_AXES;
  case IR_SLICE: return A_START | A_LIMIT | A_STRIDE;
  case IR_DOT: return A_BATCH | A_CONTRACT;
  case IR_SCAN: return A_CONSTS | A_CARRY | A_LENGTH | A_REVERSE;
  case IR_GET: return A_INDEX;
  case IR_WHILE: return A_CONSTS;
  case IR_ALL_REDUCE: return A_OVER | A_KIND;
  case IR_ALL_GATHER: case IR_SHARD_SLICE: return A_OVER | A_DIM;
  case IR_REDUCE_SCATTER: return A_OVER | A_KIND | A_DIM;
  case IR_ALL_TO_ALL: return A_OVER | A_DIM | A_DIM2;
  case IR_COLLECTIVE_PERMUTE: return A_OVER | A_SHIFT;
  case IR_AXIS_INDEX: return A_OVER;
  default: return 0;
  }
}
static unsigned attrs_required(ir_op op) { return attrs_allowed(op) & ~(unsigned)A_OPTIONAL; }

static const char *attr_list(unsigned bits, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof attr_keys / sizeof attr_keys[0]; i++) {
    if (!(bits & attr_keys[i].bit)) continue;
    int w = snprintf(buf + len, n - len, "%s'%s'", len ? ", " : "", attr_keys[i].name);
    if (w < 0 || (size_t)w >= n - len) break;
    len += (size_t)w;
  }
  return buf;
}

/* over=[x,y]: mesh axis names of the function's mesh (declared in its header); sets the mask and
   the group size. */
static jit_status parse_over(parser *p, ir_attr *a) {
  jit_status st;
  const ir_mesh *m = p->f->mesh;
  if (!m) return err_at(p->t.line, p->t.col, "a collective needs the function's mesh ('mesh[x=2]' after the result types)");
  if ((st = expect_punct(p, '[', "'[' before the axis names"))) return st;
  while (!is_punct(p, ']')) {
    if (p->t.k != T_IDENT) return expected(p, "a mesh axis name");
    int axis = -1;
    for (int i = 0; i < m->n_axes; i++)
      if (strlen(m->names[i]) == p->t.n && memcmp(m->names[i], p->t.s, p->t.n) == 0) axis = i;
    if (axis < 0) return err_at(p->t.line, p->t.col, "no mesh axis '%.*s'", (int)p->t.n, p->t.s);
    if (a->coll.axes >> axis & 1)
      return err_at(p->t.line, p->t.col, "axis '%.*s' named twice", (int)p->t.n, p->t.s);
    a->coll.axes |= (uint8_t)(1u << axis);
    lex(p);
    if (is_punct(p, ']')) break;
    if ((st = expect_punct(p, ',', "',' or ']' after an axis name"))) return st;
  }
  lex(p);
  int64_t g = ir_mesh_group(m, a->coll.axes);
  if (g > UINT16_MAX) return err_at(p->t.line, p->t.col, "a group of %lld devices is too large", (long long)g);
  a->coll.group = (uint16_t)g;
  return JIT_OK;
}

/* `mesh[x=2,y=4]` into *out. */
static jit_status parse_mesh_text(parser *p, ir_mesh *out) {
  jit_status st;
  ir_mesh m = {0};
  lex(p); /* 'mesh' */
  if ((st = expect_punct(p, '[', "'[' after 'mesh'"))) return st;
  while (!is_punct(p, ']')) {
    if (m.n_axes == IR_MAX_MESH_AXES)
      return err_at(p->t.line, p->t.col, "a mesh has at most %d axes", IR_MAX_MESH_AXES);
    if (p->t.k != T_IDENT || p->t.n >= sizeof m.names[0]) return expected(p, "a mesh axis name");
    for (int i = 0; i < m.n_axes; i++)
      if (strlen(m.names[i]) == p->t.n && memcmp(m.names[i], p->t.s, p->t.n) == 0)
        return err_at(p->t.line, p->t.col, "mesh axis '%.*s' given twice", (int)p->t.n, p->t.s);
    memcpy(m.names[m.n_axes], p->t.s, p->t.n);
    lex(p);
    if ((st = expect_punct(p, '=', "'=' after the axis name"))) return st;
    if ((st = parse_int(p, "an axis size (1 to 4096)", 1, 4096, &m.sizes[m.n_axes]))) return st;
    m.n_axes++;
    if (is_punct(p, ']')) break;
    if ((st = expect_punct(p, ',', "',' or ']' in the mesh"))) return st;
  }
  lex(p);
  if (!m.n_axes) return err_at(p->t.line, p->t.col, "a mesh needs at least one axis");
  *out = m;
  return JIT_OK;
}

/* `mesh[x=2,y=4]` after a function's result types. */
static jit_status parse_mesh(parser *p) {
  ir_mesh m;
  jit_status st = parse_mesh_text(p, &m);
  if (st) return st;
  return ir_set_mesh(p->f, &m) == JIT_OK ? JIT_OK : oom(p);
}

/* A shard_map's specs after `in=` or `out=`: `["x,_", "_"]`, read from the raw text (the lexer
   has no strings); appended to *specs (malloc'd, references owned by the caller). */
static jit_status parse_spec_list(parser *p, jit_mesh *m, jit_sharding ***specs, uint32_t *n) {
  if (!is_punct(p, '[')) return expected(p, "'[' before the specs");
  const char *c = p->t.s + 1;
  int col = p->t.col + 1;
  for (;;) {
    while (c < p->end && (*c == ' ' || *c == '\t')) c++, col++;
    if (c < p->end && *c == ']') break;
    if (c >= p->end || *c != '"') return err_at(p->t.line, col, "expected a spec in double quotes or ']'");
    const char *e = c + 1;
    while (e < p->end && *e != '"' && *e != '\n') e++;
    if (e >= p->end || *e != '"') return err_at(p->t.line, col, "unterminated spec");
    char buf[256];
    if ((size_t)(e - c - 1) >= sizeof buf) return err_at(p->t.line, col, "spec too long");
    memcpy(buf, c + 1, (size_t)(e - c - 1));
    buf[e - c - 1] = '\0';
    jit_sharding **q = realloc(*specs, (*n + 1) * sizeof *q);
    if (!q) return oom(p);
    *specs = q;
    jit_status st = sharding_parse(m, buf, "shard_map", &q[*n]);
    if (st == JIT_ENOMEM) return oom(p);
    if (st) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", jit_last_error());
      return err_at(p->t.line, col, "%s", msg);
    }
    (*n)++;
    col += (int)(e + 1 - c);
    c = e + 1;
    while (c < p->end && (*c == ' ' || *c == '\t')) c++, col++;
    if (c < p->end && *c == ',') {
      c++, col++;
      continue;
    }
    if (c < p->end && *c == ']') break;
    return err_at(p->t.line, col, "expected ',' or ']' after a spec");
  }
  p->pos = c + 1;
  p->col = col + 1;
  lex(p);
  return JIT_OK;
}

/* A shard_map's `mesh[..] in=[..] out=[..]`: the specs (in then out) into *specs. */
static jit_status parse_smap_attrs(parser *p, uint32_t n_in, ir_attr *a, jit_sharding ***specs,
                                   uint32_t *n_specs) {
  jit_status st;
  if (!is_word(p, "mesh")) return expected(p, "'mesh[...]' after the shard_map's operands");
  ir_mesh im;
  if ((st = parse_mesh_text(p, &im))) return st;
  const char *names[IR_MAX_MESH_AXES];
  for (int i = 0; i < im.n_axes; i++) names[i] = im.names[i];
  jit_mesh *m = NULL;
  if ((st = mesh_new(NULL, 0, im.n_axes, im.sizes, names, NULL, "shard_map", &m))) {
    if (st == JIT_ENOMEM) return oom(p);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", jit_last_error());
    return err_at(p->t.line, p->t.col, "%s", msg);
  }
  for (int part = 0; part < 2 && !st; part++) {
    const char *key = part ? "out" : "in";
    if (!is_word(p, key)) {
      st = expected(p, part ? "'out=[...]'" : "'in=[...]'");
      break;
    }
    lex(p);
    if ((st = expect_punct(p, '=', "'=' after the key"))) break;
    uint32_t before = *n_specs;
    st = parse_spec_list(p, m, specs, n_specs);
    if (!st && !part && *n_specs - before != n_in)
      st = err_at(p->t.line, p->t.col, "%u in-specs for %u operands", (unsigned)(*n_specs - before),
                  (unsigned)n_in);
    if (!st && part) a->smap.n_out = *n_specs - before;
  }
  jit_mesh_free(m); /* the specs hold it */
  a->smap.specs = *specs;
  return st;
}

/* The sharding of a `sharding` op: `{mesh[x=2] "x,_"}`, read by the runtime's parser from a
   NUL-terminated copy of the rest of the line. */
static jit_status parse_sharding_attr(parser *p, ir_attr *a, jit_sharding **held) {
  if (!is_punct(p, '{')) return expected(p, "the sharding ('{mesh[x=2] \"x,_\"}')");
  const char *s = p->t.s, *e = s;
  while (e < p->end && *e != '\n') e++;
  char *copy = malloc((size_t)(e - s) + 1);
  if (!copy) return oom(p);
  memcpy(copy, s, (size_t)(e - s));
  copy[e - s] = '\0';
  const char *stop = NULL;
  jit_status st = sharding_parse_text(copy, &stop, held);
  if (st == JIT_ENOMEM) {
    free(copy);
    return oom(p);
  }
  if (st) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", jit_last_error());
    free(copy);
    return err_at(p->t.line, p->t.col, "%s", msg);
  }
  size_t used = (size_t)(stop - copy);
  free(copy);
  p->pos = s + used;
  p->col = p->t.col + (int)used;
  lex(p);
  a->sharding = *held;
  return JIT_OK;
}

/* remat=N: every op may carry a checkpoint tag (ir.h's ir_attr.remat); N >= 1 as printed. */
static jit_status parse_remat(parser *p, ir_attr *a, unsigned *seen) {
  tok key = p->t;
  if (*seen & A_REMAT) return err_at(key.line, key.col, "attribute 'remat' given twice");
  *seen |= A_REMAT;
  lex(p);
  jit_status st = expect_punct(p, '=', "'=' after 'remat'");
  if (st) return st;
  int64_t v = 0;
  if ((st = parse_int(p, "a remat tag (1 to 4294967295)", 1, UINT32_MAX, &v))) return st;
  a->remat = (uint32_t)v;
  return JIT_OK;
}

static jit_status parse_attr(parser *p, ir_op op, const ir_type *operand, ir_attr *a, unsigned *seen) {
  tok key = p->t;
  if (is_word(p, "remat")) return parse_remat(p, a, seen);
  unsigned bit = 0;
  for (size_t i = 0; i < sizeof attr_keys / sizeof attr_keys[0]; i++)
    if (is_word(p, attr_keys[i].name)) bit = attr_keys[i].bit;
  unsigned allowed = attrs_allowed(op);
  if (!(bit & allowed)) {
    char list[128];
    if (!allowed)
      return err_at(key.line, key.col, "'%s' has no attributes, found '%.*s'", ir_op_name[op],
                    (int)key.n, key.s);
    return err_at(key.line, key.col, "unknown attribute '%.*s' for '%s' (expected %s)", (int)key.n,
                  key.s, ir_op_name[op], attr_list(allowed, list, sizeof list));
  }
  if (*seen & bit)
    return err_at(key.line, key.col, "attribute '%.*s' given twice", (int)key.n, key.s);
  *seen |= bit;
  lex(p);
  char what[64];
  snprintf(what, sizeof what, "'=' after '%.*s'", (int)key.n, key.s);
  jit_status st = expect_punct(p, '=', what);
  if (st) return st;
  int rank = operand ? operand->rank : 0;
  switch (bit) {
  case A_DIM:
  case A_AXIS:
    return parse_int(p, "an integer", INT64_MIN, INT64_MAX, &a->axis);
  case A_DIR: {
    static const char *const dirs[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    for (int i = 0; i < 6; i++)
      if (is_word(p, dirs[i])) {
        a->cmp = (jit_cmp_op)i;
        lex(p);
        return JIT_OK;
      }
    return expected(p, "a comparison (eq, ne, lt, le, gt or ge)");
  }
  case A_PERM:
  case A_DIMS:
  case A_AXES:
    return parse_axes(p, a->dims.d, &a->dims.n);
  case A_START:
    return parse_i64s(p, "start", a->slice.start, rank);
  case A_LIMIT:
    return parse_i64s(p, "limit", a->slice.limit, rank);
  case A_STRIDE:
    return parse_i64s(p, "stride", a->slice.stride, rank);
  case A_INDEX:
    if (op == IR_SORT) {
      int64_t v = 0;
      jit_status s2 = parse_int(p, "an operand index", 0, UINT8_MAX, &v);
      a->sort.index = (uint8_t)v;
      return s2;
    }
    return parse_int(p, "a result index", 0, UINT32_MAX, &a->axis);
  case A_KEYS:
  case A_DESCENDING: {
    int64_t v = 0;
    jit_status s2 = bit == A_KEYS ? parse_int(p, "a key count", 1, UINT8_MAX, &v)
                                  : parse_int(p, "0 or 1", 0, 1, &v);
    if (bit == A_KEYS) a->sort.n_keys = (uint8_t)v;
    else a->sort.descending = (uint8_t)v;
    return s2;
  }
  case A_CONSTS:
  case A_CARRY: {
    int64_t v = 0;
    jit_status s2 = parse_int(p, "a count", 0, UINT32_MAX, &v);
    if (bit == A_CONSTS && op == IR_WHILE) a->cond.n_consts = (uint32_t)v;
    else if (bit == A_CONSTS) a->scan.n_consts = (uint32_t)v;
    else a->scan.n_carry = (uint32_t)v;
    return s2;
  }
  case A_LENGTH:
    return parse_int(p, "a length", 0, INT64_MAX, &a->scan.length);
  case A_REVERSE: {
    int64_t v = 0;
    jit_status s2 = parse_int(p, "0 or 1", 0, 1, &v);
    a->scan.reverse = (uint8_t)v;
    return s2;
  }
  case A_OVER:
    return parse_over(p, a);
  case A_KIND: {
    static const char *const kinds[] = {"sum", "max", "min"};
    for (int i = 0; i < 3; i++)
      if (is_word(p, kinds[i])) {
        a->coll.kind = (uint8_t)i;
        lex(p);
        return JIT_OK;
      }
    return expected(p, "a reduction kind (sum, max or min)");
  }
  case A_DIM2: {
    int64_t v = 0;
    jit_status s2 = parse_int(p, "a dim", 0, IR_MAX_RANK - 1, &v);
    a->coll.dim2 = (uint8_t)v;
    return s2;
  }
  case A_SHIFT: {
    int64_t v = 0;
    jit_status s2 = parse_int(p, "a shift", INT32_MIN, INT32_MAX, &v);
    a->coll.shift = (int32_t)v;
    return s2;
  }
  case A_BATCH:
    return parse_axes_pair(p, "batch", a->dot.lhs_batch, a->dot.rhs_batch, &a->dot.n_batch);
  default: /* A_CONTRACT */
    return parse_axes_pair(p, "contract", a->dot.lhs_contract, a->dot.rhs_contract,
                           &a->dot.n_contract);
  }
}

/* gather / scatter / pad keys, all required where allowed: bit i of *seen is index_keys[i]. */
enum { K_GATHER = 1, K_SCATTER = 2, K_PAD = 4, K_CONV = 8, K_WIN = 16, K_FFT = 32 };
static const struct { const char *name; unsigned ops; } index_keys[] = {
    {"offset_dims", K_GATHER}, {"window_dims", K_SCATTER}, {"collapsed", K_GATHER},
    {"inserted", K_SCATTER},   {"start_map", K_GATHER | K_SCATTER},
    {"index_dim", K_GATHER | K_SCATTER}, {"sizes", K_GATHER}, {"combine", K_SCATTER},
    {"mode", K_GATHER | K_SCATTER}, {"lo", K_PAD}, {"hi", K_PAD}, {"interior", K_PAD},
    {"lhs", K_CONV}, {"rhs", K_CONV}, {"out", K_CONV}, {"reduce", K_WIN}, {"window", K_WIN},
    {"strides", K_CONV | K_WIN}, {"pad_lo", K_CONV | K_WIN}, {"pad_hi", K_CONV | K_WIN},
    {"lhs_dil", K_CONV}, {"rhs_dil", K_CONV}, {"groups", K_CONV}, {"batch_groups", K_CONV},
    {"type", K_FFT}, {"lengths", K_FFT}, {"pairs", K_FFT},
};
enum { FIRST_FFT_KEY = 24 }; /* index_keys' "type" */
enum { N_INDEX_KEYS = sizeof index_keys / sizeof index_keys[0] };

static unsigned index_op_bit(ir_op op) {
  switch (op) {
  case IR_GATHER: return K_GATHER;
  case IR_SCATTER: return K_SCATTER;
  case IR_PAD: return K_PAD;
  case IR_CONV: return K_CONV;
  case IR_REDUCE_WINDOW: case IR_SELECT_SCATTER: return K_WIN;
  case IR_FFT: return K_FFT;
  default: return 0;
  }
}

/* One word among names (n of them) into *out. */
static jit_status parse_choice(parser *p, const char *const *names, int n, const char *what, uint8_t *out) {
  for (int i = 0; i < n; i++)
    if (is_word(p, names[i])) {
      *out = (uint8_t)i;
      lex(p);
      return JIT_OK;
    }
  return expected(p, what);
}

/* FFT's keys (j = 0 type, 1 lengths, 2 pairs). */
static jit_status parse_fft_attr(parser *p, int j, ir_fft *a) {
  int64_t v = 0;
  jit_status st;
  if (j == 0) return parse_choice(p, ir_fft_type_name, 4, "an fft type (fft, ifft, rfft or irfft)", &a->type);
  if (j == 2) {
    st = parse_int(p, "pairs (0 or 1)", 0, 1, &v);
    a->pairs = (uint8_t)v;
    return st;
  }
  int line = p->t.line, col = p->t.col;
  if ((st = expect_punct(p, '[', "'[' to start the fft lengths"))) return st;
  a->n_dims = 0;
  for (;;) {
    if (a->n_dims == IR_FFT_MAX_DIMS) return err_at(line, col, "at most %d fft lengths", IR_FFT_MAX_DIMS);
    if ((st = parse_int(p, "an fft length (>= 1)", 1, INT64_MAX, &v))) return st;
    a->lengths[a->n_dims++] = v;
    if (is_punct(p, ']')) break;
    if ((st = expect_punct(p, ',', "',' or ']' in the list"))) return st;
  }
  lex(p);
  return JIT_OK;
}

/* CONV's and the window ops' keys (index_keys from "lhs" on: j = 0 lhs .. 11 batch_groups). */
static jit_status parse_conv_attr(parser *p, int j, ir_op op, int rank, ir_attr *a) {
  ir_conv *c = &a->conv;
  ir_window *w = &a->window;
  bool conv = op == IR_CONV;
  int ns = rank > 2 ? rank - 2 : 0;
  uint8_t n = 0;
  jit_status st;
  static const char *const kinds[] = {"sum", "max", "min"};
  switch (j) {
  case 0:
  case 1:
  case 2:
    if ((st = parse_axes(p, j == 0 ? c->lhs : j == 1 ? c->rhs : c->out, &n))) return st;
    if (n != rank)
      return err_at(p->t.line, p->t.col, "a conv dim list needs %d entries (the operand's rank)", rank);
    return JIT_OK;
  case 3: return parse_choice(p, kinds, 3, "a reduction (sum, max or min)", &w->kind);
  case 4: return parse_i64s(p, "window", w->size, rank);
  case 5: return conv ? parse_i64s(p, "strides", c->stride, ns) : parse_i64s(p, "strides", w->stride, rank);
  case 6: return conv ? parse_i64s(p, "pad_lo", c->pad_lo, ns) : parse_i64s(p, "pad_lo", w->pad_lo, rank);
  case 7: return conv ? parse_i64s(p, "pad_hi", c->pad_hi, ns) : parse_i64s(p, "pad_hi", w->pad_hi, rank);
  case 8: return parse_i64s(p, "lhs_dil", c->lhs_dil, ns);
  case 9: return parse_i64s(p, "rhs_dil", c->rhs_dil, ns);
  case 10: return parse_int(p, "a group count", 1, INT32_MAX, &c->groups);
  default: return parse_int(p, "a group count", 1, INT32_MAX, &c->batch_groups);
  }
}

static jit_status parse_index_attr(parser *p, ir_op op, const ir_type *operand, ir_attr *a,
                                   unsigned *seen) {
  tok key = p->t;
  int k = -1;
  for (int i = 0; i < N_INDEX_KEYS; i++)
    if ((index_keys[i].ops & index_op_bit(op)) && is_word(p, index_keys[i].name)) k = i;
  if (k < 0)
    return err_at(key.line, key.col, "unknown attribute '%.*s' for '%s'", (int)key.n, key.s,
                  ir_op_name[op]);
  if (*seen >> k & 1)
    return err_at(key.line, key.col, "attribute '%.*s' given twice", (int)key.n, key.s);
  *seen |= 1u << k;
  lex(p);
  jit_status st = expect_punct(p, '=', "'=' after the attribute's name");
  if (st) return st;
  int rank = operand ? operand->rank : 0;
  ir_gather *g = &a->gather;
  static const char *const modes[] = {"clip", "fill"}, *const combiners[] = {"set", "add"};
  switch (k) {
  case 0:
  case 1: return parse_axes(p, g->offset_dims.d, &g->offset_dims.n);
  case 2:
  case 3: return parse_axes(p, g->collapsed.d, &g->collapsed.n);
  case 4: return parse_axes(p, g->start_map.d, &g->start_map.n);
  case 5: {
    int64_t v = 0;
    st = parse_int(p, "an index dim (0..8)", 0, IR_MAX_RANK, &v);
    g->index_dim = (uint8_t)v;
    return st;
  }
  case 6: return parse_i64s(p, "sizes", g->sizes, rank);
  case 7: return parse_choice(p, combiners, 2, "a combiner (set or add)", &g->combine);
  case 8: return parse_choice(p, modes, 2, "a mode (clip or fill)", &g->mode);
  case 9: return parse_i64s(p, "lo", a->pad.lo, rank);
  case 10: return parse_i64s(p, "hi", a->pad.hi, rank);
  case 11: return parse_i64s(p, "interior", a->pad.interior, rank);
  default:
    return k >= FIRST_FFT_KEY ? parse_fft_attr(p, k - FIRST_FFT_KEY, &a->fft)
                              : parse_conv_attr(p, k - 12, op, rank, a);
  }
}

/* The first index key op needs and *seen lacks, or NULL. */
static const char *missing_index_key(ir_op op, unsigned seen) {
  for (int i = 0; i < N_INDEX_KEYS; i++)
    if ((index_keys[i].ops & index_op_bit(op)) && !(seen >> i & 1)) return index_keys[i].name;
  return NULL;
}

/* ---- instructions and functions --------------------------------------------------------------- */
/* A "# FILE:LINE" comment: FILE is the text before the last ':' (after the spaces that follow
   '#'), LINE is digits. Anything else is an ordinary comment. */
static bool comment_loc(const char *c, size_t n, const char **file, size_t *file_n, int *line) {
  if (!c) return false;
  while (n && (*c == ' ' || *c == '\t')) c++, n--;
  while (n && (c[n - 1] == ' ' || c[n - 1] == '\t' || c[n - 1] == '\r')) n--;
  size_t colon = n;
  while (colon && c[colon - 1] != ':') colon--;
  if (!colon || colon == n || memchr(c, '\0', n)) return false;
  long v = 0;
  for (size_t i = colon; i < n; i++) {
    if (!is_digit(c[i]) || v > 100000000) return false;
    v = v * 10 + (c[i] - '0');
  }
  *file = c;
  *file_n = colon - 1;
  *line = (int)v;
  return true;
}

/* The end of an instruction's line; a location comment there becomes loc. */
static jit_status end_of_line(parser *p, ir_loc *loc, const char *what) {
  if (p->t.k != T_NL && p->t.k != T_EOF) return expected(p, what);
  const char *file;
  size_t n;
  int line;
  if (loc && comment_loc(p->t.cmt, p->t.cmt_n, &file, &n, &line)) {
    ir_func *f = p->f;
    /* ir_emit needs a NUL-terminated name: reuse the interned one when it matches, else make
       a copy in f's arena. */
    if (f->last_file && strlen(f->last_file) == n && memcmp(f->last_file, file, n) == 0) {
      loc->file = f->last_file;
    } else {
      char *s = ir_arena_alloc(&f->arena, n + 1);
      if (!s) return oom(p);
      memcpy(s, file, n);
      loc->file = s;
    }
    loc->line = line;
  }
  if (p->t.k == T_NL) lex(p);
  return JIT_OK;
}

static jit_status parse_func(parser *p);

/* One nested body at `func`: parsed with a fresh value map (the body has its own value names),
   then the parent's restored; it becomes one of the parent's bodies, its index in *index. */
static jit_status parse_body(parser *p, ir_op op, uint32_t *index) {
  if (!is_word(p, "func"))
    return expected(p, op == IR_COND ? "the cond's branches ('func @name(...)')"
                       : op == IR_WHILE ? "the while's predicate and body ('func @name(...)')"
                                        : "the scan's body ('func @name(...)')");
  if (p->depth == MAX_SCAN_NESTING)
    return err_at(p->t.line, p->t.col, "scans nested more than %d deep", MAX_SCAN_NESTING);
  ir_func *parent = p->f;
  slot *map = p->map;
  size_t map_cap = p->map_cap, map_n = p->map_n;
  ir_ref *args = p->args; /* holds the parent op's operands until it is emitted */
  size_t args_cap = p->args_cap;
  p->map = NULL;
  p->map_cap = p->map_n = 0;
  p->args = NULL;
  p->args_cap = 0;
  p->depth++;
  jit_status st = parse_func(p);
  p->depth--;
  ir_func *body = p->f;
  free(p->map);
  free(p->args);
  p->f = parent;
  p->map = map;
  p->map_cap = map_cap;
  p->map_n = map_n;
  p->args = args;
  p->args_cap = args_cap;
  if (st) return st;
  if (ir_add_body(parent, body, index)) return oom(p);
  skip_newlines(p);
  return JIT_OK;
}

/* The rest of a scan after ':': `(T1, T2) {`, the body as a nested func, `}`. The body becomes
   one of p->f's bodies (a->scan.body); the listed types must be the ones the body implies. */
static jit_status parse_scan_rest(parser *p, ir_op op, uint32_t n_args, ir_attr *a, ir_ty *ty,
                                  ir_loc *loc) {
  jit_status st;
  tok open = p->t;
  ir_type listed[64];
  uint32_t n_listed = 0;
  if ((st = expect_punct(p, '(', "'(' before a scan's result types"))) return st;
  while (!is_punct(p, ')')) {
    if (n_listed == sizeof listed / sizeof listed[0])
      return err_at(p->t.line, p->t.col, "more than %zu scan results", sizeof listed / sizeof listed[0]);
    if ((st = parse_type(p, &listed[n_listed++]))) return st;
    if (is_punct(p, ')')) break;
    if ((st = expect_punct(p, ',', "',' or ')' in the scan's result types"))) return st;
  }
  lex(p);
  if ((st = expect_punct(p, '{', "'{' before the scan's body"))) return st;
  if ((st = end_of_line(p, loc, "end of line after '{'"))) return st;
  skip_newlines(p);
  ir_func *parent = p->f;
  uint32_t index = 0, later = 0, n_bodies = 0;
  bool many = op == IR_COND || op == IR_WHILE; /* bodies one after another until '}' */
  do {
    if (n_bodies == 64) return err_at(p->t.line, p->t.col, "more than 64 bodies");
    if ((st = parse_body(p, op, n_bodies ? &later : &index))) return st;
    n_bodies++;
  } while (many && is_word(p, "func"));
  if (op == IR_SCAN) a->scan.body = index;
  else if (op == IR_SHARD_MAP) a->smap.body = index;
  else a->cond = (ir_cond){index, n_bodies, a->cond.n_consts};
  if (op == IR_WHILE && n_bodies != 2)
    return err_at(open.line, open.col, "a while has 2 bodies (predicate, body), found %u", (unsigned)n_bodies);
  const ir_func *body = ir_body(parent, &(ir_ins){.op = op, .attr = *a});
  if ((st = expect_punct(p, '}', "'}' after the scan's body"))) return st;
  if ((st = end_of_line(p, NULL, "end of line after '}'"))) return st;
  ir_ins probe = {.op = op, .n_args = n_args, .attr = *a};
  if (body->n_results != n_listed)
    return err_at(open.line, open.col, "the %s lists %u result types, its body returns %u",
                  ir_op_name[op], (unsigned)n_listed, (unsigned)body->n_results);
  for (uint32_t k = 0; k < n_listed; k++) {
    ir_type want;
    if (!ir_result_type(parent, &probe, k, &want))
      return err_at(open.line, open.col, "%s result %u has no type", ir_op_name[op], (unsigned)k);
    if (!ir_type_equal(&want, &listed[k])) {
      char t1[96], t2[96];
      ir_format_type(&listed[k], t1, sizeof t1);
      ir_format_type(&want, t2, sizeof t2);
      return err_at(open.line, open.col, "%s result %u is listed as %s, but the body makes it %s",
                    ir_op_name[op], (unsigned)k, t1, t2);
    }
  }
  ir_type token = {.dtype = JIT_BOOL, .rank = 0};
  *ty = ir_type_intern(parent, &token);
  return *ty == UINT32_MAX ? oom(p) : JIT_OK;
}

static jit_status parse_ins(parser *p) {
  jit_status st;
  tok name = p->t;
  if ((st = check_new(p, &name))) return st;
  lex(p);
  if ((st = expect_punct(p, '=', "'=' after the value name"))) return st;
  if (p->t.k != T_IDENT) return expected(p, "an op name");
  tok opt = p->t;
  ir_op op = IR_N_OPS;
  for (int i = 0; i < IR_N_OPS; i++)
    if (is_word(p, ir_op_name[i])) op = (ir_op)i;
  if (op == IR_N_OPS) return err_at(opt.line, opt.col, "unknown op '%.*s'", (int)opt.n, opt.s);
  if (op == IR_PARAM)
    return err_at(opt.line, opt.col, "params are declared in the function header, not in its body");
  lex(p);

  ir_attr a;
  memset(&a, 0, sizeof a);
  if (op == IR_CONST) {
    char buf[64];
    if ((p->t.k != T_NUM && p->t.k != T_IDENT) || p->t.n >= sizeof buf)
      return expected(p, "a number after 'const'");
    memcpy(buf, p->t.s, p->t.n);
    buf[p->t.n] = '\0';
    char *end;
    a.value = strtod(buf, &end);
    if (end != buf + p->t.n || end == buf) return expected(p, "a number after 'const'");
    lex(p);
  }

  uint32_t n = 0;
  if (p->t.k == T_VAL) {
    for (;;) {
      if (n == p->args_cap) {
        size_t cap = p->args_cap ? p->args_cap * 2 : 16;
        if (cap > UINT32_MAX) return oom(p);
        ir_ref *q = realloc(p->args, cap * sizeof *q);
        if (!q) return oom(p);
        p->args = q;
        p->args_cap = cap;
      }
      if ((st = use_value(p, &p->args[n]))) return st;
      n++;
      if (!is_punct(p, ',')) break;
      lex(p);
    }
  }
  if (p->t.k == T_BAD && p->t.s[0] == '%')
    return err_at(p->t.line, p->t.col, "expected a value name after '%%'");
  /* "%a %b": a missing comma reads best as the end of the operands */
  if (p->t.k == T_VAL) return expected(p, "':' before the result type");
  int arity = ir_op_arity[op];
  if (op != IR_SCAN && op != IR_SHARD_MAP && (arity < 0 ? n < 1 : n != (uint32_t)arity)) {
    if (arity < 0)
      return err_at(opt.line, opt.col, "'%s' takes at least 1 operand, found 0", ir_op_name[op]);
    return err_at(opt.line, opt.col, "'%s' takes %d operand%s, found %u", ir_op_name[op], arity,
                  arity == 1 ? "" : "s", (unsigned)n);
  }

  const ir_type *operand = n ? &p->f->types[p->f->ins[p->args[0]].ty] : NULL;
  unsigned seen = 0;
  jit_sharding *held = NULL; /* the SHARDING op's, until ir_emit takes its own reference */
  jit_sharding **specs = NULL; /* a SHARD_MAP's, likewise */
  uint32_t n_specs = 0;
  if (op == IR_SHARDING && (st = parse_sharding_attr(p, &a, &held))) return st;
  if (op == IR_SHARD_MAP && (st = parse_smap_attrs(p, n, &a, &specs, &n_specs))) goto done;
  unsigned index_seen = 0;
  while (p->t.k == T_IDENT)
    if ((st = index_op_bit(op) && !is_word(p, "remat")
                  ? parse_index_attr(p, op, operand, &a, &index_seen)
                  : parse_attr(p, op, operand, &a, &seen)))
      goto done;
  const char *lacking = index_op_bit(op) ? missing_index_key(op, index_seen) : NULL;
  if (lacking) {
    st = err_at(p->t.line, p->t.col, "'%s' needs attribute '%s'", ir_op_name[op], lacking);
    goto done;
  }
  if (ir_op_is_collective(op) && (seen & A_DIM)) {
    if (a.axis < 0 || a.axis >= IR_MAX_RANK) {
      st = err_at(p->t.line, p->t.col, "dim %lld is out of range", (long long)a.axis);
      goto done;
    }
    a.coll.dim = (uint8_t)a.axis;
    a.axis = 0;
  }
  unsigned missing = attrs_required(op) & ~seen;
  if (missing && (p->t.k == T_NL || p->t.k == T_EOF || is_punct(p, ':'))) {
    char list[128];
    st = err_at(p->t.line, p->t.col, "'%s' needs attribute%s %s", ir_op_name[op],
                (missing & (missing - 1)) ? "s" : "", attr_list(missing, list, sizeof list));
    goto done;
  }
  ir_ty ty;
  ir_loc loc = {0};
  if ((st = expect_punct(p, ':', "':' before the result type"))) goto done;
  if (ir_op_has_body(op)) {
    if ((st = parse_scan_rest(p, op, n, &a, &ty, &loc))) goto done;
  } else {
    if ((st = parse_type_ty(p, &ty))) goto done;
    if ((st = end_of_line(p, &loc, "end of line after the result type"))) goto done;
  }

  ir_ref r = ir_emit(p->f, op, ty, n, p->args, &a, loc); /* takes its own reference to held */
  if (r == IR_NOREF) {
    st = oom(p);
    goto done;
  }
  char why[512];
  st = ir_verify_ins(p->f, r, why, sizeof why);
  if (st == JIT_ENOMEM) st = oom(p);
  else if (st) st = err_at(name.line, name.col, "%s: %s", ir_op_name[op], why);
  else st = define(p, &name, r);
done:
  sharding_unref(held);
  for (uint32_t i = 0; i < n_specs; i++) sharding_unref(specs[i]);
  free(specs);
  return st;
}

static jit_status parse_params(parser *p) {
  jit_status st;
  if (is_punct(p, ')')) return JIT_OK;
  for (;;) {
    if (p->t.k != T_VAL) return expected(p, "a param ('%name: type') or ')'");
    tok name = p->t;
    if ((st = check_new(p, &name))) return st;
    lex(p);
    if ((st = expect_punct(p, ':', "':' before the param's type"))) return st;
    ir_ty ty;
    if ((st = parse_type_ty(p, &ty))) return st;
    ir_ref r = ir_emit_param(p->f, ty);
    if (r == IR_NOREF) return oom(p);
    if ((st = define(p, &name, r))) return st;
    if (!is_punct(p, ',')) return JIT_OK;
    lex(p);
  }
}

/* The header's result types, kept to check against the return. */
typedef struct results {
  ir_type *t;
  uint32_t n, cap;
} results;

static jit_status add_result(parser *p, results *rs) {
  if (rs->n == rs->cap) {
    uint32_t cap = rs->cap ? rs->cap * 2 : 4;
    ir_type *q = realloc(rs->t, cap * sizeof *q);
    if (!q) return oom(p);
    rs->t = q;
    rs->cap = cap;
  }
  return parse_type(p, &rs->t[rs->n++]);
}

static jit_status parse_results(parser *p, results *rs) {
  jit_status st;
  if (!is_punct(p, '(')) return add_result(p, rs);
  lex(p);
  if (!is_punct(p, ')')) {
    for (;;) {
      if ((st = add_result(p, rs))) return st;
      if (is_punct(p, ')')) break;
      if ((st = expect_punct(p, ',', "',' or ')' in the result types"))) return st;
    }
  }
  lex(p);
  return JIT_OK;
}

static jit_status parse_return(parser *p, const results *rs) {
  jit_status st = JIT_OK;
  tok ret = p->t;
  lex(p);
  ir_ref refs_small[8], *refs = refs_small;
  uint32_t n = 0, cap = 8;
  if (p->t.k == T_VAL) {
    for (;;) {
      if (n == cap) {
        ir_ref *q = malloc((size_t)cap * 2 * sizeof *q);
        if (!q) {
          st = oom(p);
          goto fail;
        }
        memcpy(q, refs, n * sizeof *q);
        if (refs != refs_small) free(refs);
        refs = q;
        cap *= 2;
      }
      tok v = p->t;
      if ((st = use_value(p, &refs[n]))) goto fail;
      if (n < rs->n && !ir_type_equal(ir_type_of(p->f, refs[n]), &rs->t[n])) {
        char got[96], want[96];
        ir_format_type(ir_type_of(p->f, refs[n]), got, sizeof got);
        ir_format_type(&rs->t[n], want, sizeof want);
        st = err_at(v.line, v.col, "result %u has type %s, but the header declares %s", (unsigned)n,
                    got, want);
        goto fail;
      }
      n++;
      if (!is_punct(p, ',')) break;
      lex(p);
    }
  }
  if (n != rs->n) {
    st = err_at(ret.line, ret.col, "return gives %u value%s, but the header declares %u", (unsigned)n,
                n == 1 ? "" : "s", (unsigned)rs->n);
    goto fail;
  }
  if ((st = end_of_line(p, NULL, "end of line after the return values"))) goto fail;
  if (ir_set_results(p->f, n, refs) != JIT_OK) st = oom(p);
fail:
  if (refs != refs_small) free(refs);
  return st;
}

static jit_status parse_func(parser *p) {
  jit_status st;
  results rs = {0};
  bool made = false;
  tok head = p->t;
  lex(p); /* 'func' */
  if (p->t.k != T_GLOBAL) {
    st = expected(p, "a function name ('@name')");
    goto fail;
  }
  char name[256];
  if (p->t.n - 1 >= sizeof name) {
    st = err_at(p->t.line, p->t.col, "function name is too long (at most %zu bytes)", sizeof name - 1);
    goto fail;
  }
  memcpy(name, p->t.s + 1, p->t.n - 1);
  name[p->t.n - 1] = '\0';
  p->f = ir_func_new(name);
  made = true; /* from here p->f is this call's (before, it may be an enclosing scan's) */
  if (!p->f) {
    st = oom(p);
    goto fail;
  }
  map_clear(p);
  lex(p);
  if ((st = expect_punct(p, '(', "'(' after the function name"))) goto fail;
  if ((st = parse_params(p))) goto fail;
  if ((st = expect_punct(p, ')', "',' or ')' after a param"))) goto fail;
  if (p->t.k != T_ARROW) {
    st = expected(p, "'->' before the result types");
    goto fail;
  }
  lex(p);
  if ((st = parse_results(p, &rs))) goto fail;
  if (is_word(p, "mesh") && (st = parse_mesh(p))) goto fail;
  if ((st = expect_punct(p, '{', "'{' after the result types"))) goto fail;
  if ((st = end_of_line(p, NULL, "end of line after '{'"))) goto fail;
  for (;;) {
    skip_newlines(p);
    if (is_word(p, "return")) break;
    if (p->t.k != T_VAL) {
      st = expected(p, "an instruction ('%name = op ...') or 'return'");
      goto fail;
    }
    if ((st = parse_ins(p))) goto fail;
  }
  if ((st = parse_return(p, &rs))) goto fail;
  skip_newlines(p);
  if ((st = expect_punct(p, '}', "'}' after 'return'"))) goto fail;
  if ((st = end_of_line(p, NULL, "end of line after '}'"))) goto fail;
  if ((st = ir_verify(p->f, "parse")) != JIT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", jit_last_error());
    st = jit_error(st == JIT_ENOMEM ? st : JIT_EINVAL, "%d:%d: %s", head.line, head.col, msg);
    goto fail;
  }
  free(rs.t);
  return JIT_OK;
fail:
  free(rs.t);
  if (made) {
    ir_func_free(p->f);
    p->f = NULL;
  }
  return st;
}

jit_status ir_parse(const char *text, size_t len, ir_func ***out_funcs, uint32_t *out_n) {
  *out_funcs = NULL;
  *out_n = 0;
  parser p;
  memset(&p, 0, sizeof p);
  p.pos = text ? text : "";
  p.end = p.pos + (text ? len : 0);
  p.line = p.col = 1;
  ir_func **funcs = NULL;
  uint32_t n = 0, cap = 0;
  jit_status st = JIT_OK;
  lex(&p);
  for (;;) {
    skip_newlines(&p);
    if (p.t.k == T_EOF) break;
    if (!is_word(&p, "func")) {
      st = expected(&p, "'func'");
      goto fail;
    }
    if (n == cap) {
      uint32_t c = cap ? cap * 2 : 4;
      ir_func **q = c < cap ? NULL : realloc(funcs, (size_t)c * sizeof *q);
      if (!q) {
        st = oom(&p);
        goto fail;
      }
      funcs = q;
      cap = c;
    }
    if ((st = parse_func(&p))) goto fail;
    funcs[n++] = p.f;
    p.f = NULL;
  }
  free(p.map);
  free(p.args);
  *out_funcs = funcs;
  *out_n = n;
  return JIT_OK;
fail:
  for (uint32_t i = 0; i < n; i++) ir_func_free(funcs[i]);
  free(funcs);
  free(p.map);
  free(p.args);
  return st;
}
