/* test_conv.c: jit_conv (lax.conv_general_dilated) against a direct float64 loop written here
 * from the specs' letters: dimension-number permutations, 1-3 spatial dims, odd sizes, strides,
 * padding (negative too), lhs and rhs dilation together, feature groups and depthwise; compiled
 * and interpreted, f32 and f64; VJPs of both operands by finite differences; vmap of either or
 * both operands against a loop over examples; errors naming the user's line. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "support/gradcheck.h"
#include "support/optest.h"
#include "tjit.h"

#define THIS_FILE "tests/test_conv.c"

typedef struct convcase {
  const char *lspec, *rspec, *ospec;
  int64_t lshape[5], rshape[5]; /* in the specs' layouts */
  int64_t stride[3], lo[3], hi[3], ldil[3], rdil[3];
  int64_t groups;
  jit_dtype dt;
} convcase;

static int rank_of(const convcase *c) { return (int)strlen(c->lspec); }

static int pos(const char *spec, char ch) { return (int)(strchr(spec, ch) - spec); }

/* The spatial letters in the rhs spec's order (JAX's order of strides and pads). */
static int spatial_letters(const convcase *c, char *sp) {
  int n = 0;
  for (const char *p = c->rspec; *p; p++)
    if (*p != 'O' && *p != 'I') sp[n++] = *p;
  return n;
}

static int64_t dilated(int64_t n, int64_t d) { return n ? 1 + d * (n - 1) : 0; }

/* The output's extent along spatial dim i (in the rhs spec's order of spatial letters), for an
   input of extent in and a window of k. */
static int64_t out_extent(const convcase *c, int i, int64_t in, int64_t k) {
  int64_t padded = dilated(in, c->ldil[i]) + c->lo[i] + c->hi[i], win = dilated(k, c->rdil[i]);
  return padded < win ? 0 : (padded - win) / c->stride[i] + 1;
}

/* The direct loop: out[n, o, s] = sum over in features of o's group and window positions. */
static ot_array reference(const convcase *c, const ot_array *x, const ot_array *w) {
  int rank = rank_of(c);
  char sp[3];
  int ns = spatial_letters(c, sp);
  int64_t N = x->shape[pos(c->lspec, 'N')], O = w->shape[pos(c->rspec, 'O')];
  int64_t I = w->shape[pos(c->rspec, 'I')], og = O / c->groups;
  int64_t in[3], k[3], out[3];
  int64_t oshape[5];
  oshape[pos(c->ospec, 'N')] = N;
  oshape[pos(c->ospec, 'C')] = O;
  for (int i = 0; i < ns; i++) {
    in[i] = x->shape[pos(c->lspec, sp[i])];
    k[i] = w->shape[pos(c->rspec, sp[i])];
    out[i] = out_extent(c, i, in[i], k[i]);
    oshape[pos(c->ospec, sp[i])] = out[i];
  }
  ot_array r = ot_zeros(c->dt, rank, oshape);
  int64_t oi[5], li[5], wi[5];
  for (int64_t q = 0; q < r.n; q++) {
    ot_unravel(q, rank, oshape, oi);
    int64_t n = oi[pos(c->ospec, 'N')], o = oi[pos(c->ospec, 'C')];
    double acc = 0;
    int64_t nk = 1;
    for (int i = 0; i < ns; i++) nk *= k[i];
    for (int64_t kq = 0; kq < nk; kq++) {
      int64_t rem = kq, kk[3];
      for (int i = ns - 1; i >= 0; i--) {
        kk[i] = rem % k[i];
        rem /= k[i];
      }
      bool inside = true;
      for (int i = 0; i < ns; i++) {
        int64_t p = oi[pos(c->ospec, sp[i])] * c->stride[i] + kk[i] * c->rdil[i] - c->lo[i];
        if (p < 0 || p % c->ldil[i] || p / c->ldil[i] >= in[i]) inside = false;
        else li[pos(c->lspec, sp[i])] = p / c->ldil[i];
        wi[pos(c->rspec, sp[i])] = kk[i];
      }
      if (!inside) continue;
      for (int64_t f = 0; f < I; f++) {
        li[pos(c->lspec, 'N')] = n;
        li[pos(c->lspec, 'C')] = (o / og) * I + f;
        wi[pos(c->rspec, 'O')] = o;
        wi[pos(c->rspec, 'I')] = f;
        acc += x->v[ot_ravel(rank, x->shape, li)] * w->v[ot_ravel(rank, w->shape, wi)];
      }
    }
    r.v[q] = acc;
  }
  return r;
}

static jit_val apply(jit_trace *t, const convcase *c, jit_val x, jit_val w) {
  return jit_conv(t, x, w, c->stride, c->lo, c->hi, c->ldil, c->rdil, c->lspec, c->rspec, c->ospec,
                  c->groups);
}

static void trace_conv(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  res[0] = apply(t, user, args[0], args[1]);
}

static ot_array operand(const convcase *c, int side, uint64_t seed) {
  return ot_random(c->dt, rank_of(c), side ? c->rshape : c->lshape, seed, -1, 1);
}

/* Compiled and interpreted against the loop. */
static void check_case(const convcase *c, const char *what) {
  ot_array in[2] = {operand(c, 0, 1), operand(c, 1, 2)}, got[2];
  ot_array want = reference(c, &in[0], &in[1]);
  ot_run_both(what, trace_conv, (void *)c, 2, in, 1, got);
  ot_tol tol = c->dt == JIT_F64 ? (ot_tol){1e-12, 1e-12} : (ot_tol){2e-5, 2e-5};
  bool ok = ot_close(what, &got[0], &want, NULL, tol) && ot_close(what, &got[1], &want, NULL, tol);
  if (!ok) print_error("case %s: %s %s %s\n", what, c->lspec, c->rspec, c->ospec);
  for (int i = 0; i < 2; i++) {
    ot_free(&got[i]);
    ot_free(&in[i]);
  }
  ot_free(&want);
  assert_true(ok);
}

#define ONES {1, 1, 1}
static const convcase cases[] = {
    /* the permutations of 2-D dimension numbers, odd sizes, SAME-like padding */
    {"NCHW", "OIHW", "NCHW", {2, 3, 5, 7}, {4, 3, 3, 3}, ONES, {1, 1}, {1, 1}, ONES, ONES, 1, JIT_F32},
    {"NHWC", "HWIO", "NHWC", {2, 5, 7, 3}, {3, 3, 3, 4}, ONES, {1, 1}, {1, 1}, ONES, ONES, 1, JIT_F32},
    {"NHWC", "OIHW", "NCHW", {2, 5, 7, 3}, {4, 3, 2, 3}, ONES, {0, 2}, {1, 0}, ONES, ONES, 1, JIT_F32},
    {"CHWN", "IOWH", "HNCW", {3, 6, 5, 2}, {3, 4, 2, 3}, {2, 1}, {1, 0}, {0, 1}, ONES, ONES, 1, JIT_F32},
    {"NWHC", "WHIO", "CNWH", {1, 4, 6, 2}, {3, 2, 2, 5}, ONES, ONES, ONES, ONES, ONES, 1, JIT_F64},
    /* 1x1 and an unpadded NHWC x HWIO (the direct GEMM shapes) */
    {"NHWC", "HWIO", "NHWC", {3, 4, 5, 6}, {1, 1, 6, 7}, ONES, {0, 0}, {0, 0}, ONES, ONES, 1, JIT_F32},
    {"NHWC", "HWIO", "NHWC", {2, 9, 8, 5}, {3, 2, 5, 3}, ONES, {0, 0}, {0, 0}, ONES, ONES, 1, JIT_F64},
    /* strides + padding + lhs and rhs dilation together */
    {"NHWC", "HWIO", "NHWC", {2, 7, 6, 3}, {3, 2, 3, 2}, {2, 3}, {2, 1}, {1, 3}, {2, 1}, {1, 2}, 1, JIT_F32},
    {"NCHW", "OIHW", "NCHW", {1, 2, 5, 5}, {3, 2, 2, 3}, {3, 2}, {0, 2}, {2, 0}, {2, 3}, {2, 2}, 1, JIT_F64},
    /* negative padding crops */
    {"NCHW", "OIHW", "NCHW", {2, 2, 8, 6}, {2, 2, 2, 2}, ONES, {-1, 1}, {-2, 0}, ONES, ONES, 1, JIT_F32},
    /* feature groups, depthwise (I = 1, O = C * 2) */
    {"NHWC", "HWIO", "NHWC", {2, 5, 5, 6}, {3, 3, 2, 9}, {1, 2}, {1, 1}, {1, 1}, ONES, ONES, 3, JIT_F32},
    {"NHWC", "HWIO", "NHWC", {2, 6, 5, 4}, {3, 3, 1, 8}, ONES, {1, 1}, {1, 1}, ONES, ONES, 4, JIT_F32},
    {"NCHW", "OIHW", "NCHW", {1, 4, 5, 4}, {6, 2, 2, 2}, ONES, {1, 0}, {0, 1}, ONES, {2, 1}, 2, JIT_F64},
    /* groups with strides, padding and both dilations together; depthwise with multiplier 1 on
       odd sizes; odd group widths in other layouts; 1-D groups */
    {"NHWC", "HWIO", "NHWC", {3, 9, 7, 10}, {3, 2, 2, 15}, {2, 3}, {2, 1}, {1, 2}, {2, 1}, {1, 2}, 5, JIT_F32},
    {"NHWC", "HWIO", "NHWC", {2, 7, 9, 13}, {3, 3, 1, 13}, {2, 1}, {1, 1}, {1, 1}, ONES, {2, 2}, 13, JIT_F32},
    {"NCHW", "OIHW", "NHWC", {2, 6, 5, 7}, {9, 2, 3, 2}, {1, 2}, {1, 0}, {2, 1}, ONES, ONES, 3, JIT_F64},
    {"CHWN", "IOWH", "HNCW", {6, 5, 4, 3}, {1, 12, 2, 3}, ONES, {0, 1}, {1, 0}, {1, 2}, ONES, 6, JIT_F32},
    {"NWC", "WIO", "NWC", {2, 13, 9}, {3, 3, 6}, {2}, {1}, {1}, ONES, {2}, 3, JIT_F32},
    /* depthwise with cropping, lhs dilation and strides; one of a window too big to expand
       into slices (the batched GEMM runs it) */
    {"NHWC", "HWIO", "NHWC", {2, 6, 7, 5}, {2, 3, 1, 5}, {1, 2}, {-1, 2}, {1, 0}, {2, 1}, {1, 2}, 5, JIT_F64},
    {"NWC", "WIO", "NWC", {2, 80, 4}, {55, 1, 8}, {2}, {3}, {0}, ONES, ONES, 4, JIT_F32},
    /* 1-D and 3-D */
    {"NWC", "WIO", "NWC", {2, 11, 3}, {4, 3, 5}, {3}, {2}, {1}, ONES, ONES, 1, JIT_F32},
    {"NCW", "OIW", "NWC", {3, 2, 9}, {4, 2, 3}, {2}, {0}, {0}, {2}, {2}, 1, JIT_F64},
    {"NCDHW", "OIDHW", "NCDHW", {1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {1, 2, 1}, {1, 0, 1}, {0, 1, 1}, ONES, ONES, 1, JIT_F32},
    {"NDHWC", "DHWIO", "NDHWC", {2, 3, 4, 5, 4}, {2, 2, 2, 2, 4}, ONES, {1, 1, 1}, {1, 1, 1}, ONES, {1, 2, 1}, 2, JIT_F32},
    /* grouped 3-D: strides, asymmetric pads, rhs dilation; other layouts with lhs dilation and
       crops; depthwise */
    {"NDHWC", "DHWIO", "NDHWC", {2, 4, 5, 3, 6}, {2, 3, 2, 3, 4}, {1, 2, 1}, {1, 1, 0}, {0, 1, 1}, ONES, {1, 1, 2}, 2, JIT_F32},
    {"NCDHW", "OIDHW", "NCDHW", {1, 4, 3, 4, 5}, {6, 2, 2, 2, 2}, {2, 1, 1}, {1, 0, -1}, {0, 1, 0}, {1, 2, 1}, ONES, 2, JIT_F64},
    {"NDHWC", "DHWIO", "NDHWC", {1, 3, 4, 5, 3}, {2, 2, 2, 1, 6}, ONES, {1, 1, 1}, {1, 1, 1}, ONES, ONES, 3, JIT_F32},
    /* padding alone: only at the end with strides and rhs dilation; pads wider than the window
       (outputs whose window lies wholly in the padding); pads and crops mixed */
    {"NWC", "WIO", "NWC", {2, 10, 5}, {3, 5, 4}, {2}, {0}, {3}, ONES, {3}, 1, JIT_F32},
    {"NHWC", "HWIO", "NHWC", {1, 3, 4, 2}, {2, 2, 2, 3}, ONES, {3, 0}, {2, 4}, ONES, ONES, 1, JIT_F32},
    {"NHWC", "HWIO", "NHWC", {2, 6, 7, 4}, {3, 3, 4, 3}, {1, 2}, {-1, 2}, {2, -1}, ONES, {2, 1}, 1, JIT_F32},
    /* a single input feature (a first layer on grey images: depthwise with one group), padded;
       strided with crops and rhs dilation in another layout */
    {"NHWC", "HWIO", "NHWC", {2, 6, 5, 1}, {3, 3, 1, 8}, ONES, {1, 1}, {1, 1}, ONES, ONES, 1, JIT_F32},
    {"NCHW", "OIHW", "NCHW", {2, 1, 7, 6}, {5, 1, 2, 3}, {2, 1}, {1, -1}, {0, 1}, ONES, {1, 2}, 1, JIT_F64},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

static void test_against_loop(void **state) {
  (void)state;
  for (int i = 0; i < N_CASES; i++) {
    char what[32];
    snprintf(what, sizeof what, "conv case %d", i);
    check_case(&cases[i], what);
  }
}

/* W11-like layers at sizes that take the native GEMM path with several row and K blocks. */
static const struct {
  const char *what;
  convcase c;
} larger[] = {
    {"larger NHWC", {"NHWC", "HWIO", "NHWC", {2, 19, 17, 24}, {3, 3, 24, 40}, ONES, {1, 1}, {1, 1}, ONES, ONES, 1, JIT_F32}},
    {"larger strided", {"NHWC", "HWIO", "NHWC", {2, 19, 17, 24}, {3, 3, 24, 40}, {2, 2}, {1, 1}, {1, 1}, ONES, ONES, 1, JIT_F32}},
    /* K = 3 * 3 * 300 spans several of the GEMM's K blocks, each starting at a window row */
    {"deep K", {"NHWC", "HWIO", "NHWC", {1, 5, 6, 300}, {3, 3, 300, 5}, ONES, {1, 0}, {1, 0}, ONES, ONES, 1, JIT_F32}},
    {"deep K f64", {"NHWC", "HWIO", "NHWC", {1, 5, 6, 300}, {3, 3, 300, 5}, ONES, {1, 0}, {1, 0}, ONES, ONES, 1, JIT_F64}},
    /* a strided 1x1: one contiguous K run, rows that do not merge */
    {"strided 1x1", {"NHWC", "HWIO", "NHWC", {2, 9, 7, 40}, {1, 1, 40, 24}, {2, 3}, {0, 0}, {0, 0}, ONES, ONES, 1, JIT_F32}},
    /* grouped and depthwise at sizes that split over threads and several row and K blocks */
    {"larger grouped", {"NHWC", "HWIO", "NHWC", {2, 19, 17, 24}, {3, 3, 6, 40}, ONES, {1, 1}, {1, 1}, ONES, ONES, 4, JIT_F32}},
    {"larger single feature", {"NHWC", "HWIO", "NHWC", {3, 23, 21, 1}, {3, 3, 1, 24}, ONES, {1, 1}, {1, 1}, ONES, ONES, 1, JIT_F32}},
    {"larger depthwise", {"NHWC", "HWIO", "NHWC", {2, 21, 19, 64}, {3, 3, 1, 64}, {2, 2}, {1, 1}, {1, 1}, ONES, ONES, 64, JIT_F32}},
    {"grouped deep K", {"NHWC", "HWIO", "NHWC", {1, 5, 6, 600}, {3, 3, 300, 6}, ONES, {1, 0}, {1, 0}, ONES, ONES, 2, JIT_F32}},
    /* padding read as zeros where the features are not contiguous (element by element), and
       where one position's features are longer than a K block */
    {"larger NCHW padded", {"NCHW", "OIHW", "NCHW", {2, 24, 19, 17}, {40, 24, 3, 3}, {1, 2}, {2, 1}, {0, 1}, ONES, ONES, 1, JIT_F32}},
    {"padded long features", {"NWC", "WIO", "NWC", {1, 6, 2500}, {3, 2500, 3}, ONES, {1}, {1}, ONES, ONES, 1, JIT_F32}},
    /* grouped 3-D over several row blocks */
    {"larger grouped 3-D", {"NDHWC", "DHWIO", "NDHWC", {2, 6, 9, 8, 12}, {3, 3, 3, 4, 18}, ONES, {1, 1, 1}, {1, 1, 1}, ONES, ONES, 3, JIT_F32}},
};

static void test_larger(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof larger / sizeof larger[0]; i++) check_case(&larger[i].c, larger[i].what);
}

/* ---- VJPs by finite differences ------------------------------------------------------------- */

static void loss_fn(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  jit_val y = apply(t, user, args[0], args[1]);
  int axes[JIT_MAX_RANK], rank = jit_val_rank(t, y);
  for (int i = 0; i < rank; i++) axes[i] = i;
  res[0] = jit_reduce_sum(t, jit_sin(t, y), rank, axes);
}

static void test_grads(void **state) {
  (void)state;
  for (int i = 0; i < N_CASES; i++) {
    convcase c = cases[i];
    c.dt = JIT_F64;
    ot_array in[2] = {operand(&c, 0, 3), operand(&c, 1, 4)};
    ot_loss_fn l = {loss_fn, &c, 2};
    char what[32];
    snprintf(what, sizeof what, "conv grad case %d", i);
    ot_check_grad(what, &l, in);
    ot_free(&in[0]);
    ot_free(&in[1]);
  }
}

/* The convs with batch groups in IR text. */
static int batch_grouped_convs(const char *text) {
  int n = 0;
  for (const char *q = text; (q = strstr(q, " = conv ")) != NULL; q++) {
    const char *bg = strstr(q, "batch_groups="), *eol = strchr(q, '\n');
    n += bg && (!eol || bg < eol) && strncmp(bg, "batch_groups=1 ", 15) != 0;
  }
  return n;
}

static void grads_fn(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  jit_value_and_grad(t, loss_fn, user, 2, args, 3, 0, res);
}

/* c compiled (its value, or with grad its value and both VJPs) and called once: the kernels' C
   dump (which names the matmul kernels and what runs in the interpreter) and the optimized IR. */
static void compiled_dumps(const convcase *c, bool grad, char **kernels, char **optimized) {
  jit_ctx *ctx = ot_ctx();
  ot_array in[2] = {operand(c, 0, 5), operand(c, 1, 6)};
  jit_array *args[2] = {ot_upload_to(ctx, &in[0]), ot_upload_to(ctx, &in[1])}, *res[3] = {0};
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "native", .n_args = 2, .n_results = grad ? 3 : 1};
  assert_int_equal(jit_compile(ctx, grad ? grads_fn : trace_conv, (void *)c, &o, &f), JIT_OK);
  assert_int_equal(jit_call(f, args, res), JIT_OK);
  *kernels = ot_fn_dump(f, args, JIT_DUMP_C);
  *optimized = ot_fn_dump(f, args, JIT_DUMP_OPTIMIZED);
  for (int r = 0; r < 3; r++) jit_array_free(res[r]);
  for (int a = 0; a < 2; a++) {
    jit_array_free(args[a]);
    ot_free(&in[a]);
  }
  jit_fn_free(f);
}

static int64_t window_of(const convcase *c) {
  int64_t window = 1;
  for (int d = 0; d < rank_of(c); d++)
    if (c->rspec[d] != 'I' && c->rspec[d] != 'O') window *= c->rshape[d];
  return window;
}

/* The number of output positions (the product of the output's spatial sizes). */
static int64_t positions_of(const convcase *c) {
  char sp[3];
  int ns = spatial_letters(c, sp);
  int64_t n = 1;
  for (int i = 0; i < ns; i++)
    n *= out_extent(c, i, c->lshape[pos(c->lspec, sp[i])], c->rshape[pos(c->rspec, sp[i])]);
  return n;
}

/* What the depthwise pass expands into slices (no conv left, see passes/depthwise.c; these cases
   are f32 and f64): a depthwise conv, a single-feature one included; a conv of one group, <= 4
   features and <= 64 out features; and a conv of batch 1 with few out features and positions
   (the filter gradient's form, one reduction per position). */
static bool depthwise_expanded(const convcase *c) {
  int64_t features = c->lshape[pos(c->lspec, 'C')], out = c->rshape[pos(c->rspec, 'O')];
  if (c->groups == features && window_of(c) <= 49) return true;
  if (c->groups == 1 && features <= 4 && out <= 64 && features * window_of(c) <= 49) return true;
  return c->groups == 1 && c->lshape[pos(c->lspec, 'N')] == 1 && positions_of(c) <= 49 && out <= 16;
}

/* Grouped and depthwise convs (their VJPs: a feature-grouped conv for the lhs, a batch-grouped
   one for the rhs) run as matmul kernels or, depthwise, as a fused loop: no kernel through the
   interpreter, 3 spatial dims included (the group is the matmul's batch outside the lhs view). */
static void test_grouped_native(void **state) {
  (void)state;
  int checked = 0, three_d = 0;
  for (int i = 0; i < N_CASES; i++) {
    const convcase *c = &cases[i];
    if (c->groups == 1) continue;
    for (int grad = 0; grad < 2; grad++) {
      char *text = NULL, *ir = NULL;
      compiled_dumps(c, grad, &text, &ir);
      if (strstr(text, "runs in the interpreter")) print_error("case %d%s:\n%s", i, grad ? " grad" : "", text);
      assert_null(strstr(text, "runs in the interpreter"));
      /* a depthwise conv and its VJP wrt the filters are fused loops of slices (the depthwise
         pass), any other grouped conv a matmul (a batch-grouped one for the VJP wrt the rhs) */
      if (depthwise_expanded(c) && !grad) assert_null(strstr(ir, " = conv "));
      else if (depthwise_expanded(c)) assert_int_equal(batch_grouped_convs(ir), 0);
      else assert_non_null(strstr(text, "is the matmul kernel"));
      free(text);
      free(ir);
      checked++;
      three_d += rank_of(c) == 5;
    }
  }
  assert_true(checked >= 18);
  assert_true(three_d >= 6);
}

static int convs_in(const char *text) {
  int n = 0;
  for (const char *q = text; (q = strstr(q, " = conv ")) != NULL; q++) n++;
  return n;
}

/* A single-feature conv is a fused loop of slices and so is its VJP wrt the filters (few out
   features): the VJP wrt the lhs is the grad's one conv left. A conv of a few features (RGB) and
   at most 64 out features is such a loop too (its VJPs are GEMMs). A batch-1 conv is expanded as
   a filter gradient only with few out features; RGB to 80 features stays the matmul kernel, and
   so does a bf16 one. */
static void test_single_feature(void **state) {
  (void)state;
  int checked = 0, few = 0;
  for (int i = 0; i < N_CASES; i++) {
    const convcase *c = &cases[i];
    int64_t features = c->lshape[pos(c->lspec, 'C')];
    if (c->groups != 1 || features > 4) continue;
    if (features > 1) {
      if (!depthwise_expanded(c)) continue;
      char *text = NULL, *ir = NULL;
      compiled_dumps(c, false, &text, &ir);
      assert_int_equal(convs_in(ir), 0);
      free(text);
      free(ir);
      few++;
      continue;
    }
    for (int grad = 0; grad < 2; grad++) {
      char *text = NULL, *ir = NULL;
      compiled_dumps(c, grad, &text, &ir);
      if (convs_in(ir) != grad) print_error("case %d%s:\n%s", i, grad ? " grad" : "", ir);
      assert_int_equal(convs_in(ir), grad);
      assert_null(strstr(text, "runs in the interpreter"));
      free(text);
      free(ir);
      checked++;
    }
  }
  assert_true(few >= 4);
  assert_int_equal(checked, 4);
  const convcase wide = {"NHWC", "HWIO", "NHWC", {1, 5, 5, 3}, {3, 3, 3, 80}, ONES, {1, 1}, {1, 1}, ONES, ONES, 1, JIT_F32};
  const convcase narrow = {"NHWC", "HWIO", "NHWC", {1, 5, 5, 3}, {3, 3, 3, 16}, ONES, {1, 1}, {1, 1}, ONES, ONES, 1, JIT_F32};
  check_case(&wide, "batch 1, 80 features");
  check_case(&narrow, "batch 1, 16 features");
  char *text = NULL, *ir = NULL;
  compiled_dumps(&wide, false, &text, &ir);
  assert_non_null(strstr(text, "is the matmul kernel"));
  free(text);
  free(ir);
  compiled_dumps(&narrow, false, &text, &ir);
  assert_int_equal(convs_in(ir), 0);
  free(text);
  free(ir);
  /* bf16 sums would round at each term: the GEMM (f32 sums) keeps first layers of bf16 */
  convcase grey16 = cases[N_CASES - 2];
  grey16.dt = JIT_BF16;
  compiled_dumps(&grey16, false, &text, &ir);
  assert_int_equal(convs_in(ir), 1);
  free(text);
  free(ir);
}

/* One ulp of v in bf16 (8 significant bits). */
static double bf16_ulp(double v) {
  int e;
  frexp(fabs(v), &e);
  return ldexp(1.0, e - 8);
}

/* A bf16 depthwise conv multiplies and sums its 9 terms in f32 and rounds once (depthwise.c), as
   the GEMM and XLA's CPU convs do: within one bf16 ulp of the exact sum, compiled and
   interpreted (summing in bf16, each add rounded, was not). Its filter gradient's sums are
   f32 too. */
static void test_bf16_depthwise(void **state) {
  (void)state;
  const convcase c = {"NHWC", "HWIO", "NHWC", {2, 8, 8, 16}, {3, 3, 1, 16}, ONES, {1, 1}, {1, 1}, ONES, ONES, 16, JIT_BF16};
  ot_array in[2] = {operand(&c, 0, 11), operand(&c, 1, 12)}, got[2];
  ot_array want = reference(&c, &in[0], &in[1]);
  ot_run_both("bf16 depthwise", trace_conv, (void *)&c, 2, in, 1, got);
  int64_t bad = 0;
  for (int r = 0; r < 2; r++)
    for (int64_t i = 0; i < want.n; i++)
      if (fabs(got[r].v[i] - want.v[i]) > bf16_ulp(want.v[i])) {
        if (!bad++) print_error("%s element %lld: %g, exactly %g\n", r ? "interpreted" : "compiled", (long long)i, got[r].v[i], want.v[i]);
      }
  for (int i = 0; i < 2; i++) {
    ot_free(&got[i]);
    ot_free(&in[i]);
  }
  ot_free(&want);
  assert_int_equal(bad, 0);
  char *text = NULL, *ir = NULL;
  compiled_dumps(&c, true, &text, &ir);
  assert_int_equal(convs_in(ir), 0); /* its VJPs are depthwise too */
  for (const char *q = ir; (q = strstr(q, " = reduce_sum ")) != NULL; q++) {
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(q, "\n"), q);
    if (strstr(line, "axes=[0,1,2]") && strstr(line, ": bf16["))
      fail_msg("a bf16 sum over batch and positions:\n%s", line);
  }
  free(text);
  free(ir);
}

/* Whether the list after key (as "[0,0]") on the line at q holds zeros only. */
static bool zeros_after(const char *q, const char *key) {
  const char *eol = strchr(q, '\n'), *at = strstr(q, key);
  if (!at || (eol && at > eol)) return false;
  for (at += strlen(key); *at && *at != ']'; at++)
    if (*at != '0' && *at != ',' && *at != '[') return false;
  return true;
}

/* The number of PADs in IR text, and whether they all leave the edges alone (lhs dilation's
   interior padding only). */
static int interior_pads(const char *text, bool *edges) {
  int n = 0;
  *edges = false;
  for (const char *q = text; (q = strstr(q, " = pad ")) != NULL; q++, n++)
    *edges |= !zeros_after(q, " lo=") || !zeros_after(q, " hi=");
  return n;
}

/* A padded conv without lhs dilation reads its lhs in place: the matmul kernel computes it and
   no PAD copies the lhs, for the value and (stride 1: their convs have no lhs dilation either)
   both VJPs. With lhs dilation, the PAD that spaces the lhs out leaves the edges to the view.
   The depthwise pass is off, so that convs of few features take the GEMM too; depthwise ones
   are left out (their batched GEMM pads). */
static void test_padding_folded(void **state) {
  (void)state;
  int checked = 0;
  setenv("TJIT_DISABLE_PASSES", "depthwise", 1);
  for (int i = 0; i < N_CASES; i++) {
    const convcase *c = &cases[i];
    char sp[3];
    int ns = spatial_letters(c, sp);
    bool padded = false, dilated_lhs = false, strided = false;
    for (int d = 0; d < ns; d++) {
      padded |= c->lo[d] != 0 || c->hi[d] != 0;
      dilated_lhs |= c->ldil[d] != 1;
      strided |= c->stride[d] != 1;
    }
    if (!padded || (c->groups == c->lshape[pos(c->lspec, 'C')] && c->groups > 1)) continue;
    if (dilated_lhs) {
      char *text = NULL, *ir = NULL;
      bool edges = true;
      compiled_dumps(c, false, &text, &ir);
      assert_int_equal(interior_pads(ir, &edges), 1);
      if (edges) print_error("case %d:\n%s", i, ir);
      assert_false(edges);
      free(text);
      free(ir);
      continue;
    }
    for (int grad = 0; grad < 1 + !strided; grad++) {
      char *text = NULL, *ir = NULL;
      compiled_dumps(c, grad, &text, &ir);
      bool ok = strstr(ir, " = pad ") == NULL && strstr(text, "is the matmul kernel") &&
                !strstr(text, "runs in the interpreter");
      if (!ok) print_error("case %d%s:\n%s\n%s", i, grad ? " grad" : "", ir, text);
      assert_true(ok);
      free(text);
      free(ir);
      checked++;
    }
  }
  unsetenv("TJIT_DISABLE_PASSES");
  assert_true(checked >= 15);
}

/* ---- vmap against a loop ------------------------------------------------------------------ */

typedef struct vcase {
  const convcase *c;
  int lhs_axis, rhs_axis; /* -1: not batched */
} vcase;

static void inner_fn(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  res[0] = apply(t, user, args[0], args[1]);
}

static void vmapped(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  const vcase *v = user;
  int in_axes[2] = {v->lhs_axis, v->rhs_axis}, out_axes[1] = {0};
  jit_vmap(t, inner_fn, (void *)v->c, 2, args, in_axes, 1, res, out_axes);
}

/* x with a batch of B inserted at axis (example e = the operand made with seed + e). */
static ot_array stacked(const convcase *c, int side, int axis, int64_t B, uint64_t seed) {
  ot_array ex = operand(c, side, seed);
  if (axis < 0) return ex;
  int64_t shape[JIT_MAX_RANK], idx[JIT_MAX_RANK], eidx[JIT_MAX_RANK];
  for (int i = 0, j = 0; i <= ex.rank; i++) shape[i] = i == axis ? B : ex.shape[j++];
  ot_array r = ot_zeros(c->dt, ex.rank + 1, shape);
  for (int64_t q = 0; q < r.n; q++) {
    ot_unravel(q, r.rank, shape, idx);
    int64_t e = idx[axis];
    for (int i = 0, j = 0; i <= ex.rank; i++)
      if (i != axis) eidx[j++] = idx[i];
    ot_array one = operand(c, side, seed + (uint64_t)e);
    r.v[q] = one.v[ot_ravel(ex.rank, ex.shape, eidx)];
    ot_free(&one);
  }
  ot_free(&ex);
  return r;
}

static void test_vmap(void **state) {
  (void)state;
  const int picks[] = {1, 3, 7, 10, 11, 13, 15};
  const int axes[][2] = {{0, -1}, {2, -1}, {-1, 0}, {-1, 3}, {0, 0}, {1, 2}};
  int64_t B = 3;
  for (size_t p = 0; p < sizeof picks / sizeof picks[0]; p++)
    for (size_t a = 0; a < sizeof axes / sizeof axes[0]; a++) {
      const convcase *c = &cases[picks[p]];
      vcase v = {c, axes[a][0], axes[a][1]};
      ot_array in[2] = {stacked(c, 0, v.lhs_axis, B, 10), stacked(c, 1, v.rhs_axis, B, 20)}, got;
      OT_ASSERT_OK(ot_run("vmapped", vmapped, &v, 2, in, 1, &got));
      for (int64_t e = 0; e < B; e++) {
        ot_array x = operand(c, 0, v.lhs_axis < 0 ? 10 : 10 + (uint64_t)e);
        ot_array w = operand(c, 1, v.rhs_axis < 0 ? 20 : 20 + (uint64_t)e);
        ot_array want = reference(c, &x, &w);
        ot_array slice = ot_zeros(want.dt, want.rank, want.shape);
        for (int64_t q = 0; q < want.n; q++) slice.v[q] = got.v[e * want.n + q];
        bool ok = ot_close("vmap", &slice, &want, NULL, (ot_tol){2e-5, 2e-5});
        if (!ok) print_error("vmap case %d, axes %d %d, example %lld\n", picks[p], v.lhs_axis, v.rhs_axis, (long long)e);
        assert_true(ok);
        ot_free(&slice);
        ot_free(&want);
        ot_free(&x);
        ot_free(&w);
      }
      ot_free(&got);
      ot_free(&in[0]);
      ot_free(&in[1]);
    }
}

/* ---- sharded over 2 devices --------------------------------------------------------------- */

typedef struct scase {
  const convcase *c;
  jit_sharding *lhs, *rhs; /* constraints on the operands (NULL: none) */
} scase;

static void trace_sharded(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  const scase *s = user;
  jit_val x = s->lhs ? jit_with_sharding_constraint(t, args[0], s->lhs) : args[0];
  jit_val w = s->rhs ? jit_with_sharding_constraint(t, args[1], s->rhs) : args[1];
  res[0] = apply(t, s->c, x, w);
}

/* A batch-split lhs or an output-feature-split rhs stays split (the partitioned program moves
   nothing); both split over the one mesh axis, or a spatially split lhs, gather first. Each
   against the unsharded result. */
static void test_sharded(void **state) {
  (void)state;
  jit_ctx *two = ot_ctx_with(2, 2, 3);
  jit_mesh *mesh = NULL;
  OT_ASSERT_OK(jit_mesh_create(two, 1, (int64_t[]){2}, (const char *[]){"x"}, NULL, &mesh));
  convcase c = {"NHWC", "HWIO", "NHWC", {4, 6, 5, 3}, {3, 3, 3, 4}, ONES, {1, 1}, {1, 1}, ONES, ONES, 1, JIT_F32};
  static const char *const specs[][2] = {{"x,_,_,_", NULL}, {NULL, "_,_,_,x"}, {"x,_,_,_", "_,_,_,x"}, {"_,x,_,_", NULL}};
  ot_array in[2] = {operand(&c, 0, 30), operand(&c, 1, 31)};
  ot_array want = reference(&c, &in[0], &in[1]);
  for (int i = 0; i < 4; i++) {
    scase s = {&c, NULL, NULL};
    if (specs[i][0]) OT_ASSERT_OK(jit_sharding_create(mesh, specs[i][0], &s.lhs));
    if (specs[i][1]) OT_ASSERT_OK(jit_sharding_create(mesh, specs[i][1], &s.rhs));
    ot_array got;
    OT_ASSERT_OK(ot_run_ctx(two, "sharded", trace_sharded, &s, 2, in, 1, &got));
    assert_true(ot_close("sharded", &got, &want, NULL, (ot_tol){2e-5, 2e-5}));
    ot_free(&got);
    jit_fn_opts o = {.name = "sharded", .n_args = 2, .n_results = 1};
    jit_fn *f = NULL;
    OT_ASSERT_OK(jit_compile(two, trace_sharded, &s, &o, &f));
    jit_array *a[2] = {ot_upload_to(two, &in[0]), ot_upload_to(two, &in[1])}, *r = NULL;
    OT_ASSERT_OK(jit_call(f, a, &r));
    jit_array_free(r);
    char *text = ot_fn_dump(f, a, JIT_DUMP_PARTITIONED);
    bool moves = strstr(text, "all_gather") != NULL || strstr(text, "all_to_all") != NULL;
    if (moves != (i >= 2)) print_error("case %d:\n%s\n", i, text);
    assert_true(moves == (i >= 2)); /* case 2: one axis cannot split both dims */
    free(text);
    jit_array_free(a[0]);
    jit_array_free(a[1]);
    jit_fn_free(f);
    jit_sharding_free(s.lhs);
    jit_sharding_free(s.rhs);
  }
  ot_free(&want);
  ot_free(&in[0]);
  ot_free(&in[1]);
  jit_mesh_free(mesh);
  jit_ctx_destroy(two);
}

/* ---- errors name the user's line --------------------------------------------------------------- */

static int bad_line;
static void bad_ops(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  int which = *(int *)user;
  bad_line = __LINE__ + 2;
  switch (which) {
  case 0: res[0] = jit_conv(t, args[0], args[1], NULL, NULL, NULL, NULL, NULL, "NHWC", "HWIO", "NHWX", 1); break;
  case 1: res[0] = jit_conv(t, args[0], args[1], NULL, NULL, NULL, NULL, NULL, "NCHW", "HWIO", "NHWC", 1); break;
  case 2: res[0] = jit_conv(t, args[0], args[1], (int64_t[]){0, 1}, NULL, NULL, NULL, NULL, "NHWC", "HWIO", "NHWC", 1); break;
  default: res[0] = jit_conv(t, args[0], args[1], NULL, NULL, NULL, NULL, NULL, "NHWC", "HWIO", "NHWC", 2); break;
  }
}

static void test_errors(void **state) {
  (void)state;
  static const jit_status codes[] = {JIT_EINVAL, JIT_ESHAPE, JIT_EINVAL, JIT_ESHAPE};
  ot_array in[2] = {ot_random(JIT_F32, 4, (int64_t[]){1, 4, 4, 3}, 5, -1, 1),
                    ot_random(JIT_F32, 4, (int64_t[]){2, 2, 3, 4}, 6, -1, 1)};
  for (int which = 0; which < 4; which++) {
    ot_array r;
    assert_int_equal(ot_run("bad", bad_ops, &which, 2, in, 1, &r), codes[which]);
    assert_true(ot_error_has("conv", THIS_FILE, bad_line + which));
  }
  ot_free(&in[0]);
  ot_free(&in[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_loop), cmocka_unit_test(test_larger),
      cmocka_unit_test(test_grouped_native), cmocka_unit_test(test_single_feature),
      cmocka_unit_test(test_bf16_depthwise),
      cmocka_unit_test(test_padding_folded),
      cmocka_unit_test(test_grads),        cmocka_unit_test(test_vmap),
      cmocka_unit_test(test_sharded),      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
