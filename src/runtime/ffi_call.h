/* ffi_call.h: libffi call sites prepared once: the typed C entry of a compiled signature
 * (all-pointer arguments) and host callbacks of any C signature; calls allocate nothing. */
#ifndef TJIT_RUNTIME_FFI_CALL_H
#define TJIT_RUNTIME_FFI_CALL_H

#include <ffi.h>

#include "tjit.h"

/* Arguments of an entry: the avalue array lives on the caller's stack, so it is bounded. */
#define FFI_ENTRY_MAX_ARGS 256

/* A prepared `void entry(void *p0, ..., void *p(n-1))`: for a compiled signature the params'
   data pointers, then the results' data pointers, then the runtime context pointer. Immutable
   after prepare, so one entry may be called from any number of threads at once. */
typedef struct ffi_entry ffi_entry;

/* n_ptr_args 0..FFI_ENTRY_MAX_ARGS, else JIT_EINVAL; JIT_ENOMEM; JIT_EINTERNAL if libffi
   refuses the signature. */
jit_status ffi_entry_prepare(int n_ptr_args, ffi_entry **out);
void ffi_entry_free(ffi_entry *e); /* NULL is a no-op */
int ffi_entry_n_args(const ffi_entry *e);
/* Calls fn(ptrs[0], ..., ptrs[n-1]) through the prepared cif; ptrs holds exactly n pointers. */
void ffi_entry_call(const ffi_entry *e, void (*fn)(void), void *const *ptrs);

/* A prepared call of any non-variadic C signature, for user host callbacks. The ffi_type
   pointers (libffi's ffi_type_sint32 etc., or the caller's struct types) must outlive it; the
   array itself is copied. Immutable after prepare, like ffi_entry. */
typedef struct ffi_host_fn ffi_host_fn;

/* n_args 0..FFI_ENTRY_MAX_ARGS, ret and every args[i] non-NULL (ret &ffi_type_void for none). */
jit_status ffi_host_fn_prepare(ffi_type *ret, int n_args, ffi_type *const *args,
                               ffi_host_fn **out);
void ffi_host_fn_free(ffi_host_fn *h); /* NULL is a no-op */
/* args[i] points at the i-th argument's value; ret at storage for the result of at least
   max(ret->size, sizeof(ffi_arg)) bytes (libffi widens small integral results), or NULL for void.
   A result of an integral type narrower than ffi_arg is read back through an ffi_arg. */
void ffi_host_fn_call(const ffi_host_fn *h, void (*fn)(void), void *ret, void *const *args);

#endif /* TJIT_RUNTIME_FFI_CALL_H */
