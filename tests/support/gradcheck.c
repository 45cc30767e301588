/* gradcheck.c: value_and_grad of a loss against central finite differences of the loss itself,
 * both compiled (tests of the VJP rules of scans, conds and loops). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "support/gradcheck.h"

void ot_value_and_grad_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const ot_loss_fn *l = user;
  jit_value_and_grad(t, l->fn, l->user, l->n_args, args, (UINT64_C(1) << l->n_args) - 1, 0, results);
}

static double loss_at(jit_fn *f, int n, const ot_array *in) {
  jit_array *a[8] = {0}, *r = NULL;
  for (int i = 0; i < n; i++) a[i] = ot_upload(&in[i]);
  OT_ASSERT_OK(jit_call(f, a, &r));
  ot_array y = ot_download(r);
  double v = y.v[0];
  ot_free(&y);
  jit_array_free(r);
  for (int i = 0; i < n; i++) jit_array_free(a[i]);
  return v;
}

/* The value and every gradient of l at in (f64 arrays) against l itself, compiled, and its
   central differences. */
void ot_check_grad(const char *name, const ot_loss_fn *l, ot_array *in) {
  int n = l->n_args;
  ot_array out[9];
  char vg_name[64];
  assert_true(n <= 8);
  snprintf(vg_name, sizeof vg_name, "%s_vg", name);
  OT_ASSERT_OK(ot_run(vg_name, ot_value_and_grad_fn, (void *)l, n, in, 1 + n, out));
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = name, .n_args = n, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ot_ctx(), l->fn, l->user, &o, &f));
  double v = loss_at(f, n, in);
  if (fabs(out[0].v[0] - v) > 1e-12 * (1 + fabs(v)))
    fail_msg("%s: value %.17g, the loss alone %.17g", name, out[0].v[0], v);
  const double eps = 1e-6;
  for (int a = 0; a < n; a++) {
    assert_int_equal(out[1 + a].n, in[a].n);
    for (int64_t e = 0; e < in[a].n; e++) {
      double keep = in[a].v[e];
      in[a].v[e] = keep + eps;
      double up = loss_at(f, n, in);
      in[a].v[e] = keep - eps;
      double down = loss_at(f, n, in);
      in[a].v[e] = keep;
      double fd = (up - down) / (2 * eps), g = out[1 + a].v[e];
      if (fabs(fd - g) > 1e-6 * (1 + fabs(fd)))
        fail_msg("%s: d loss / d arg %d [%lld]: grad %.12g, finite differences %.12g", name, a,
                 (long long)e, g, fd);
    }
  }
  jit_fn_free(f);
  for (int i = 0; i <= n; i++) ot_free(&out[i]);
}

