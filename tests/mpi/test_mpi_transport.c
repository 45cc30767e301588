/* test_mpi_transport.c: run by mpirun on 1, 2 or 4 ranks (ctest label mpi). A 4-device mesh is
 * spread over the ranks (rank r runs devices r*k .. r*k+k-1, k = 4 / ranks) and its collectives
 * go through the MPI transport; every device's result must equal, bit for bit, what one process
 * running all 4 devices through shared memory computes: every collective on every axis group,
 * and a compiled partitioned matmul whose contracted dim is split 4 ways (an all_reduce of 4
 * partial sums, where the order of a floating-point fold shows); and a collective that one rank
 * reaches late fails, past TJIT_COLLECTIVE_TIMEOUT_S, naming that rank instead of waiting; one
 * whose rank reports a failure instead ends at once with that rank's status and message. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/collectives.h"
#include "ir/mesh_spec.h"
#include "ir/passes/passes.h"
#include "runtime/exec.h"
#include "runtime/mpi_link.h"
#include "runtime/transport.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

enum { N_DEVICES = 4, ROWS = 4, COLS = 8, MAX_CASES = 64 };
enum { OUT_BYTES = N_DEVICES * ROWS * COLS * 8 }; /* room for any case's result */

static int my_rank, n_ranks;
static int process[N_DEVICES]; /* per device: the rank that runs it */

/* Values of many magnitudes and both signs, so that summing them in another order changes bits. */
static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static void fill(jit_dtype dt, void *dst, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = mix(&seed);
    if (dt == JIT_I32) ((int32_t *)dst)[i] = (int32_t)(r >> 33) - (1 << 30);
    else ((float *)dst)[i] = (float)((double)((int64_t)(r >> 40) - (1 << 23)) / 4096.0 *
                                     (double)(1u << (r & 15)));
  }
}

static ir_mesh mesh_of(int n_axes, const int64_t *sizes) {
  ir_mesh m;
  memset(&m, 0, sizeof m);
  m.n_axes = n_axes;
  for (int a = 0; a < n_axes; a++) {
    m.sizes[a] = sizes[a];
    snprintf(m.names[a], sizeof m.names[a], "%c", "xy"[a]);
  }
  return m;
}

/* ---- every collective, on every axis group ------------------------------------------------- */
typedef struct coll_case {
  ir_op op;
  ir_coll c;
  ir_type t; /* the operand's */
} coll_case;

static int make_cases(const ir_mesh *m, coll_case *cs) {
  int k = 0;
  for (unsigned mask = 1; mask < 1u << m->n_axes; mask++) {
    uint16_t n = (uint16_t)ir_mesh_group(m, mask);
    ir_type f = {.dtype = JIT_F32, .rank = 2, .dims = {ROWS, COLS}}, i = f;
    i.dtype = JIT_I32;
    ir_coll c = {.axes = (uint8_t)mask, .group = n};
    cs[k++] = (coll_case){IR_ALL_REDUCE, c, f};
    cs[k++] = (coll_case){IR_ALL_REDUCE, c, i};
    c.kind = IR_COLL_MAX;
    cs[k++] = (coll_case){IR_ALL_REDUCE, c, f};
    c.kind = IR_COLL_SUM;
    c.dim = 1;
    cs[k++] = (coll_case){IR_REDUCE_SCATTER, c, f};
    cs[k++] = (coll_case){IR_ALL_GATHER, c, f};
    cs[k++] = (coll_case){IR_SHARD_SLICE, c, f};
    c.dim2 = 0;
    cs[k++] = (coll_case){IR_ALL_TO_ALL, c, f};
    c.dim = 0;
    cs[k++] = (coll_case){IR_ALL_GATHER, c, i};
    c.shift = 1;
    cs[k++] = (coll_case){IR_COLLECTIVE_PERMUTE, c, f};
    cs[k++] = (coll_case){IR_AXIS_INDEX, c, f};
  }
  return k;
}

typedef struct coll_device {
  coll_transport *t;
  int d, n_cases;
  const coll_case *cs;
  unsigned char (*out)[OUT_BYTES]; /* per case */
  jit_status st;
  char msg[256];
} coll_device;

static void *run_cases(void *arg) {
  coll_device *r = arg;
  float in[ROWS * COLS];
  for (int k = 0; k < r->n_cases && r->st == JIT_OK; k++) {
    fill(r->cs[k].t.dtype, in, ROWS * COLS, (uint64_t)k * 131 + (uint64_t)r->d);
    r->st = coll_transport_run(r->t, r->d, r->cs[k].op, &r->cs[k].c, &r->cs[k].t, in, r->out[k]);
    if (r->st != JIT_OK) snprintf(r->msg, sizeof r->msg, "case %d: %s", k, jit_last_error());
  }
  return NULL;
}

/* fn(runs + d * stride) on a thread per device this process runs (all of them when all_here). */
static void on_devices(void *(*fn)(void *), void *runs, size_t stride, bool all_here) {
  pthread_t th[N_DEVICES];
  for (int d = 0; d < N_DEVICES; d++)
    if (all_here || process[d] == my_rank)
      assert_int_equal(pthread_create(&th[d], NULL, fn, (char *)runs + (size_t)d * stride), 0);
  for (int d = 0; d < N_DEVICES; d++)
    if (all_here || process[d] == my_rank) pthread_join(th[d], NULL);
}

/* Runs every case on the devices this process runs (all of them for the shared-memory t). */
static void run_all(coll_transport *t, bool all_here, const coll_case *cs, int n_cases,
                    unsigned char (*out)[MAX_CASES][OUT_BYTES]) {
  coll_device runs[N_DEVICES];
  for (int d = 0; d < N_DEVICES; d++)
    runs[d] = (coll_device){t, d, n_cases, cs, out[d], JIT_OK, ""};
  on_devices(run_cases, runs, sizeof runs[0], all_here);
  for (int d = 0; d < N_DEVICES; d++)
    if (runs[d].st != JIT_OK) fail_msg("rank %d device %d: %s", my_rank, d, runs[d].msg);
}

static void check_collectives(int n_axes, const int64_t *sizes) {
  ir_mesh m = mesh_of(n_axes, sizes);
  coll_case cs[MAX_CASES];
  int n_cases = make_cases(&m, cs);
  unsigned char(*want)[MAX_CASES][OUT_BYTES] = calloc(N_DEVICES, sizeof *want);
  unsigned char(*got)[MAX_CASES][OUT_BYTES] = calloc(N_DEVICES, sizeof *got);
  assert_non_null(want);
  assert_non_null(got);
  coll_transport *shm = NULL, *mpi = NULL;
  assert_int_equal(coll_transport_shm_new(&m, &shm), JIT_OK);
  run_all(shm, true, cs, n_cases, want);
  if (coll_transport_mpi_new(&m, process, &mpi) != JIT_OK) fail_msg("%s", jit_last_error());
  assert_string_equal(mpi->ops->name, "mpi");
  run_all(mpi, false, cs, n_cases, got);
  for (int d = 0; d < N_DEVICES; d++)
    for (int k = 0; k < n_cases && process[d] == my_rank; k++)
      if (memcmp(want[d][k], got[d][k], OUT_BYTES) != 0)
        fail_msg("rank %d of %d: device %d, case %d (%s over axes 0x%x): MPI result differs",
                 my_rank, n_ranks, d, k, ir_op_name[cs[k].op], cs[k].c.axes);
  coll_transport_free(shm);
  coll_transport_free(mpi);
  free(want);
  free(got);
}

static void test_collectives_line(void **state) {
  (void)state;
  check_collectives(1, (const int64_t[]){4});
}

static void test_collectives_grid(void **state) {
  (void)state;
  check_collectives(2, (const int64_t[]){2, 2});
}

/* ---- a partitioned matmul, compiled -------------------------------------------------------- */
static jit_ctx *ctx;

typedef struct mm_device {
  const exec *e;
  coll_transport *t;
  int d;
  const void *const *args;
  void *const *res;
  jit_status st;
  char msg[256];
} mm_device;

static jit_status hook(void *t, int pos, ir_op op, const ir_coll *c, const ir_type *in_t,
                       const void *in, void *out) {
  return coll_transport_run(t, pos, op, c, in_t, in, out);
}

static void *run_matmul(void *arg) {
  mm_device *r = arg;
  ir_device dev = {r->d, hook, r->t};
  const ir_device *saved = ir_set_thread_device(&dev);
  r->st = exec_run_device((exec *)r->e, r->d, N_DEVICES, r->args, NULL, r->res);
  if (r->st != JIT_OK) snprintf(r->msg, sizeof r->msg, "%s", jit_last_error());
  ir_set_thread_device(saved);
  return NULL;
}

static void run_matmul_devices(const exec *e, coll_transport *t, bool all_here,
                               const void *(*args)[2], void *(*res)[1]) {
  mm_device runs[N_DEVICES];
  for (int d = 0; d < N_DEVICES; d++) runs[d] = (mm_device){e, t, d, args[d], res[d], JIT_OK, ""};
  on_devices(run_matmul, runs, sizeof runs[0], all_here);
  for (int d = 0; d < N_DEVICES; d++)
    if (runs[d].st != JIT_OK) fail_msg("rank %d device %d: %s", my_rank, d, runs[d].msg);
}

static void check_matmul(const char *mesh_text, const char *a_spec, const char *b_spec) {
  static const char text[] = "func @mm(%0: f32[8,64], %1: f32[64,6]) -> f32[8,6] {\n"
                             "  %2 = dot %0, %1 contract=[1]x[0] : f32[8,6]\n"
                             "  return %2\n"
                             "}\n";
  ir_func **fs = NULL;
  uint32_t nf = 0;
  assert_int_equal(ir_parse(text, strlen(text), &fs, &nf), JIT_OK);
  ir_func *f = fs[0];
  free(fs);
  char sh_text[128];
  jit_sharding *sh[2] = {NULL, NULL};
  snprintf(sh_text, sizeof sh_text, "{%s \"%s\"}", mesh_text, a_spec);
  assert_int_equal(sharding_parse_text(sh_text, &(const char *){NULL}, &sh[0]), JIT_OK);
  assert_int_equal(sharding_parse(sh[0]->mesh, b_spec, "test", &sh[1]), JIT_OK);
  ir_spmd *p = NULL;
  if (ir_partition(f, sh[0]->mesh, sh, &p) != JIT_OK) fail_msg("partition: %s", jit_last_error());
  exec *e = NULL;
  exec_stats stats = {0};
  if (exec_build(ctx, p->local, &e, &stats) != JIT_OK) fail_msg("build: %s", jit_last_error());

  /* the global operands, the same on every rank, cut into each device's blocks */
  float a[8 * 64], b[64 * 6];
  fill(JIT_F32, a, 8 * 64, 7);
  fill(JIT_F32, b, 64 * 6, 8);
  const float *global[2] = {a, b};
  const void *args[N_DEVICES][2];
  void *want[N_DEVICES][1], *got[N_DEVICES][1];
  size_t res_bytes = (size_t)ir_type_numel(ir_type_of(p->local, p->local->results[0])) * 4;
  for (int d = 0; d < N_DEVICES; d++) {
    for (int i = 0; i < 2; i++) {
      const ir_type *g = ir_type_of(f, (ir_ref)i), *l = ir_type_of(p->local, (ir_ref)i);
      int64_t start[IR_MAX_RANK], size[IR_MAX_RANK];
      static const int64_t origin[IR_MAX_RANK];
      void *blk = malloc((size_t)ir_type_numel(l) * 4);
      assert_non_null(blk);
      sharding_shard_box(p->param_shardings[i], g->dims, d, start, size);
      sharding_copy_box(blk, size, origin, (const char *)global[i], g->dims, start, size, 2, 4);
      args[d][i] = blk;
    }
    want[d][0] = calloc(1, res_bytes);
    got[d][0] = calloc(1, res_bytes);
  }
  coll_transport *shm = NULL, *mpi = NULL;
  assert_int_equal(coll_transport_shm_new(p->local->mesh, &shm), JIT_OK);
  run_matmul_devices(e, shm, true, args, want);
  if (coll_transport_mpi_new(p->local->mesh, process, &mpi) != JIT_OK)
    fail_msg("%s", jit_last_error());
  run_matmul_devices(e, mpi, false, args, got);
  for (int d = 0; d < N_DEVICES; d++)
    if (process[d] == my_rank && memcmp(want[d][0], got[d][0], res_bytes) != 0)
      fail_msg("rank %d of %d: device %d's block of the matmul over %s differs", my_rank, n_ranks,
               d, mesh_text);
  for (int d = 0; d < N_DEVICES; d++) {
    free((void *)args[d][0]);
    free((void *)args[d][1]);
    free(want[d][0]);
    free(got[d][0]);
  }
  coll_transport_free(shm);
  coll_transport_free(mpi);
  exec_free(e);
  ir_spmd_free(p);
  sharding_unref(sh[0]);
  sharding_unref(sh[1]);
  ir_func_free(f);
}

static void test_matmul_contracted_4(void **state) {
  (void)state;
  check_matmul("mesh[x=4]", "_,x", "x,_");
}

static void test_matmul_grid(void **state) {
  (void)state;
  check_matmul("mesh[x=2,y=2]", "y,x", "x,_");
}

/* ---- a rank that never arrives at a collective -------------------------------------------------- */
typedef struct late_device {
  coll_transport *t;
  int d;
  bool late; /* sleeps past the timeout before the collective */
  jit_status st;
  char msg[512];
} late_device;

static void *run_late(void *arg) {
  late_device *r = arg;
  ir_type f = {.dtype = JIT_F32, .rank = 2, .dims = {ROWS, COLS}};
  ir_coll c = {.axes = 1, .group = N_DEVICES};
  float in[ROWS * COLS], out[ROWS * COLS];
  fill(JIT_F32, in, ROWS * COLS, (uint64_t)r->d);
  if (r->late) nanosleep(&(struct timespec){2, 500000000}, NULL); /* 2.5 s > 1 s */
  r->st = coll_transport_run(r->t, r->d, IR_ALL_REDUCE, &c, &f, in, out);
  snprintf(r->msg, sizeof r->msg, "%s", r->st == JIT_OK ? "" : jit_last_error());
  return NULL;
}

static void test_collective_timeout(void **state) {
  (void)state;
  if (n_ranks < 2) skip();
  ir_mesh m = mesh_of(1, (const int64_t[]){N_DEVICES});
  coll_transport *t = NULL;
  setenv("TJIT_COLLECTIVE_TIMEOUT_S", "1", 1);
  jit_status st = coll_transport_mpi_new(&m, process, &t);
  unsetenv("TJIT_COLLECTIVE_TIMEOUT_S");
  if (st != JIT_OK) fail_msg("%s", jit_last_error());
  int late = n_ranks - 1;
  late_device runs[N_DEVICES];
  for (int d = 0; d < N_DEVICES; d++)
    runs[d] = (late_device){t, d, process[d] == late, JIT_OK, ""};
  MPI_Barrier(MPI_COMM_WORLD);
  on_devices(run_late, runs, sizeof runs[0], false);
  char needle[64];
  snprintf(needle, sizeof needle, "waited 1 s for process %d, which has not arrived", late);
  /* the waiting ranks' group leaders name the late one; their other members learn it failed */
  for (int d = 0; d < N_DEVICES && my_rank != late; d++) {
    if (process[d] != my_rank) continue;
    if (runs[d].st == JIT_OK) fail_msg("rank %d device %d: no timeout", my_rank, d);
    if (d == my_rank * (N_DEVICES / n_ranks)) {
      if (runs[d].st != JIT_EIO || !strstr(runs[d].msg, needle))
        fail_msg("rank %d device %d: %s", my_rank, d, runs[d].msg);
      if (my_rank == 0) print_message("[rank 0] a late collective: %s\n", runs[d].msg);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  coll_transport_free(t);
}

/* The last rank fails before the collective and says so (what a distributed jit_call does when
   one of its devices fails): the others' waits end at once, well before the 60 s timeout, with
   its status and message. */
static void test_peer_failure(void **state) {
  (void)state;
  if (n_ranks < 2) skip();
  ir_mesh m = mesh_of(1, (const int64_t[]){N_DEVICES});
  mpi_link *l = NULL;
  coll_transport *t = NULL;
  setenv("TJIT_COLLECTIVE_TIMEOUT_S", "60", 1);
  jit_status st = mpi_link_open(&l);
  unsetenv("TJIT_COLLECTIVE_TIMEOUT_S");
  if (st != JIT_OK || coll_transport_mpi_new_link(&m, process, l, &t) != JIT_OK)
    fail_msg("%s", jit_last_error());
  mpi_link_next(l);
  int failing = n_ranks - 1;
  late_device runs[N_DEVICES];
  for (int d = 0; d < N_DEVICES; d++) runs[d] = (late_device){t, d, false, JIT_OK, ""};
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (my_rank == failing) mpi_link_report_failure(l, JIT_ECOMPILE, "a kernel of device 3 failed");
  else on_devices(run_late, runs, sizeof runs[0], false);
  double waited = MPI_Wtime() - t0;
  char needle[64];
  snprintf(needle, sizeof needle, "process %d failed: a kernel of device 3 failed", failing);
  int lead = my_rank * (N_DEVICES / n_ranks);
  if (my_rank != failing) {
    if (runs[lead].st != JIT_ECOMPILE || !strstr(runs[lead].msg, needle))
      fail_msg("rank %d device %d: %s", my_rank, lead, runs[lead].msg);
    if (waited > 30) fail_msg("rank %d waited %.1f s for a failure already reported", my_rank, waited);
    if (my_rank == 0) print_message("[rank 0] a peer's failure: %s\n", runs[lead].msg);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  coll_transport_free(t);
  mpi_link_close(l);
}

int main(void) {
  int level = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level) != MPI_SUCCESS) return 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n_ranks);
  int failed = 1;
  if (level < MPI_THREAD_MULTIPLE || N_DEVICES % n_ranks != 0) {
    fprintf(stderr, "test_mpi_transport: needs MPI_THREAD_MULTIPLE and 1, 2 or 4 ranks\n");
  } else if (jit_ctx_create(NULL, &ctx) == JIT_OK) {
    for (int d = 0; d < N_DEVICES; d++) process[d] = d / (N_DEVICES / n_ranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collectives_line),
        cmocka_unit_test(test_collectives_grid),
        cmocka_unit_test(test_matmul_contracted_4),
        cmocka_unit_test(test_matmul_grid),
        cmocka_unit_test(test_collective_timeout),
        cmocka_unit_test(test_peer_failure),
    };
    failed = cmocka_run_group_tests(tests, NULL, NULL);
    jit_ctx_destroy(ctx);
  }
#ifdef __SANITIZE_ADDRESS__
  /* tjit's leaks, checked now (and not again at exit): MPI_Finalize unloads Open MPI's components,
     whose own leftovers LeakSanitizer could then neither attribute nor suppress */
  __lsan_do_leak_check();
#endif
  /* a rank that failed must not leave the others waiting in MPI_Finalize */
  if (failed) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
  return 0;
}
