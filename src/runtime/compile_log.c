/* compile_log.c: what a compile says on stderr when asked: $TJIT_LOG_COMPILES=1 one line per
 * compiled signature (its key, phase times, kernels, disk cache), $TJIT_EXPLAIN_CACHE_MISSES=1
 * one line per miss of a function that has compiled signatures, naming what differs from the
 * nearest of them (as jax_log_compiles and jax_explain_cache_misses). Each line is formatted
 * whole and written with one call, so lines from several threads do not interleave. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "runtime/exec.h"
#include "runtime/runtime.h"
#include "runtime/sharding.h"

static bool env_on(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

bool log_compiles_on(void) { return env_on("TJIT_LOG_COMPILES"); }
bool explain_misses_on(void) { return env_on("TJIT_EXPLAIN_CACHE_MISSES"); }

/* One arg of a key as the IR prints it: f32[64,256], with {mesh[x=2] "x,_"} when committed. */
static void put_arg(FILE *out, jit_dtype dt, int rank, const int64_t *dims, const jit_sharding *sh) {
  ir_type t = {0};
  t.dtype = dt;
  t.rank = (uint8_t)rank;
  for (int d = 0; d < rank; d++) t.dims[d] = dims[d];
  char buf[256];
  ir_format_type(&t, buf, sizeof buf);
  fputs(buf, out);
  if (sh) {
    char sb[256];
    sharding_format(sh, sb, sizeof sb);
    fprintf(out, "%s", sb);
  }
}

void sig_describe(const jit_sig *s, FILE *out) {
  fputc('(', out);
  for (int i = 0; i < s->n_args; i++) {
    const ir_type *t = &s->arg_types[i];
    if (i) fputs(", ", out);
    put_arg(out, t->dtype, t->rank, t->dims, s->arg_shardings ? s->arg_shardings[i] : NULL);
  }
  fputc(')', out);
  if (s->static_len) fprintf(out, " static %zu bytes", s->static_len);
}

/* Writes the text of a memstream as one line on stderr. */
static void emit(FILE *m, char **buf) {
  if (fclose(m) != 0 || !*buf) return;
  fputs(*buf, stderr);
  fflush(stderr);
  free(*buf);
}

void log_compile(const jit_fn *f, const jit_sig *s, const exec_stats *es) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) return;
  fprintf(m, "tjit: compiled %s sig%d ", f->name, s->index);
  sig_describe(s, m);
  if (s->spmd) fprintf(m, " over %d devices", s->spmd->mesh->n_devices);
  fprintf(m, ": trace %.3f ms, passes %.3f ms, codegen %.3f ms, llvm %.3f ms, load %.3f ms; "
             "%d kernel%s; ",
          s->trace_ms, s->passes_ms, es->codegen_ms, es->llvm_ms - es->load_ms, es->load_ms,
          es->n_kernels, es->n_kernels == 1 ? "" : "s");
  if (es->disk_cache_lookups == 0) fputs("no disk cache\n", m);
  else if (es->disk_cache_hits == es->disk_cache_lookups) fputs("disk cache hit\n", m);
  else if (es->disk_cache_hits == 0) fputs("disk cache miss\n", m);
  else fprintf(m, "disk cache %d of %d hit\n", es->disk_cache_hits, es->disk_cache_lookups);
  emit(m, &buf);
}

/* ---- explaining a miss -------------------------------------------------------------------------- */

static bool same_shape(const ir_type *t, const jit_array *a) {
  if (t->rank != a->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (t->dims[d] != a->shape[d]) return false;
  return true;
}

static const jit_sharding *cached_sharding(const jit_sig *s, int i) {
  return s->arg_shardings ? s->arg_shardings[i] : NULL;
}

/* Twice the number of parts of the key (each arg's dtype, shape and sharding, the static bytes)
   that differ, less one when the static bytes differ but not their length: of two signatures
   as far from the call, the one whose static args have the call's length is nearer. */
static int distance(const jit_sig *s, int n_args, jit_array *const *args, const void *st,
                    size_t st_len) {
  int n = 2 * (s->n_args != n_args);
  for (int i = 0; i < n_args && i < s->n_args; i++) {
    n += 2 * (s->arg_types[i].dtype != args[i]->dtype);
    n += 2 * !same_shape(&s->arg_types[i], args[i]);
    n += 2 * !sharding_equal(cached_sharding(s, i), args[i]->sharding);
  }
  if (s->static_len != st_len) n += 2;
  else if (st_len && memcmp(s->static_bytes, st, st_len) != 0) n += 1;
  return n;
}

static void put_shape(FILE *m, int rank, const int64_t *dims) {
  fputc('[', m);
  for (int d = 0; d < rank; d++) fprintf(m, "%s%lld", d ? "," : "", (long long)dims[d]);
  fputc(']', m);
}

static void put_sharding(FILE *m, const jit_sharding *sh) {
  if (!sh) {
    fputs("uncommitted", m);
    return;
  }
  char b[256];
  sharding_format(sh, b, sizeof b);
  fputs(b, m);
}

/* "; "-separated differences between the cached signature s and this call, old -> new. */
static void put_differences(FILE *m, const jit_sig *s, int n_args, jit_array *const *args,
                            const unsigned char *st, size_t st_len) {
  const char *sep = "";
  if (s->n_args != n_args) {
    fprintf(m, "number of args %d -> %d", s->n_args, n_args);
    sep = "; ";
  }
  for (int i = 0; i < n_args && i < s->n_args; i++) {
    const ir_type *t = &s->arg_types[i];
    const jit_array *a = args[i];
    if (t->dtype != a->dtype) {
      fprintf(m, "%sarg %d dtype %s -> %s", sep, i, jit_dtype_name(t->dtype),
              jit_dtype_name(a->dtype));
      sep = "; ";
    }
    if (!same_shape(t, a)) {
      fprintf(m, "%sarg %d shape ", sep, i);
      put_shape(m, t->rank, t->dims);
      fputs(" -> ", m);
      put_shape(m, a->rank, a->shape);
      sep = "; ";
    }
    if (!sharding_equal(cached_sharding(s, i), a->sharding)) {
      fprintf(m, "%sarg %d sharding ", sep, i);
      put_sharding(m, cached_sharding(s, i));
      fputs(" -> ", m);
      put_sharding(m, a->sharding);
      sep = "; ";
    }
  }
  if (s->static_len != st_len) {
    fprintf(m, "%sstatic args length %zu -> %zu bytes", sep, s->static_len, st_len);
  } else if (st_len && memcmp(s->static_bytes, st, st_len) != 0) {
    size_t k = 0;
    while (s->static_bytes[k] == st[k]) k++;
    fprintf(m, "%sstatic args byte %zu 0x%02x -> 0x%02x", sep, k, s->static_bytes[k], st[k]);
  }
}

void explain_miss(const jit_fn *f, jit_array *const *args, const void *static_args,
                  size_t static_len) {
  const sig_cache *c = &f->cache;
  if (c->n == 0) return; /* a first compile is no miss to explain */
  const jit_sig *best = NULL;
  int best_d = 0;
  for (int i = c->n - 1; i >= 0; i--) { /* of equally near ones, the latest compiled */
    int d = distance(c->order[i], f->n_args, args, static_args, static_len);
    if (!best || d < best_d) best = c->order[i], best_d = d;
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) return;
  fprintf(m, "tjit: cache miss for %s (%d signature%s compiled); nearest is sig%d: ", f->name, c->n,
          c->n == 1 ? "" : "s", best->index);
  put_differences(m, best, f->n_args, args, static_args, static_len);
  fputc('\n', m);
  emit(m, &buf);
}
