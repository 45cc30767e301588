/* dump.c: printing a compiled signature's IR at each stage: on request (jit_fn_dump) and, when
 * $TJIT_DUMP asks for it, for every new signature into $TJIT_DUMP_DIR (or stderr). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/runtime.h"

/* Stages in dump order: the bit, the name used in headers, file names and $TJIT_DUMP, and the
   dump file's extension. */
static const struct {
  unsigned bit;
  const char *name, *ext;
} stages[] = {
    {JIT_DUMP_TRACED, "traced", "tir"}, {JIT_DUMP_OPTIMIZED, "optimized", "tir"},
    {JIT_DUMP_PARTITIONED, "partitioned", "tir"}, {JIT_DUMP_FUSED, "fused", "txt"},
    {JIT_DUMP_C, "c", "c"}, {JIT_DUMP_LLVM, "llvm", "ll"},
};
enum { N_STAGES = sizeof stages / sizeof stages[0] };
#define DUMP_ALL 63u
#define DUMP_IMPLEMENTED DUMP_ALL
#define DUMP_CODEGEN (JIT_DUMP_FUSED | JIT_DUMP_C | JIT_DUMP_LLVM)

static const ir_func *stage_func(const jit_sig *s, unsigned bit) {
  return bit == JIT_DUMP_TRACED ? s->traced : s->optimized;
}

/* One stage's text: IR for the IR stages; kernels, C or LLVM IR (made afresh) for the others. */
static jit_status print_stage(const jit_fn *f, const jit_sig *s, unsigned bit, FILE *out) {
  /* a partitioned signature compiles its per-device program */
  if (bit & DUMP_CODEGEN) return exec_dump(f->ctx, s->spmd ? s->spmd->local : s->optimized, bit, out);
  if (bit == JIT_DUMP_PARTITIONED) {
    if (s->spmd) return ir_spmd_print(s->spmd, out);
    if (fputs("// not partitioned (no committed arg, no sharding constraint): one device runs\n", out) < 0)
      return jit_error(JIT_EIO, "jit_fn_dump: %s: write failed", f->name);
  }
  return ir_print(stage_func(s, bit), out);
}

jit_status dump_sig(const jit_fn *f, const jit_sig *s, unsigned what, FILE *out) {
  for (int i = 0; i < N_STAGES; i++) {
    if (!(what & stages[i].bit & DUMP_IMPLEMENTED)) continue;
    if (fprintf(out, "// @%s %s\n", f->name, stages[i].name) < 0)
      return jit_error(JIT_EIO, "jit_fn_dump: %s: write failed", f->name);
    jit_status st = print_stage(f, s, stages[i].bit, out);
    if (st != JIT_OK) return st;
  }
  return JIT_OK;
}

/* The most recent signature whose arg types match args. Static bytes are not compared: the dump
   API has no way to pass them, and the newest signature is the one a user just called. */
static const jit_sig *find_by_args(const jit_fn *f, jit_array *const *args) {
  for (int k = f->cache.n; k-- > 0;) {
    const jit_sig *s = f->cache.order[k];
    bool same = true;
    for (int i = 0; i < f->n_args && same; i++) {
      ir_type t;
      array_type(args[i], &t);
      same = ir_type_equal(&t, &s->arg_types[i]);
    }
    if (same) return s;
  }
  return NULL;
}

jit_status jit_fn_dump(jit_fn *f, jit_array *const *args, unsigned what, FILE *out) {
  if (!f) return jit_error(JIT_EINVAL, "jit_fn_dump: f is NULL");
  if (!out) return jit_error(JIT_EINVAL, "jit_fn_dump: %s: out is NULL", f->name);
  if (what & ~DUMP_ALL)
    return jit_error(JIT_EINVAL, "jit_fn_dump: %s: unknown stage bits 0x%x", f->name,
                     what & ~DUMP_ALL);
  /* Refuse before printing anything, so that a caller never gets half a dump. */
  for (int i = 0; i < N_STAGES; i++)
    if (what & stages[i].bit & ~DUMP_IMPLEMENTED)
      return jit_error(JIT_EUNSUPPORTED, "jit_fn_dump: %s: the %s dump is not implemented yet",
                       f->name, stages[i].name);
  if (args) {
    jit_status st = fn_check_args(f, args, "jit_fn_dump");
    if (st != JIT_OK) return st;
  }

  jit_status st = JIT_OK;
  pthread_mutex_lock(&f->mu);
  const jit_sig *s = NULL;
  if (args) {
    s = find_by_args(f, args);
    if (!s)
      st = jit_error(JIT_EINVAL, "jit_fn_dump: %s: no compiled signature for these args", f->name);
  } else if (f->cache.n == 0) {
    st = jit_error(JIT_EINVAL, "jit_fn_dump: %s: no compiled signature yet (call it first)",
                   f->name);
  } else {
    s = f->cache.order[f->cache.n - 1];
  }
  if (st == JIT_OK) st = dump_sig(f, s, what, out);
  pthread_mutex_unlock(&f->mu);
  return st;
}

/* Parses $TJIT_DUMP's comma list into stage bits. Names of stages that do not exist yet are
   accepted (so scripts written for later versions work) and ignored by the writers. */
static unsigned parse_dump_env(const char *spec) {
  unsigned what = 0;
  const char *p = spec;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    const char *e = p;
    while (*e && *e != ',') e++;
    size_t n = (size_t)(e - p);
    while (n && p[n - 1] == ' ') n--;
    for (int i = 0; i < N_STAGES; i++)
      if (strlen(stages[i].name) == n && strncmp(stages[i].name, p, n) == 0) what |= stages[i].bit;
    p = e;
  }
  return what;
}

/* mkdir -p; errors are left to the fopen that follows. */
static void make_dirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(path, 0777);
    *p = '/';
  }
  mkdir(path, 0777);
}

static void dump_file(const jit_fn *f, const jit_sig *s, const char *dir, int stage) {
  size_t n = strlen(dir) + strlen(f->name) + 64;
  char *path = malloc(n);
  if (!path) return;
  int len = snprintf(path, n, "%s/", dir);
  /* The function name becomes part of a file name: keep it to a safe alphabet. */
  for (const char *c = f->name; *c && (size_t)len < n - 1; c++) {
    bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-' || *c == '.';
    path[len++] = ok ? *c : '_';
  }
  snprintf(path + len, n - (size_t)len, ".sig%d.%s.%s", s->index, stages[stage].name,
           stages[stage].ext);
  FILE *out = fopen(path, "w");
  if (out) {
    print_stage(f, s, stages[stage].bit, out);
    fclose(out);
  }
  free(path);
}

void dump_env(const jit_fn *f, const jit_sig *s) {
  const char *spec = getenv("TJIT_DUMP");
  if (!spec || !*spec) return;
  unsigned what = parse_dump_env(spec) & DUMP_IMPLEMENTED;
  if (!what) return;
  /* Dumps are a side channel: whatever happens here must not change the call's status or error. */
  int saved_errno = errno;
  const char *dir = getenv("TJIT_DUMP_DIR");
  if (dir && *dir) {
    char *d = strdup(dir);
    if (d) {
      make_dirs(d);
      free(d);
    }
    for (int i = 0; i < N_STAGES; i++)
      if (what & stages[i].bit) dump_file(f, s, dir, i);
  } else {
    dump_sig(f, s, what, stderr);
  }
  errno = saved_errno;
}
