/* optest.h: the harness of the end-to-end op tests: seeded data of any dtype held as doubles,
 * running a traced function through the public API, and comparing with double references. */
#ifndef TJIT_OPTEST_H
#define TJIT_OPTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tjit.h"

/* An array on the test's side: every value is held as a double that the dtype represents
   exactly (ints small enough, 16-bit floats already rounded), in row-major order. */
typedef struct ot_array {
  jit_dtype dt;
  int rank;
  int64_t shape[JIT_MAX_RANK];
  int64_t n;   /* number of elements */
  double *v;   /* n values (malloc'd; NULL when n == 0 or after ot_free) */
} ot_array;

/* ---- the shared context (cmocka group setup/teardown) ------------------------------------------ */
int ot_setup(void **state);
int ot_teardown(void **state);
jit_ctx *ot_ctx(void);
/* A context of its own (the caller destroys it): devices, threads, opt_level as given. */
jit_ctx *ot_ctx_with(int devices, int threads, int opt_level);
/* Whether ctx's dots run on the precompiled core (codegen/gemm_core.h), as the library decides it
   for ctx's target and this host (TJIT_CPU and TJIT_GEMM_CORE included): a probe dot's dump says
   so. */
bool ot_core_runs(jit_ctx *ctx);
/* An f32 array of uniform values in [-1, 1), the same for the same seed. */
jit_array *ot_f32_array(jit_ctx *ctx, int rank, const int64_t *shape, uint64_t seed);

/* ---- shapes and indices ------------------------------------------------------------------------ */
int64_t ot_numel(int rank, const int64_t *shape);
void ot_unravel(int64_t flat, int rank, const int64_t *shape, int64_t *idx);
int64_t ot_ravel(int rank, const int64_t *shape, const int64_t *idx);
/* NumPy broadcasting of two shapes; returns false when they do not broadcast. */
bool ot_bcast_shape(int ra, const int64_t *sa, int rb, const int64_t *sb, int *rank_out,
                    int64_t *shape_out);
/* The flat index in a of the element that broadcasts to idx of a result of rank `rank`. */
int64_t ot_bcast_src(const ot_array *a, int rank, const int64_t *idx);
/* "[2,0,3]" into buf (for messages). */
const char *ot_shape_str(int rank, const int64_t *shape, char *buf, size_t n);

/* ---- values ------------------------------------------------------------------------------------ */
/* v as dtype dt stores it: floats round to nearest even (overflow -> inf), ints truncate toward
   zero and wrap to their width, bool is v != 0. */
double ot_round(jit_dtype dt, double v);
bool ot_is_float(jit_dtype dt);
/* Smallest/largest finite value of an int dtype (for reduction identities). */
double ot_int_min(jit_dtype dt);
double ot_int_max(jit_dtype dt);

uint64_t ot_rng_next(uint64_t *state);
double ot_rng_uniform(uint64_t *state, double lo, double hi);

/* ---- arrays -------------------------------------------------------------------------------------- */
ot_array ot_zeros(jit_dtype dt, int rank, const int64_t *shape);
/* Floats: uniform in [lo, hi) rounded to dt; ints: uniform integers in [lo, hi]; bool: 0 or 1.
   The same seed gives the same values. */
ot_array ot_random(jit_dtype dt, int rank, const int64_t *shape, uint64_t seed, double lo,
                   double hi);
/* Given values (numel of them), each rounded to dt. */
ot_array ot_values(jit_dtype dt, int rank, const int64_t *shape, const double *vals);
void ot_free(ot_array *a);

/* Copies a into a new jit_array of the shared context (fails the test on error). */
jit_array *ot_upload(const ot_array *a);
jit_array *ot_upload_to(jit_ctx *ctx, const ot_array *a); /* into ctx instead */
/* Reads a jit_array back (fails the test on error). */
ot_array ot_download(const jit_array *a);

/* ---- running ------------------------------------------------------------------------------------- */
/* Uploads args, compiles fn (named name) with n_args/n_results, calls it (through jit_call_static
   when static_len > 0, else jit_call), downloads the results into results[0..n_results) and frees
   every handle it made. On failure the results are empty arrays and the status is returned. */
jit_status ot_run_static(const char *name, jit_trace_fn fn, void *user, const void *static_args,
                         size_t static_len, int n_args, const ot_array *args, int n_results,
                         ot_array *results);
jit_status ot_run(const char *name, jit_trace_fn fn, void *user, int n_args, const ot_array *args,
                  int n_results, ot_array *results);
/* ot_run compiled (results[0..n_results)) and on the interpreter, a context of opt_level 0
   (results[n_results..2 n_results)); fails the test on an error. */
void ot_run_both(const char *name, jit_trace_fn fn, void *user, int n_args, const ot_array *args,
                 int n_results, ot_array *results);
/* ot_run on ctx (e.g. one of opt_level 0, which runs the interpreter) */
jit_status ot_run_ctx(jit_ctx *ctx, const char *name, jit_trace_fn fn, void *user, int n_args,
                      const ot_array *args, int n_results, ot_array *results);

/* ot_run in context ctx (e.g. one of ot_ctx_with's: the interpreter at opt_level 0). */
jit_status ot_run_in(jit_ctx *ctx, const char *name, jit_trace_fn fn, void *user, int n_args,
                     const ot_array *args, int n_results, ot_array *results);

/* Fails the test with jit_last_error() when st is not JIT_OK. */
#define OT_ASSERT_OK(st) ot_assert_ok((st), #st, __FILE__, __LINE__)
void ot_assert_ok(jit_status st, const char *what, const char *file, int line);
/* jit_fn_dump(f, args, what) as a malloc'd string (free() it); fails the test on an error. */
char *ot_fn_dump(jit_fn *f, jit_array *const *args, unsigned what);

/* ---- comparing ----------------------------------------------------------------------------------- */
typedef struct ot_tol {
  double rtol, atol;
} ot_tol;
/* The default tolerance of a dtype: f64 1e-12 rel, f32 1e-6 rel + 1e-6 abs, f16/bf16 a few ulp
   of the format, ints and bool exact. */
ot_tol ot_tol_of(jit_dtype dt);

/* Compares got with the reference want (want.v holds exact double results; they are rounded to
   want.dt first, then got must have want's dtype and shape and each value must lie within
   atol + rtol * max(|ref|, mag[i]) of it, mag being NULL or a per-element magnitude such as the
   sum of |terms| of a reduction). NaN matches only NaN, infinities only themselves, and int/bool
   values must be exact. On a mismatch prints what, the first bad index, both values and the
   number of bad elements, and returns false. */
bool ot_close(const char *what, const ot_array *got, const ot_array *want, const double *mag,
              ot_tol tol);
bool ot_equal(const char *what, const ot_array *got, const ot_array *want); /* default tol */
/* ot_close / ot_equal, then frees got and want (so that a test can check many results first and
   assert once). */
bool ot_expect_tol(const char *what, ot_array *got, ot_array *want, const double *mag, ot_tol tol);
bool ot_expect(const char *what, ot_array *got, ot_array *want);

/* ---- errors -------------------------------------------------------------------------------------- */
/* True when jit_last_error() contains every one of the given non-NULL strings and, when line > 0,
   "file:line" (file e.g. "tests/test_errors.c"); prints the message otherwise. */
bool ot_error_has(const char *op, const char *file, int line);
bool ot_error_contains(const char *s);

#endif /* TJIT_OPTEST_H */
