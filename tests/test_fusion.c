/* test_fusion.c: the fusion pass: how many kernels of which kind each pattern becomes, what each
 * kernel reads and writes, views, and the fused dump's text. */
#define _GNU_SOURCE /* open_memstream */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel.h"
#include "ir/ir.h"
#include "ir/passes/passes.h"

typedef struct fused {
  ir_func *f;
  fz_prog *p;
} fused;

/* Parses one function, runs the optimization pipeline (as jit_call does) unless raw, fuses it. */
static fused fuse_text(const char *text, bool raw) {
  ir_func **fs = NULL;
  uint32_t n = 0;
  fused r = {0};
  if (ir_parse(text, strlen(text), &fs, &n) != JIT_OK) {
    fprintf(stderr, "parse: %s\n", jit_last_error());
    fail();
  }
  assert_int_equal(n, 1);
  r.f = fs[0];
  free(fs);
  if (!raw) assert_int_equal(ir_optimize(r.f, 0, true), JIT_OK);
  if (ir_fuse(r.f, &r.p) != JIT_OK) {
    fprintf(stderr, "fuse: %s\n", jit_last_error());
    fail();
  }
  return r;
}

static void fused_free(fused *r) {
  fz_prog_free(r->p);
  ir_func_free(r->f);
}

static char *fused_text(const fused *r) {
  char *s = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&s, &len);
  assert_non_null(m);
  assert_int_equal(fz_print(r->p, m), JIT_OK);
  fclose(m);
  return s;
}

static void expect_text(const fused *r, const char *want) {
  char *s = fused_text(r);
  if (strcmp(s, want) != 0) {
    fprintf(stderr, "--- got:\n%s--- want:\n%s", s, want);
    free(s);
    fail();
  }
  free(s);
}

static int count_kind(const fz_prog *p, fz_kind kind) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_kernels; i++) n += p->kernels[i].kind == kind;
  return n;
}

static void test_chain_of_ten(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[64,32], %b: f32[32]) -> f32[64,32] {\n"
                      "  %c = const 0.5 : f32[64,32]\n"
                      "  %bb = broadcast %b dims=[1] : f32[64,32]\n"
                      "  %1 = mul %x, %c : f32[64,32]\n"
                      "  %2 = add %1, %bb : f32[64,32]\n"
                      "  %3 = tanh %2 : f32[64,32]\n"
                      "  %4 = exp %3 : f32[64,32]\n"
                      "  %5 = sub %4, %x : f32[64,32]\n"
                      "  %6 = abs %5 : f32[64,32]\n"
                      "  %7 = sqrt %6 : f32[64,32]\n"
                      "  %8 = logistic %7 : f32[64,32]\n"
                      "  %9 = neg %8 : f32[64,32]\n"
                      "  %10 = max %9, %x : f32[64,32]\n"
                      "  return %10\n"
                      "}\n",
                      false);
  assert_int_equal(r.p->n_kernels, 1);
  const fz_kernel *k = &r.p->kernels[0];
  assert_int_equal(k->kind, FZ_LOOP);
  assert_int_equal(k->n_reads, 2);
  assert_int_equal(k->n_writes, 1);
  assert_int_equal(k->rows, 64);
  assert_int_equal(k->cols, 32);
  assert_int_equal(k->n_ops, r.f->n_ins - 2);
  fused_free(&r);
}

static const char *softmax_ir =
    "func @softmax(%x: f32[16,8]) -> f32[16,8] {\n"
    "  %m = reduce_max %x axes=[1] : f32[16]\n"
    "  %m2 = reshape %m : f32[16,1]\n"
    "  %mb = broadcast %m2 dims=[0,1] : f32[16,8]\n"
    "  %d = sub %x, %mb : f32[16,8]\n"
    "  %e = exp %d : f32[16,8]\n"
    "  %s = reduce_sum %e axes=[1] : f32[16]\n"
    "  %s2 = reshape %s : f32[16,1]\n"
    "  %sb = broadcast %s2 dims=[0,1] : f32[16,8]\n"
    "  %y = div %e, %sb : f32[16,8]\n"
    "  return %y\n"
    "}\n";

static void test_softmax_one_row_kernel(void **state) {
  (void)state;
  fused r = fuse_text(softmax_ir, false);
  assert_int_equal(r.p->n_kernels, 1);
  assert_int_equal(r.p->kernels[0].kind, FZ_ROW);
  expect_text(&r,
              "func @softmax(%0: f32[16,8]) -> f32[16,8] {\n"
              "  kernel k0 row[16 x 8] reads %0 writes %9 {\n"
              "    %1 = reduce_max %0 axes=[1] : f32[16]\n"
              "    %2 = reshape %1 : f32[16,1]\n"
              "    %3 = broadcast %2 dims=[0,1] : f32[16,8]\n"
              "    %4 = sub %0, %3 : f32[16,8]\n"
              "    %5 = exp %4 : f32[16,8]\n"
              "    %6 = reduce_sum %5 axes=[1] : f32[16]\n"
              "    %7 = reshape %6 : f32[16,1]\n"
              "    %8 = broadcast %7 dims=[0,1] : f32[16,8]\n"
              "    %9 = div %5, %8 : f32[16,8]\n"
              "  }\n"
              "  return %9\n"
              "}\n");
  fused_free(&r);
}

static void test_layernorm_one_row_kernel(void **state) {
  (void)state;
  fused r = fuse_text("func @ln(%x: f32[32,64], %g: f32[64], %b: f32[64]) -> f32[32,64] {\n"
                      "  %s = reduce_sum %x axes=[1] : f32[32]\n"
                      "  %n = const 64 : f32[32]\n"
                      "  %mean = div %s, %n : f32[32]\n"
                      "  %m2 = reshape %mean : f32[32,1]\n"
                      "  %mb = broadcast %m2 dims=[0,1] : f32[32,64]\n"
                      "  %xc = sub %x, %mb : f32[32,64]\n"
                      "  %sq = mul %xc, %xc : f32[32,64]\n"
                      "  %vs = reduce_sum %sq axes=[1] : f32[32]\n"
                      "  %var = div %vs, %n : f32[32]\n"
                      "  %eps = const 1e-5 : f32[32]\n"
                      "  %ve = add %var, %eps : f32[32]\n"
                      "  %rs = rsqrt %ve : f32[32]\n"
                      "  %r2 = reshape %rs : f32[32,1]\n"
                      "  %rb = broadcast %r2 dims=[0,1] : f32[32,64]\n"
                      "  %y = mul %xc, %rb : f32[32,64]\n"
                      "  %gb = broadcast %g dims=[1] : f32[32,64]\n"
                      "  %y2 = mul %y, %gb : f32[32,64]\n"
                      "  %bb = broadcast %b dims=[1] : f32[32,64]\n"
                      "  %y3 = add %y2, %bb : f32[32,64]\n"
                      "  return %y3\n"
                      "}\n",
                      false);
  assert_int_equal(r.p->n_kernels, 1);
  assert_int_equal(r.p->kernels[0].kind, FZ_ROW);
  assert_int_equal(r.p->kernels[0].n_reads, 3);
  fused_free(&r);
}

static void test_mlp_dot_epilogue(void **state) {
  (void)state;
  fused r = fuse_text(
      "func @mlp(%x: f32[8,16], %w1: f32[16,32], %b1: f32[32], %w2: f32[32,4], %b2: f32[4]) -> f32[8,4] {\n"
      "  %h = dot %x, %w1 contract=[1]x[0] : f32[8,32]\n"
      "  %bb = broadcast %b1 dims=[1] : f32[8,32]\n"
      "  %h2 = add %h, %bb : f32[8,32]\n"
      "  %z = const 0 : f32[8,32]\n"
      "  %h3 = max %h2, %z : f32[8,32]\n"
      "  %y = dot %h3, %w2 contract=[1]x[0] : f32[8,4]\n"
      "  %bb2 = broadcast %b2 dims=[1] : f32[8,4]\n"
      "  %y2 = add %y, %bb2 : f32[8,4]\n"
      "  return %y2\n"
      "}\n",
      false);
  assert_int_equal(r.p->n_kernels, 2);
  assert_int_equal(count_kind(r.p, FZ_DOT), 2);
  const fz_kernel *k0 = &r.p->kernels[0];
  assert_int_equal(k0->n_writes, 1);
  /* dot, broadcast, add, const, max */
  assert_int_equal(k0->n_ops, 5);
  assert_int_equal(k0->n_reads, 3);
  fused_free(&r);
}

/* A value read by two kernels at different maps is materialized once. */
static void test_shared_value_materialized(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[8,8]) -> f32[8,8] {\n"
                      "  %e = exp %x : f32[8,8]\n"
                      "  %t = transpose %e perm=[1,0] : f32[8,8]\n"
                      "  %y = add %e, %t : f32[8,8]\n"
                      "  return %y\n"
                      "}\n",
                      false);
  assert_int_equal(r.p->n_kernels, 2);
  assert_int_equal(r.p->cls[1], FZ_MAT);
  assert_int_equal(r.p->kernels[1].n_reads, 1);
  assert_int_equal(r.p->kernels[1].reads[0], 1);
  fused_free(&r);
}

/* A reshape that moves elements between dims is a view of a materialized operand. */
static void test_reshape_view(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[4,6]) -> f32[3,8] {\n"
                      "  %e = exp %x : f32[4,6]\n"
                      "  %r = reshape %e : f32[3,8]\n"
                      "  %y = neg %r : f32[3,8]\n"
                      "  return %y\n"
                      "}\n",
                      false);
  assert_int_equal(r.p->n_kernels, 2);
  assert_int_equal(r.p->cls[2], FZ_VIEW);
  assert_int_equal(r.p->base[2], 1);
  expect_text(&r,
              "func @f(%0: f32[4,6]) -> f32[3,8] {\n"
              "  kernel k0 loop[4 x 6] reads %0 writes %1 {\n"
              "    %1 = exp %0 : f32[4,6]\n"
              "  }\n"
              "  view %2 = reshape %1 : f32[3,8]\n"
              "  kernel k1 loop[3 x 8] reads %2 writes %3 {\n"
              "    %3 = neg %2 : f32[3,8]\n"
              "  }\n"
              "  return %3\n"
              "}\n");
  fused_free(&r);
}

/* A returned value whose users are all in one kernel at its index is a second output. */
static void test_second_output(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[8,8]) -> (f32[8,8], f32[8,8], f32[8]) {\n"
                      "  %e = exp %x : f32[8,8]\n"
                      "  %s = reduce_sum %e axes=[1] : f32[8]\n"
                      "  %s2 = reshape %s : f32[8,1]\n"
                      "  %sb = broadcast %s2 dims=[0,1] : f32[8,8]\n"
                      "  %y = div %e, %sb : f32[8,8]\n"
                      "  return %e, %y, %s\n"
                      "}\n",
                      false);
  assert_int_equal(r.p->n_kernels, 1);
  assert_int_equal(r.p->kernels[0].n_writes, 3);
  fused_free(&r);
}

/* A reduction over a leading axis read per inner element cannot join: it is its own kernel. */
static void test_column_reduce_separate(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[16,8]) -> f32[16,8] {\n"
                      "  %s = reduce_sum %x axes=[0] : f32[8]\n"
                      "  %sb = broadcast %s dims=[1] : f32[16,8]\n"
                      "  %y = sub %x, %sb : f32[16,8]\n"
                      "  return %y\n"
                      "}\n",
                      false);
  assert_int_equal(r.p->n_kernels, 2);
  assert_int_equal(r.p->kernels[0].kind, FZ_ROW);
  assert_int_equal(r.p->kernels[0].rows, 8);
  assert_int_equal(r.p->kernels[0].cols, 16);
  assert_int_equal(r.p->kernels[1].kind, FZ_LOOP);
  fused_free(&r);
}

/* A broadcast read by two kernels is duplicated into both, not materialized. */
static void test_broadcast_duplicated(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[8,8], %b: f32[8]) -> (f32[8,8], f32[8,8]) {\n"
                      "  %bb = broadcast %b dims=[1] : f32[8,8]\n"
                      "  %y = add %x, %bb : f32[8,8]\n"
                      "  %t = transpose %y perm=[1,0] : f32[8,8]\n"
                      "  %z = mul %t, %bb : f32[8,8]\n"
                      "  return %y, %z\n"
                      "}\n",
                      false);
  assert_int_equal(r.p->n_kernels, 2);
  assert_int_equal(r.p->cls[2], FZ_INLINE);
  fused_free(&r);
}

/* A reduction's elementwise consumer of the reduced shape joins it (rows = the reduced shape). */
static void test_reduce_epilogue(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[40,30]) -> f32[40] {\n"
                      "  %s = reduce_sum %x axes=[1] : f32[40]\n"
                      "  %n = const 30 : f32[40]\n"
                      "  %m = div %s, %n : f32[40]\n"
                      "  %y = tanh %m : f32[40]\n"
                      "  return %y\n"
                      "}\n",
                      false);
  assert_int_equal(r.p->n_kernels, 1);
  assert_int_equal(r.p->kernels[0].kind, FZ_ROW);
  assert_int_equal(r.p->kernels[0].rows, 40);
  assert_int_equal(r.p->kernels[0].cols, 30);
  fused_free(&r);
}

/* A value several kernels read is computed and written by the first of them to run (a second
   output), not by a kernel of its own: GELU's pieces, which its gradient reads again. */
static void test_shared_value_written_by_first_reader(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[8,8]) -> (f32[8,8], f32[8,8]) {\n"
                      "  %c = const 0.7 : f32[8,8]\n"
                      "  %a = mul %x, %c : f32[8,8]\n"
                      "  %e = erf %a : f32[8,8]\n"
                      "  %y = mul %e, %x : f32[8,8]\n"
                      "  %t = transpose %a perm=[1,0] : f32[8,8]\n"
                      "  %u = mul %t, %t : f32[8,8]\n"
                      "  %v = tanh %u : f32[8,8]\n"
                      "  return %y, %v\n"
                      "}\n",
                      false);
  expect_text(&r,
              "func @f(%0: f32[8,8]) -> (f32[8,8], f32[8,8]) {\n"
              "  kernel k0 loop[8 x 8] reads %0 writes %2, %4 {\n"
              "    %1 = const 0.7 : f32[8,8]\n"
              "    %2 = mul %0, %1 : f32[8,8]\n"
              "    %3 = erf %2 : f32[8,8]\n"
              "    %4 = mul %3, %0 : f32[8,8]\n"
              "  }\n"
              "  kernel k1 loop[8 x 8] reads %2 writes %7 {\n"
              "    %5 = transpose %2 perm=[1,0] : f32[8,8]\n"
              "    %6 = mul %5, %5 : f32[8,8]\n"
              "    %7 = tanh %6 : f32[8,8]\n"
              "  }\n"
              "  return %4, %7\n"
              "}\n");
  fused_free(&r);
}

/* ... but a dot's epilogue with no other reader stays in the dot's kernel (one write, the
   precompiled core), and a dot never joins a kernel that writes a shared value. */
static void test_shared_value_not_into_dot(void **state) {
  (void)state;
  fused r = fuse_text(
      "func @f(%x: f32[8,16], %w: f32[16,32], %b: f32[32]) -> (f32[8,32], f32[32,8]) {\n"
      "  %h = dot %x, %w contract=[1]x[0] : f32[8,32]\n"
      "  %bb = broadcast %b dims=[1] : f32[8,32]\n"
      "  %h2 = add %h, %bb : f32[8,32]\n"
      "  %z = const 0 : f32[8,32]\n"
      "  %r = max %h2, %z : f32[8,32]\n"
      "  %t = transpose %h2 perm=[1,0] : f32[32,8]\n"
      "  %u = exp %t : f32[32,8]\n"
      "  return %r, %u\n"
      "}\n",
      false);
  assert_int_equal(r.p->n_kernels, 3);
  const fz_kernel *k0 = &r.p->kernels[0];
  assert_int_equal(k0->kind, FZ_DOT);
  assert_int_equal(k0->n_writes, 1);
  assert_int_equal(k0->writes[0], 5); /* %h2 */
  for (uint32_t i = 1; i < r.p->n_kernels; i++) {
    assert_int_equal(r.p->kernels[i].kind, FZ_LOOP);
    assert_int_equal(r.p->kernels[i].n_writes, 1);
  }
  fused_free(&r);
  /* the shared value one step past the epilogue: it is written by its first reader, and the
     dot stays a kernel of one write */
  r = fuse_text("func @f(%x: f32[8,16], %w: f32[16,32], %b: f32[32]) -> (f32[8,32], f32[32,8]) {\n"
                "  %h = dot %x, %w contract=[1]x[0] : f32[8,32]\n"
                "  %bb = broadcast %b dims=[1] : f32[8,32]\n"
                "  %h2 = add %h, %bb : f32[8,32]\n"
                "  %z = const 0 : f32[8,32]\n"
                "  %r = max %h2, %z : f32[8,32]\n"
                "  %e = exp %r : f32[8,32]\n"
                "  %t = transpose %r perm=[1,0] : f32[32,8]\n"
                "  %u = tanh %t : f32[32,8]\n"
                "  return %e, %u\n"
                "}\n",
                false);
  assert_int_equal(count_kind(r.p, FZ_DOT), 1);
  for (uint32_t i = 0; i < r.p->n_kernels; i++)
    if (r.p->kernels[i].kind == FZ_DOT) assert_int_equal(r.p->kernels[i].n_writes, 1);
  assert_int_equal(r.p->cls[7], FZ_MAT); /* %r, written beside %e */
  fused_free(&r);
}

/* A reduction several kernels read is computed by the first of them, once per row, and written
   there: a softmax's row maximum that a second kernel reads along its columns. */
static void test_shared_reduction_written_by_first_reader(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[8,16]) -> (f32[8,16], f32[16,8]) {\n"
                      "  %m = reduce_max %x axes=[1] : f32[8]\n"
                      "  %m2 = reshape %m : f32[8,1]\n"
                      "  %mb = broadcast %m2 dims=[0,1] : f32[8,16]\n"
                      "  %s = sub %x, %mb : f32[8,16]\n"
                      "  %e = exp %s : f32[8,16]\n"
                      "  %q = broadcast %m dims=[1] : f32[16,8]\n"
                      "  %xt = transpose %x perm=[1,0] : f32[16,8]\n"
                      "  %w = mul %xt, %q : f32[16,8]\n"
                      "  return %e, %w\n"
                      "}\n",
                      false);
  assert_int_equal(r.p->n_kernels, 2);
  const fz_kernel *k0 = &r.p->kernels[0];
  assert_int_equal(k0->kind, FZ_ROW);
  assert_int_equal(k0->n_writes, 2);
  assert_int_equal(k0->writes[0], 1); /* %m, per row */
  assert_int_equal(r.p->kernels[1].n_reads, 2);
  fused_free(&r);
  /* a sum over the leading axis stays a kernel of its own (column mode), though its first
     reader reads it once per row */
  r = fuse_text("func @f(%x: f32[16,8]) -> (f32[8,16], f32[16,8]) {\n"
                "  %s = reduce_sum %x axes=[0] : f32[8]\n"
                "  %q = broadcast %s dims=[0] : f32[8,16]\n"
                "  %xt = transpose %x perm=[1,0] : f32[8,16]\n"
                "  %w = add %xt, %q : f32[8,16]\n"
                "  %sb = broadcast %s dims=[1] : f32[16,8]\n"
                "  %y = mul %x, %sb : f32[16,8]\n"
                "  return %w, %y\n"
                "}\n",
                false);
  assert_int_equal(r.p->n_kernels, 3);
  assert_int_equal(r.p->kernels[0].root, 1);
  assert_int_equal(r.p->kernels[0].n_writes, 1);
  fused_free(&r);
}

/* Column reductions of one loop space that read a buffer in common are one kernel (siblings: a
   bias's gradient and a filter's, each offset's product of a slice with dy), placed where the
   last of them ran; not when the later reads the earlier's sum, when a kernel between them
   reads it, when they read nothing in common, or when their spaces differ. */
static void test_sibling_columns(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[64,10,8], %p: f32[64,12]) -> (f32[8], f32[8], f32[8]) {\n"
                      "  %s0 = reduce_sum %x axes=[0,1] : f32[8]\n"
                      "  %a = slice %p start=[0,0] limit=[64,10] stride=[1,1] : f32[64,10]\n"
                      "  %ab = broadcast %a dims=[0,1] : f32[64,10,8]\n"
                      "  %m1 = mul %ab, %x : f32[64,10,8]\n"
                      "  %s1 = reduce_sum %m1 axes=[0,1] : f32[8]\n"
                      "  %b = slice %p start=[0,2] limit=[64,12] stride=[1,1] : f32[64,10]\n"
                      "  %bb = broadcast %b dims=[0,1] : f32[64,10,8]\n"
                      "  %m2 = mul %bb, %x : f32[64,10,8]\n"
                      "  %s2 = reduce_max %m2 axes=[0,1] : f32[8]\n"
                      "  return %s0, %s1, %s2\n"
                      "}\n",
                      true);
  assert_int_equal(r.p->n_kernels, 1);
  const fz_kernel *k = &r.p->kernels[0];
  assert_int_equal(k->kind, FZ_ROW);
  assert_int_equal(k->n_writes, 3);
  assert_int_equal(k->writes[0], 2);  /* %s0 */
  assert_int_equal(k->root, 10);      /* %s2: where the last ran */
  assert_int_equal(k->n_reads, 2);
  assert_int_equal(r.p->owner[2], 0);
  fused_free(&r);

  static const struct {
    const char *types, *body, *results; /* after @f's "->", its body, its return list */
    uint32_t kernels;
  } refused[] = {
      {"(f32[8], f32[8], f32[3,8])",
       "  %s0 = reduce_sum %x axes=[0,1] : f32[8]\n" /* the later reads the sum (which */
       "  %sb = broadcast %s0 dims=[2] : f32[64,10,8]\n" /* %e's kernel reads too, so it */
       "  %d = sub %x, %sb : f32[64,10,8]\n"             /* is not a phase of the later's) */
       "  %s1 = reduce_sum %d axes=[0,1] : f32[8]\n"
       "  %t = broadcast %s0 dims=[1] : f32[3,8]\n"
       "  %e = exp %t : f32[3,8]\n",
       "%s0, %s1, %e", 3},
      {"(f32[8], f32[8], f32[3,8])",
       "  %s0 = reduce_sum %x axes=[0,1] : f32[8]\n" /* a kernel between reads it */
       "  %t = broadcast %s0 dims=[1] : f32[3,8]\n"
       "  %e = exp %t : f32[3,8]\n"
       "  %d = add %x, %x : f32[64,10,8]\n"
       "  %s1 = reduce_sum %d axes=[0,1] : f32[8]\n",
       "%s0, %s1, %e", 3},
      {"(f32[8], f32[8])",
       "  %s0 = reduce_sum %x axes=[0,1] : f32[8]\n" /* nothing in common */
       "  %s1 = reduce_sum %y axes=[0,1] : f32[8]\n",
       "%s0, %s1", 2},
      {"(f32[8], f32[10,8])",
       "  %s0 = reduce_sum %x axes=[0,1] : f32[8]\n" /* another space */
       "  %s1 = reduce_sum %x axes=[0] : f32[10,8]\n",
       "%s0, %s1", 2},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text,
             "func @f(%%x: f32[64,10,8], %%y: f32[64,10,8]) -> %s {\n%s  return %s\n}\n",
             refused[i].types, refused[i].body, refused[i].results);
    r = fuse_text(text, true);
    if (r.p->n_kernels != refused[i].kernels) fprintf(stderr, "case %zu:\n%s", i, fused_text(&r));
    assert_int_equal(r.p->n_kernels, refused[i].kernels);
    fused_free(&r);
  }
}

/* Cheap arithmetic read at a map that leaves out an inner dim joins (computed once per row),
   but not one that leaves out a row dim: it would be computed again on every row of it. */
static void test_recompute_only_inner(void **state) {
  (void)state;
  fused r = fuse_text("func @f(%x: f32[16,3], %y: f32[16,3,8]) -> f32[16,3,8] {\n"
                      "  %e = mul %x, %x : f32[16,3]\n"
                      "  %b = broadcast %e dims=[0,1] : f32[16,3,8]\n"
                      "  %r = add %b, %y : f32[16,3,8]\n"
                      "  return %r\n"
                      "}\n",
                      true);
  assert_int_equal(r.p->n_kernels, 1);
  fused_free(&r);
  r = fuse_text("func @f(%x: f32[16,8], %y: f32[16,3,8]) -> f32[16,3,8] {\n"
                "  %e = mul %x, %x : f32[16,8]\n"
                "  %b = broadcast %e dims=[0,2] : f32[16,3,8]\n"
                "  %r = add %b, %y : f32[16,3,8]\n"
                "  return %r\n"
                "}\n",
                true);
  assert_int_equal(r.p->n_kernels, 2);
  assert_int_equal(r.p->kernels[0].root, 2); /* %e, materialized */
  fused_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_of_ten),
      cmocka_unit_test(test_softmax_one_row_kernel),
      cmocka_unit_test(test_layernorm_one_row_kernel),
      cmocka_unit_test(test_mlp_dot_epilogue),
      cmocka_unit_test(test_shared_value_materialized),
      cmocka_unit_test(test_reshape_view),
      cmocka_unit_test(test_second_output),
      cmocka_unit_test(test_column_reduce_separate),
      cmocka_unit_test(test_broadcast_duplicated),
      cmocka_unit_test(test_reduce_epilogue),
      cmocka_unit_test(test_shared_value_written_by_first_reader),
      cmocka_unit_test(test_shared_value_not_into_dot),
      cmocka_unit_test(test_shared_reduction_written_by_first_reader),
      cmocka_unit_test(test_sibling_columns),
      cmocka_unit_test(test_recompute_only_inner),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
