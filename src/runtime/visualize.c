/* visualize.c: jit_array_visualize, the boxes jax.debug.visualize_array_sharding draws: JAX's cell
 * geometry (jax/_src/debugging.py) laid out as rich's Table does it (box.SQUARE, show_lines). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/runtime.h"
#include "runtime/sharding.h"

/* The constants of JAX's visualize_sharding defaults: scale 1, min_width 9, max_width 80 (also
   the width of the rich Console it prints to). */
enum { BASE_HEIGHT = 10, MIN_WIDTH = 9, MAX_WIDTH = 80 };
#define HEIGHT_TO_WIDTH 2.5

typedef struct cell {
  char *label;        /* "CPU 0,1" (malloc'd) */
  int len;            /* strlen(label) */
  int64_t l, r, t, b; /* JAX's paddings, clamped at 0 */
} cell;

/* Python's divmod(n, 2) quotient and remainder (floor division, remainder 0 or 1). */
static int64_t floor_half(int64_t n) { return n >= 0 ? n / 2 : -((-n + 1) / 2); }

/* Rich's Padding measured inside a column of max_width mw (rich's Measurement rules). */
static int64_t cell_measure(const cell *c, int64_t mw) {
  int64_t extra = c->l + c->r;
  if (mw < 1) return 0;
  if (mw - extra < 1) return mw;
  int64_t text = c->len < mw ? c->len : mw;
  return text + extra < mw ? text + extra : mw;
}

static int64_t column_measure(const cell *cells, int rows, int cols, int j, int64_t mw) {
  if (mw < 1) return 0;
  int64_t best = 0;
  for (int i = 0; i < rows; i++) {
    int64_t m = cell_measure(&cells[i * cols + j], mw);
    if (m > best) best = m;
  }
  return best < mw ? best : mw;
}

/* rich._ratio.ratio_reduce, with Python's round-half-even. */
static void ratio_reduce(int64_t total, const int64_t *ratios_in, const int64_t *maximums,
                         int64_t *values, int n) {
  int64_t total_ratio = 0;
  for (int i = 0; i < n; i++) total_ratio += maximums[i] ? ratios_in[i] : 0;
  if (!total_ratio) return;
  int64_t remaining = total;
  for (int i = 0; i < n; i++) {
    int64_t ratio = maximums[i] ? ratios_in[i] : 0;
    if (ratio && total_ratio > 0) {
      int64_t d = (int64_t)nearbyint((double)(ratio * remaining) / (double)total_ratio);
      if (d > maximums[i]) d = maximums[i];
      values[i] -= d;
      remaining -= d;
      total_ratio -= ratio;
    }
  }
}

/* rich.table.Table._collapse_widths with every column wrapable, then the even last resort. */
static void collapse_widths(int64_t *w, int n, int64_t max_width, int64_t *ratios,
                            int64_t *maxes) {
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += w[i];
  int64_t excess = total - max_width;
  while (total && excess > 0) {
    int64_t max_col = 0, second = 0;
    for (int i = 0; i < n; i++) max_col = w[i] > max_col ? w[i] : max_col;
    for (int i = 0; i < n; i++) second = w[i] != max_col && w[i] > second ? w[i] : second;
    int64_t diff = max_col - second;
    bool any = false;
    for (int i = 0; i < n; i++) any |= (ratios[i] = w[i] == max_col) != 0;
    if (!any || !diff) break;
    for (int i = 0; i < n; i++) maxes[i] = excess < diff ? excess : diff;
    ratio_reduce(excess, ratios, maxes, w, n);
    total = 0;
    for (int i = 0; i < n; i++) total += w[i];
    excess = total - max_width;
  }
  if (total > max_width) {
    for (int i = 0; i < n; i++) ratios[i] = 1, maxes[i] = w[i];
    ratio_reduce(total - max_width, ratios, maxes, w, n);
  }
}

/* A growable output line: the table is built as lines so rich's final crop to the console width
   can be applied (counting characters, as every box character is one cell wide). */
typedef struct line_buf {
  char *s;
  size_t len, cap;
  int64_t cells;
} line_buf;

static bool lb_put(line_buf *lb, const char *s, size_t n) {
  if (lb->len + n + 1 > lb->cap) {
    size_t cap = lb->cap ? lb->cap : 256;
    while (cap < lb->len + n + 1) cap *= 2;
    char *g = realloc(lb->s, cap);
    if (!g) return false;
    lb->s = g;
    lb->cap = cap;
  }
  memcpy(lb->s + lb->len, s, n);
  lb->len += n;
  lb->s[lb->len] = '\0';
  return true;
}

/* Appends count copies of one character (ASCII or a 3-byte box character), cropped at the
   console width. */
static bool lb_rep(line_buf *lb, const char *ch, int64_t count) {
  size_t n = strlen(ch);
  for (int64_t i = 0; i < count && lb->cells < MAX_WIDTH; i++, lb->cells++)
    if (!lb_put(lb, ch, n)) return false;
  return true;
}

static bool lb_text(line_buf *lb, const char *s, int64_t n) {
  for (int64_t i = 0; i < n && lb->cells < MAX_WIDTH; i++, lb->cells++)
    if (!lb_put(lb, s + i, 1)) return false;
  return true;
}

/* One line of a label wrapped by rich's Text at width w (overflow "ellipsis", as Table columns
   have, so words are never folded): start and length in the label, and whether an ellipsis
   replaces the last character. */
typedef struct text_line {
  int start, len;
  bool ellipsis;
} text_line;

/* A label "CPU ids" that fits is one line; otherwise rich breaks it after "CPU " and each line
   loses trailing blanks beyond w, then is cut to w-1 characters plus an ellipsis if still longer.
   Returns the number of lines (1 or 2). */
static int wrap_label(const cell *c, int64_t w, text_line *lines) {
  if (c->len <= w) {
    lines[0] = (text_line){0, c->len, false};
    return 1;
  }
  lines[0] = (text_line){0, 4, false};
  lines[1] = (text_line){4, c->len - 4, false};
  for (int k = 0; k < 2; k++) {
    text_line *t = &lines[k];
    if (t->len > w && c->label[t->start + t->len - 1] == ' ') t->len--;
    if (t->len > w) {
      t->len = (int)w - 1;
      t->ellipsis = true;
    }
  }
  return 2;
}

/* The width rich renders a label at inside the cell: the Padding's inner width, or the label's
   own width if smaller; 0 when nothing fits (rich then draws no text at all). */
static int64_t text_width(const cell *c, int64_t w) {
  int64_t iw = w - c->l - c->r;
  if (w < 1 || iw < 1) return 0;
  return c->len < iw ? c->len : iw;
}

/* Line k of one cell rendered at column width w: rich's Padding (expanding to w) around an
   Align(center) of the wrapped label; lines past the cell's own height are blank. */
static bool draw_cell_line(line_buf *lb, const cell *c, int64_t w, int64_t k) {
  if (w < 1) return true;
  text_line lines[2];
  int64_t tw = text_width(c, w), n = tw ? wrap_label(c, tw, lines) : 0;
  if (k < c->t || k >= c->t + n) return lb_rep(lb, " ", w);
  const text_line *t = &lines[k - c->t];
  int64_t excess = w - c->l - c->r - tw, left = excess / 2;
  int64_t used = t->len + (t->ellipsis ? 1 : 0);
  return lb_rep(lb, " ", c->l + left) && lb_text(lb, c->label + t->start, t->len) &&
         (!t->ellipsis || lb_rep(lb, "\xe2\x80\xa6", 1)) &&
         lb_rep(lb, " ", tw - used + (excess - left) + c->r);
}

static int64_t cell_height(const cell *c, int64_t w) {
  if (w < 1) return 0;
  text_line lines[2];
  int64_t tw = text_width(c, w);
  return c->t + (tw ? wrap_label(c, tw, lines) : 0) + c->b;
}

/* One border line: left, then w[j] horizontals per column joined by mid, then right. */
static bool border(line_buf *lb, const int64_t *w, int cols, const char *left, const char *mid,
                   const char *right, FILE *out) {
  lb->len = 0;
  lb->cells = 0;
  if (!lb_rep(lb, left, 1)) return false;
  for (int j = 0; j < cols; j++)
    if (!lb_rep(lb, "\xe2\x94\x80", w[j]) || !lb_rep(lb, j + 1 < cols ? mid : right, 1))
      return false;
  fprintf(out, "%s\n", lb->s);
  return true;
}

/* Fills cells[rows*cols] (labels and JAX's paddings) from the array's placement. */
static jit_status make_cells(const jit_array *a, int *rows_out, int *cols_out, cell **out) {
  const jit_sharding *s = a->sharding;
  int n = s ? s->mesh->n_devices : 1;
  int64_t shape0 = a->shape[0], shape1 = a->rank == 2 ? a->shape[1] : 1;
  /* Grid position of each device's chunk: its part index along each dim (JAX's chunk index). */
  int *ri = malloc(3 * (size_t)n * sizeof *ri);
  if (!ri) return jit_error(JIT_ENOMEM, "jit_array_visualize: out of memory");
  int *ci = ri + n, *order = ri + 2 * n;
  double *hfrac = NULL, *wfrac = NULL;
  cell *cells = NULL;
  jit_status st = JIT_OK;
  int rows = 1, cols = 1;
  hfrac = malloc(2 * (size_t)n * sizeof *hfrac);
  if (!hfrac) TRY(jit_error(JIT_ENOMEM, "jit_array_visualize: out of memory"));
  wfrac = hfrac + n;
  for (int p = 0; p < n; p++) {
    int64_t start[JIT_MAX_RANK] = {0}, size[JIT_MAX_RANK] = {shape0, shape1};
    if (s) sharding_shard_box(s, a->shape, p, start, size);
    int64_t i0 = s ? sharding_shard_index(s, p, 0) : 0;
    int64_t i1 = s && a->rank == 2 ? sharding_shard_index(s, p, 1) : 0;
    /* 1-D arrays are one row of columns. */
    ri[p] = a->rank == 2 ? (int)i0 : 0;
    ci[p] = a->rank == 2 ? (int)i1 : (int)i0;
    hfrac[p] = (double)size[0] / (double)shape0;
    wfrac[p] = a->rank == 2 ? (double)size[1] / (double)shape1 : (double)size[0] / (double)shape0;
    if (ri[p] + 1 > rows) rows = ri[p] + 1;
    if (ci[p] + 1 > cols) cols = ci[p] + 1;
  }
  cells = calloc((size_t)rows * (size_t)cols, sizeof *cells);
  if (!cells) TRY(jit_error(JIT_ENOMEM, "jit_array_visualize: out of memory"));
  /* Python: aspect_ratio = shape[1] / shape[0]; base_width = int(base_height * aspect_ratio). */
  double aspect = (double)shape1 / (double)shape0;
  double base_width = trunc(BASE_HEIGHT * aspect); /* kept as a double: it may exceed int64 */
  for (int i = 0; i < rows; i++) {
    for (int j = 0; j < cols; j++) {
      cell *c = &cells[i * cols + j];
      /* The devices holding this chunk, ascending (mesh order is any order). */
      int m = 0, first = -1;
      for (int p = 0; p < n; p++) {
        if (ri[p] != i || ci[p] != j) continue;
        int id = s ? s->mesh->device_ids[p] : 0, k = m++;
        while (k > 0 && order[k - 1] > id) order[k] = order[k - 1], k--;
        order[k] = id;
        if (first < 0) first = p;
      }
      if (first < 0)
        TRY(jit_error(JIT_EINTERNAL, "jit_array_visualize: no device holds chunk (%d, %d)", i, j));
      size_t cap = 4 + (size_t)m * 12 + 1;
      c->label = malloc(cap);
      if (!c->label) TRY(jit_error(JIT_ENOMEM, "jit_array_visualize: out of memory"));
      int len = snprintf(c->label, cap, "CPU ");
      for (int k = 0; k < m; k++)
        len += snprintf(c->label + len, cap - (size_t)len, "%s%d", k ? "," : "", order[k]);
      c->len = len;
      /* int(...) then min(max(width, min_width), max_width), clamped before converting. */
      double wd = wfrac[first] * base_width * HEIGHT_TO_WIDTH;
      int64_t width = wd < MIN_WIDTH ? MIN_WIDTH : wd >= MAX_WIDTH ? MAX_WIDTH : (int64_t)wd;
      int64_t height = a->rank == 2 ? (int64_t)(hfrac[first] * BASE_HEIGHT) : 1;
      int64_t l = floor_half(width - len - 2), r = l + ((width - len - 2) - 2 * l);
      int64_t t = floor_half(height - 2), b = t + ((height - 2) - 2 * t);
      c->l = l > 0 ? l : 0;
      c->r = r > 0 ? r : 0;
      c->t = t > 0 ? t : 0;
      c->b = b > 0 ? b : 0;
    }
  }
  *rows_out = rows;
  *cols_out = cols;
  *out = cells;
  cells = NULL;
fail:
  if (cells)
    for (int i = 0; i < rows * cols; i++) free(cells[i].label);
  free(cells);
  free(hfrac);
  free(ri);
  return st;
}

jit_status jit_array_visualize(const jit_array *a, FILE *out) {
  static const char who[] = "jit_array_visualize";
  jit_status st = JIT_OK;
  if (!a) return jit_error(JIT_EINVAL, "%s: array is NULL", who);
  if (!out) return jit_error(JIT_EINVAL, "%s: out is NULL", who);
  if ((st = array_check_live(a, who)) != JIT_OK) return st;
  ir_type t;
  char ty[160];
  array_type(a, &t);
  ir_format_type(&t, ty, sizeof ty);
  if (a->rank < 1 || a->rank > 2)
    return jit_error(JIT_EUNSUPPORTED,
                     "%s: only 1-D and 2-D arrays can be visualized (as in "
                     "jax.debug.visualize_array_sharding); got %s",
                     who, ty);
  if (a->shape[0] == 0 || (a->rank == 2 && a->shape[1] == 0))
    return jit_error(JIT_EUNSUPPORTED, "%s: cannot visualize the empty array %s", who, ty);

  cell *cells = NULL;
  int64_t *w = NULL;
  line_buf lb = {0};
  int rows = 0, cols = 0;
  TRY(make_cells(a, &rows, &cols, &cells));
  w = malloc(3 * (size_t)cols * sizeof *w);
  if (!w) TRY(jit_error(JIT_ENOMEM, "%s: out of memory", who));
  /* rich's Table._calculate_column_widths: natural widths, collapsed when the table (borders
     included) would be wider than the console. */
  int64_t mw = MAX_WIDTH - (cols + 1), total = 0;
  for (int j = 0; j < cols; j++) {
    w[j] = column_measure(cells, rows, cols, j, mw);
    if (w[j] == 0) w[j] = 1;
    total += w[j];
  }
  if (total > mw) {
    collapse_widths(w, cols, mw, w + cols, w + 2 * cols);
    for (int j = 0; j < cols; j++) w[j] = column_measure(cells, rows, cols, j, w[j]);
  }

  bool ok = border(&lb, w, cols, "\xe2\x94\x8c", "\xe2\x94\xac", "\xe2\x94\x90", out);
  for (int i = 0; ok && i < rows; i++) {
    int64_t height = 1;
    for (int j = 0; j < cols; j++) {
      int64_t h = cell_height(&cells[i * cols + j], w[j]);
      height = h > height ? h : height;
    }
    for (int64_t k = 0; ok && k < height; k++) {
      lb.len = 0;
      lb.cells = 0;
      ok = lb_rep(&lb, "\xe2\x94\x82", 1);
      for (int j = 0; ok && j < cols; j++)
        ok = draw_cell_line(&lb, &cells[i * cols + j], w[j], k) &&
             lb_rep(&lb, "\xe2\x94\x82", 1);
      if (ok) fprintf(out, "%s\n", lb.s);
    }
    if (ok && i + 1 < rows)
      ok = border(&lb, w, cols, "\xe2\x94\x9c", "\xe2\x94\xbc", "\xe2\x94\xa4", out);
  }
  if (ok) ok = border(&lb, w, cols, "\xe2\x94\x94", "\xe2\x94\xb4", "\xe2\x94\x98", out);
  if (!ok) TRY(jit_error(JIT_ENOMEM, "%s: out of memory", who));
  if (ferror(out)) TRY(jit_error(JIT_EIO, "%s: writing the output failed", who));
fail:
  if (cells)
    for (int i = 0; i < rows * cols; i++) free(cells[i].label);
  free(cells);
  free(w);
  free(lb.s);
  return st;
}
