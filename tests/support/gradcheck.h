/* gradcheck.h: checks jit_value_and_grad of a scalar loss against central finite differences. */
#ifndef TJIT_GRADCHECK_H
#define TJIT_GRADCHECK_H

#include "support/optest.h"

typedef struct ot_loss_fn {
  jit_trace_fn fn; /* args -> results[0], a scalar loss */
  void *user;
  int n_args;      /* <= 8 */
} ot_loss_fn;

/* A jit_trace_fn: jit_value_and_grad of the ot_loss_fn user with respect to all its args. */
void ot_value_and_grad_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user);

/* The value and every gradient of l at in (f64 arrays, n_args of them) against l itself,
   compiled, and its central differences (eps 1e-6, relative bound 1e-6); fails the test,
   naming name, on a mismatch. */
void ot_check_grad(const char *name, const ot_loss_fn *l, ot_array *in);

#endif /* TJIT_GRADCHECK_H */
