/* mpi_world.c: the shared contexts and main of the tests/mpi programs (mpi_world.h). */
#include "mpi_world.h"

#include <stdarg.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <mpi.h>
#include <stdio.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

int mw_rank, mw_ranks;
jit_ctx *mw_dist, *mw_ref, *mw_one;
static int opt = 3;

jit_ctx *mw_ctx(int distributed, int devices) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = devices;
  o.n_threads = 1;
  o.distributed = distributed;
  o.opt_level = opt;
  jit_ctx *c = NULL;
  if (jit_ctx_create(&o, &c) != JIT_OK) fail_msg("jit_ctx_create: %s", jit_last_error());
  return c;
}

int mw_main(const char *name, int opt_level, const struct CMUnitTest *tests, size_t n_tests) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.distributed = 1;
  o.opt_level = opt = opt_level;
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) return 1;
  /* the device count per rank depends on the rank count: a context of 1 device finds it */
  jit_ctx *probe = NULL;
  o.n_devices = 1;
  o.n_threads = 1;
  if (jit_ctx_create(&o, &probe) != JIT_OK) {
    fprintf(stderr, "%s: %s\n", name, jit_last_error());
    return 1;
  }
  mw_rank = jit_process_index(probe);
  mw_ranks = jit_process_count(probe);
  int failed = 1;
  if (MW_DEVICES % mw_ranks != 0) {
    fprintf(stderr, "%s: needs 1, 2 or 4 ranks\n", name);
  } else {
    o.n_devices = MW_DEVICES / mw_ranks;
    if (jit_ctx_create(&o, &mw_dist) == JIT_OK) {
      mw_ref = mw_ctx(0, MW_DEVICES);
      mw_one = mw_ctx(0, 1);
      failed = _cmocka_run_group_tests(name, tests, n_tests, NULL, NULL);
      jit_ctx_destroy(mw_one);
      jit_ctx_destroy(mw_ref);
      jit_ctx_destroy(mw_dist);
    } else {
      fprintf(stderr, "%s: %s\n", name, jit_last_error());
    }
  }
  /* a rank that failed must not leave the others waiting in MPI_Finalize */
  if (failed) MPI_Abort(MPI_COMM_WORLD, 1);
#ifdef __SANITIZE_ADDRESS__
  /* tjit's leaks, checked now (and not again at exit): MPI_Finalize unloads Open MPI's components,
     whose own leftovers LeakSanitizer could then neither attribute nor suppress */
  __lsan_do_leak_check();
#endif
  jit_ctx_destroy(probe); /* the last distributed context: finalizes MPI */
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized ? 0 : 1;
}
