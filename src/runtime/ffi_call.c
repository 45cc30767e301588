/* ffi_call.c: ffi_cif preparation for compiled entries and host callbacks; the call paths only
 * fill a stack array of argument addresses and jump through ffi_call. */
#include "runtime/ffi_call.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

struct ffi_entry {
  ffi_cif cif;      /* read-only after ffi_prep_cif, so shared by concurrent callers */
  int n;
  ffi_type *types[]; /* n x &ffi_type_pointer; the cif points here */
};

struct ffi_host_fn {
  ffi_cif cif;
  int n;
  ffi_type *types[]; /* copy of the caller's argument types; the cif points here */
};

static jit_status prep_status(ffi_status s, const char *what) {
  if (s == FFI_OK) return JIT_OK;
  return jit_error(s == FFI_BAD_TYPEDEF ? JIT_EINVAL : JIT_EINTERNAL,
                   "%s: libffi cannot prepare this signature (ffi_prep_cif status %d)", what, (int)s);
}

jit_status ffi_entry_prepare(int n_ptr_args, ffi_entry **out) {
  *out = NULL;
  if (n_ptr_args < 0 || n_ptr_args > FFI_ENTRY_MAX_ARGS)
    return jit_error(JIT_EINVAL, "ffi_entry_prepare: %d pointer arguments (at most %d)", n_ptr_args,
                     FFI_ENTRY_MAX_ARGS);
  ffi_entry *e = malloc(sizeof *e + (size_t)n_ptr_args * sizeof e->types[0]);
  if (!e) return jit_error(JIT_ENOMEM, "ffi_entry_prepare: out of memory");
  e->n = n_ptr_args;
  for (int i = 0; i < n_ptr_args; i++) e->types[i] = &ffi_type_pointer;
  jit_status st = prep_status(
      ffi_prep_cif(&e->cif, FFI_DEFAULT_ABI, (unsigned)n_ptr_args, &ffi_type_void, e->types),
      "ffi_entry_prepare");
  if (st != JIT_OK) {
    free(e);
    return st;
  }
  *out = e;
  return JIT_OK;
}

void ffi_entry_free(ffi_entry *e) { free(e); }

int ffi_entry_n_args(const ffi_entry *e) { return e->n; }

void ffi_entry_call(const ffi_entry *e, void (*fn)(void), void *const *ptrs) {
  /* libffi wants the address of each argument's value; the values are the pointers in ptrs. */
  void *avalue[FFI_ENTRY_MAX_ARGS > 0 ? FFI_ENTRY_MAX_ARGS : 1];
  for (int i = 0; i < e->n; i++) avalue[i] = (void *)&ptrs[i];
  ffi_arg unused;
  /* ffi_call only reads the cif (libffi keeps per-call state on the stack). */
  ffi_call((ffi_cif *)&e->cif, fn, &unused, avalue);
}

jit_status ffi_host_fn_prepare(ffi_type *ret, int n_args, ffi_type *const *args,
                               ffi_host_fn **out) {
  *out = NULL;
  if (!ret || n_args < 0 || n_args > FFI_ENTRY_MAX_ARGS || (n_args > 0 && !args))
    return jit_error(JIT_EINVAL, "ffi_host_fn_prepare: bad signature (%d arguments, at most %d)",
                     n_args, FFI_ENTRY_MAX_ARGS);
  for (int i = 0; i < n_args; i++)
    if (!args[i] || args[i] == &ffi_type_void)
      return jit_error(JIT_EINVAL, "ffi_host_fn_prepare: argument %d has no type", i);
  ffi_host_fn *h = malloc(sizeof *h + (size_t)n_args * sizeof h->types[0]);
  if (!h) return jit_error(JIT_ENOMEM, "ffi_host_fn_prepare: out of memory");
  h->n = n_args;
  if (n_args > 0) memcpy(h->types, args, (size_t)n_args * sizeof h->types[0]);
  jit_status st = prep_status(
      ffi_prep_cif(&h->cif, FFI_DEFAULT_ABI, (unsigned)n_args, ret, h->types), "ffi_host_fn_prepare");
  if (st != JIT_OK) {
    free(h);
    return st;
  }
  *out = h;
  return JIT_OK;
}

void ffi_host_fn_free(ffi_host_fn *h) { free(h); }

void ffi_host_fn_call(const ffi_host_fn *h, void (*fn)(void), void *ret, void *const *args) {
  ffi_call((ffi_cif *)&h->cif, fn, ret, (void **)args);
}
