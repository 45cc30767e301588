/* consumer.c: a program built against an installed tjit (pkg-config and find_package). */
#include <stdio.h>

#include "tjit.h"

static void add_one(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_add(t, a[0], jit_scalar(t, 1.0));
}

int main(void) {
  jit_ctx *ctx = NULL;
  jit_fn *f = NULL;
  jit_array *x = NULL, *y = NULL;
  const float in[3] = {1, 2, 3};
  float out[3] = {0};
  const int64_t shape[1] = {3};
  jit_fn_opts o = {.name = "add_one", .n_args = 1, .n_results = 1};
  int ok = jit_ctx_create(NULL, &ctx) == JIT_OK &&
           jit_array_from_host(ctx, JIT_F32, 1, shape, in, &x) == JIT_OK &&
           jit_compile(ctx, add_one, NULL, &o, &f) == JIT_OK && jit_call(f, &x, &y) == JIT_OK &&
           jit_array_to_host(y, out, sizeof out) == JIT_OK && out[0] == 2 && out[1] == 3 &&
           out[2] == 4;
  if (!ok) fprintf(stderr, "consumer: %s\n", jit_last_error());
  jit_array_free(y);
  jit_array_free(x);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
  return ok ? 0 : 1;
}
