/* exec_control.c: the steps of lax.switch and lax.while_loop: the chosen branch's compiled
 * executable, or the compiled predicate and body in a loop; each body runs natively on the
 * step's buffers (no per-element dispatch, one call per branch taken or per iteration). */
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/exec_internal.h"

/* Pointer arrays for a body's args and results: small ones on the stack. */
typedef struct ptrs {
  const void *small_a[16];
  void *small_r[16];
  const void **a;
  void **r;
} ptrs;

static bool ptrs_init(ptrs *p, uint32_t na, uint32_t nr) {
  p->a = na > 16 ? malloc(na * sizeof *p->a) : p->small_a;
  p->r = nr > 16 ? malloc(nr * sizeof *p->r) : p->small_r;
  return p->a && p->r;
}

static void ptrs_free(ptrs *p) {
  if (p->a != p->small_a) free((void *)p->a);
  if (p->r != p->small_r) free(p->r);
}

jit_status exec_run_cond(const estep *s, void *const *bufs) {
  int32_t i;
  memcpy(&i, bufs[0], sizeof i);
  uint32_t j = i < 0 ? 0 : (uint32_t)i >= s->n_bodies ? s->n_bodies - 1 : (uint32_t)i; /* lax.switch clamps */
  uint32_t na = s->n_args - 1, nr = s->n_bufs - s->n_args;
  ptrs p;
  jit_status st = JIT_OK;
  if (!ptrs_init(&p, na, nr)) {
    st = jit_error(JIT_ENOMEM, "jit_call: out of memory");
  } else {
    for (uint32_t k = 0; k < na; k++) p.a[k] = bufs[1 + k];
    for (uint32_t k = 0; k < nr; k++) p.r[k] = bufs[s->n_args + k];
    st = exec_run(s->bodies[j], p.a, p.r);
  }
  ptrs_free(&p);
  return st;
}

/* The carries live in the result buffers; each iteration the body writes the scratch set, which
   is copied back (a body's results may not alias its params). */
jit_status exec_run_while(const exec *e, const estep *s, void *const *bufs) {
  uint32_t na = s->n_args, nk = s->n_consts, nc = na - nk;
  exec *b = s->bodies[1];
  ptrs p;
  jit_status st = JIT_OK;
  if (!ptrs_init(&p, na, nc)) {
    st = jit_error(JIT_ENOMEM, "jit_call: out of memory");
    goto done;
  }
  for (uint32_t k = 0; k < na; k++) p.a[k] = k < nk ? bufs[k] : bufs[na + k - nk];
  for (uint32_t k = 0; k < nc; k++) {
    p.r[k] = bufs[na + nc + k];
    memmove(bufs[na + k], bufs[nk + k], e->bufs[s->bufs[na + k]].bytes);
  }
  for (;;) {
    unsigned char go = 0; /* a bool is one byte */
    void *pr[1] = {&go};
    if ((st = exec_run(s->bodies[0], p.a, pr)) != JIT_OK || !go) break;
    if ((st = exec_run(b, p.a, p.r)) != JIT_OK) break;
    for (uint32_t k = 0; k < nc; k++) memcpy(bufs[na + k], p.r[k], e->bufs[s->bufs[na + k]].bytes);
  }
done:
  ptrs_free(&p);
  return st;
}
