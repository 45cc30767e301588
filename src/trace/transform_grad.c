/* transform_grad.c: jit_value_and_grad and jit_checkpoint's entry points: check the request,
 * trace fn into a sub-function, then splice its derivative (src/ir/passes/grad.c) or its
 * checkpointed copy into the caller. */
#include <stdlib.h>

#include "ir/passes/passes.h"
#include "trace/subtrace.h"

/* The results value_and_grad hands back: loss, aux..., one gradient per wrt bit within n_args. */
static int grad_result_count(int n_args, uint64_t wrt_mask, int n_aux) {
  uint64_t mask = n_args <= 0    ? 0
                  : n_args >= 64 ? wrt_mask
                                 : wrt_mask & ((UINT64_C(1) << n_args) - 1);
  int n = 1 + (n_aux > 0 ? n_aux : 0);
  for (; mask; mask &= mask - 1) n++;
  return n;
}

static bool check_grad_request(op_ctx *c, jit_trace_fn fn, int n_args, const jit_val *args,
                               uint64_t wrt_mask, int n_aux, const jit_val *results) {
  if (!fn) return op_fail(c, JIT_EINVAL, "fn is NULL"), false;
  if (!results) return op_fail(c, JIT_EINVAL, "results is NULL"), false;
  if (n_args < 0 || n_aux < 0)
    return op_fail(c, JIT_EINVAL, "negative count (n_args %d, n_aux %d)", n_args, n_aux), false;
  if (n_args > 0 && !args) return op_fail(c, JIT_EINVAL, "args is NULL (n_args = %d)", n_args), false;
  if (!wrt_mask)
    return op_fail(c, JIT_EINVAL, "wrt_mask is 0: no argument to differentiate with respect to"),
           false;
  if (n_args < 64 && wrt_mask >> n_args) {
    int bit = 63;
    while (!(wrt_mask >> bit & 1)) bit--;
    return op_fail(c, JIT_EINVAL, "wrt_mask %#llx selects argument %d, but n_args is %d",
                   (unsigned long long)wrt_mask, bit, n_args),
           false;
  }
  return true;
}

void jit_value_and_grad(jit_trace *t, jit_trace_fn fn, void *user, int n_args, const jit_val *args,
                        uint64_t wrt_mask, int n_aux, jit_val *results) {
  op_ctx c;
  ir_func *body = NULL;
  ir_ref *refs = NULL, *out = NULL;
  ir_type *types = NULL;
  int n_out = grad_result_count(n_args, wrt_mask, n_aux);
  if (results)
    for (int i = 0; i < n_out; i++) results[i] = (jit_val){0};
  if (!op_begin(t, "value_and_grad", &c)) return;
  if (!check_grad_request(&c, fn, n_args, args, wrt_mask, n_aux, results)) return;
  size_t na = n_args ? (size_t)n_args : 1;
  refs = malloc(na * sizeof *refs);
  types = malloc(na * sizeof *types);
  out = malloc((size_t)n_out * sizeof *out);
  if (!refs || !types || !out) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  if (subtrace_args(&c, n_args, args, refs, types) != JIT_OK) goto done;
  for (int i = 0; i < n_args && i < 64; i++)
    if ((wrt_mask >> i & 1) && !ir_dtype_is_float(types[i].dtype) &&
        !ir_dtype_is_complex(types[i].dtype)) {
      op_fail(&c, JIT_EDTYPE, "argument %d is %s: only float and complex arguments have gradients", i,
              trace_ty(&types[i]).s);
      goto done;
    }
  if (subtrace(&c, fn, user, n_args, types, 1 + n_aux, &body) != JIT_OK) goto done;
  const ir_type *loss = ir_type_of(body, body->results[0]);
  if (loss->rank != 0) {
    op_fail(&c, JIT_ESHAPE, "the loss (result 0) must be a scalar, got %s", trace_ty(loss).s);
    goto done;
  }
  if (!ir_dtype_is_float(loss->dtype)) {
    op_fail(&c, JIT_EDTYPE, "the loss (result 0) must be a float scalar, got %s",
            trace_ty(loss).s);
    goto done;
  }
  jit_status st = ir_value_and_grad_into(t->f, body, refs, wrt_mask, (uint32_t)n_aux, out, c.loc);
  if (st != JIT_OK) op_fail(&c, st, "%s", jit_last_error());
done:
  subtrace_results(&c, n_out, out, results);
  ir_func_free(body);
  free(refs);
  free(types);
  free(out);
}

/* Checkpoint: fn is inlined, and its instructions other than its results get a fresh remat tag
   (grad.c recomputes tagged values in the backward pass instead of keeping them). fn's own tags
   (nested checkpoints, recomputations of a grad inside fn) are offset past the caller's, so
   that they stay distinct from every tag already in the caller. */
static void tag_region(ir_func *f, uint32_t first, uint32_t base, uint32_t tag, int n_results,
                       const ir_ref *results) {
  for (uint32_t r = first; r < f->n_ins; r++) {
    ir_attr *a = &f->ins[r].attr;
    if (a->remat) {
      a->remat += base;
      continue;
    }
    bool is_result = false;
    for (int k = 0; k < n_results && !is_result; k++) is_result = results[k] == r;
    if (!is_result) a->remat = tag;
  }
}

void jit_checkpoint(jit_trace *t, jit_trace_fn fn, void *user, int n_args, const jit_val *args,
                    int n_results, jit_val *results) {
  op_ctx c;
  ir_func *body = NULL;
  ir_ref *refs = NULL, *out = NULL;
  ir_type *types = NULL;
  if (results)
    for (int i = 0; i < n_results; i++) results[i] = (jit_val){0};
  if (!op_begin(t, "checkpoint", &c)) return;
  if (!subtrace_check_call(&c, fn, n_args, args, n_results, results)) return;
  size_t na = n_args ? (size_t)n_args : 1, nr = n_results ? (size_t)n_results : 1;
  refs = malloc(na * sizeof *refs);
  types = malloc(na * sizeof *types);
  out = malloc(nr * sizeof *out);
  if (!refs || !types || !out) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  if (subtrace_args(&c, n_args, args, refs, types) != JIT_OK) goto done;
  if (subtrace(&c, fn, user, n_args, types, n_results, &body) != JIT_OK) goto done;
  uint32_t first = t->f->n_ins, base = ir_remat_max_tag(t->f), inner = ir_remat_max_tag(body);
  if (base > UINT32_MAX - inner - 1) {
    op_fail(&c, JIT_EUNSUPPORTED, "too many checkpointed regions");
    goto done;
  }
  if (subtrace_inline(&c, body, refs, out) != JIT_OK) goto done;
  tag_region(t->f, first, base, base + inner + 1, n_results, out);
done:
  subtrace_results(&c, n_results, out, results);
  ir_func_free(body);
  free(refs);
  free(types);
  free(out);
}
