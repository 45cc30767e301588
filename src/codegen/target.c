/* target.c: which CPU and vector width codegen targets. The host's by default; TJIT_CPU names an
 * x86-64 CPU or psABI level, TJIT_VECTOR_WIDTH narrows the vectors. Named CPUs are checked
 * against the host before any code is generated for them: code for a CPU this host cannot run
 * would die of SIGILL on its first call. */
#include "codegen/target.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/TargetMachine.h>

#include "runtime/error.h"

/* LLVM's feature names each psABI level requires (x86-64-v2..v4, as LLVM 19 defines them). */
#define V2 "cx16,popcnt,sse4.2,ssse3,sahf"
#define V3 V2 ",avx,avx2,bmi,bmi2,f16c,fma,lzcnt,movbe,xsave"
#define V4 V3 ",avx512f,avx512bw,avx512cd,avx512dq,avx512vl"
#define ICL V4 ",avx512vnni,avx512ifma,avx512vbmi,avx512vbmi2,avx512bitalg,avx512vpopcntdq,gfni"
#define SPR ICL ",avx512bf16,avx512fp16,amx-tile,amx-bf16,amx-int8"

/* The CPUs TJIT_CPU accepts: LLVM 19's names for the x86-64 cores of the last decade and the
   psABI levels. `needs` lists the features generated code may use that the host must have
   (the vector ISA: what a loop or a matmul can be lowered to); the rest of a CPU's features
   (aes, sha, ...) never appear in tjit's kernels. Checked against `llc -mcpu=NAME` on
   2026-11-25: zmm registers exactly for the v4 rows, vdpbf16ps exactly where bf16 is set,
   tdpbf16ps exactly where amx is set. */
static const struct cpu_row {
  const char *name;
  int max_vector_bytes;
  const char *needs;
} cpus[] = {
    {"x86-64", 16, "sse2"},
    {"x86-64-v2", 16, V2},
    {"x86-64-v3", 32, V3},
    {"x86-64-v4", 64, V4},
    {"nehalem", 16, V2},
    {"westmere", 16, V2},
    {"sandybridge", 32, V2 ",avx"},
    {"ivybridge", 32, V2 ",avx,f16c"},
    {"haswell", 32, V3},
    {"broadwell", 32, V3},
    {"skylake", 32, V3},
    {"alderlake", 32, V3 ",avxvnni"},
    {"raptorlake", 32, V3 ",avxvnni"},
    {"meteorlake", 32, V3 ",avxvnni"},
    {"arrowlake", 32, V3 ",avxvnni"},
    {"lunarlake", 32, V3 ",avxvnni"},
    {"gracemont", 32, V3 ",avxvnni"},
    {"sierraforest", 32, V3 ",avxvnni"},
    {"znver1", 32, V3},
    {"znver2", 32, V3},
    {"znver3", 32, V3},
    {"skylake-avx512", 64, V4},
    {"cascadelake", 64, V4 ",avx512vnni"},
    {"cooperlake", 64, V4 ",avx512vnni,avx512bf16"},
    {"cannonlake", 64, V4 ",avx512ifma,avx512vbmi"},
    {"icelake-client", 64, ICL},
    {"icelake-server", 64, ICL},
    {"tigerlake", 64, ICL},
    {"rocketlake", 64, ICL},
    {"sapphirerapids", 64, SPR},
    {"emeraldrapids", 64, SPR},
    {"graniterapids", 64, SPR ",amx-fp16"},
    {"znver4", 64, ICL ",avx512bf16"},
    {"znver5", 64, ICL ",avx512bf16"},
};

static char *host_cpu, *host_features;
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

/* The host's name and features, asked of LLVM once per process (they cannot change). */
static void read_host(void) {
  host_cpu = LLVMGetHostCPUName();
  host_features = LLVMGetHostCPUFeatures();
}

/* A feature is on when its name appears with a '+' as a whole item of the list. */
static bool has_feature(const char *list, const char *name, size_t n) {
  for (const char *p = list; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n + 1 && p[0] == '+' && memcmp(p + 1, name, n) == 0) return true;
    p = end ? end + 1 : NULL;
  }
  return false;
}

/* The first feature of NEEDS (comma separated) the host lacks, copied into MISSING; false when
   the host has them all. */
static bool host_lacks(const char *needs, char *missing, size_t n) {
  pthread_once(&host_once, read_host);
  for (const char *p = needs; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (!has_feature(host_features, p, len)) {
      snprintf(missing, n, "%.*s", (int)len, p);
      return true;
    }
    p = end ? end + 1 : p + len;
  }
  return false;
}

static const struct cpu_row *find_cpu(const char *name) {
  for (size_t i = 0; i < sizeof cpus / sizeof cpus[0]; i++)
    if (strcmp(cpus[i].name, name) == 0) return &cpus[i];
  return NULL;
}

static void host_target(cg_target *t) {
  pthread_once(&host_once, read_host);
  snprintf(t->cpu, sizeof t->cpu, "%s", host_cpu ? host_cpu : "generic");
  t->is_host = true;
  const char *f = host_features;
  /* AVX10/256 parts have avx512f without 512-bit registers (LLVM's -evex512) */
  if (has_feature(f, "avx512f", 7) && !strstr(f, "-evex512")) t->max_vector_bytes = 64;
  else if (has_feature(f, "avx", 3)) t->max_vector_bytes = 32;
  else t->max_vector_bytes = 16;
  t->fma = has_feature(f, "fma", 3);
  t->bf16_dot = has_feature(f, "avx512bf16", 10);
  t->amx_bf16 = has_feature(f, "amx-bf16", 8) && has_feature(f, "amx-tile", 8);
}

jit_status cg_target_resolve(const char *cpu, int vector_bits, cg_target *out) {
  memset(out, 0, sizeof *out);
  if (!cpu || !*cpu || strcmp(cpu, "host") == 0) {
    host_target(out);
  } else {
    const struct cpu_row *r = find_cpu(cpu);
    if (!r) {
      char known[1024] = "";
      size_t used = 0;
      for (size_t i = 0; i < sizeof cpus / sizeof cpus[0] && used < sizeof known; i++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? " " : "", cpus[i].name);
      return jit_error(JIT_EINVAL, "TJIT_CPU='%s' is not a CPU tjit knows; use host or one of: %s",
                       cpu, known);
    }
    char missing[32];
    if (host_lacks(r->needs, missing, sizeof missing))
      return jit_error(JIT_EINVAL,
                       "TJIT_CPU='%s' needs %s, which this host (%s) lacks: its code could not run here",
                       cpu, missing, host_cpu ? host_cpu : "unknown");
    snprintf(out->cpu, sizeof out->cpu, "%s", r->name);
    out->max_vector_bytes = r->max_vector_bytes;
    out->fma = strstr(r->needs, ",fma") != NULL;
    out->bf16_dot = strstr(r->needs, "avx512bf16") != NULL;
    out->amx_bf16 = strstr(r->needs, "amx-bf16") != NULL;
  }
  out->vector_bytes = out->max_vector_bytes;
  if (vector_bits) {
    if (vector_bits != 128 && vector_bits != 256 && vector_bits != 512)
      return jit_error(JIT_EINVAL, "TJIT_VECTOR_WIDTH=%d: must be 128, 256 or 512", vector_bits);
    if (vector_bits / 8 > out->max_vector_bytes)
      return jit_error(JIT_EINVAL, "TJIT_VECTOR_WIDTH=%d: %s has %d-bit vectors at most",
                       vector_bits, out->cpu, out->max_vector_bytes * 8);
    out->vector_bytes = vector_bits / 8;
  }
  /* vdpbf16ps and AMX work on 512-bit registers and tiles: a narrower choice goes through f32 */
  if (out->vector_bytes < 64) out->bf16_dot = out->amx_bf16 = false;
  return JIT_OK;
}

jit_status cg_target_from_env(cg_target *out) {
  const char *w = getenv("TJIT_VECTOR_WIDTH");
  int bits = 0;
  if (w && *w) {
    char *end = NULL;
    errno = 0;
    long v = strtol(w, &end, 10);
    if (!isdigit((unsigned char)*w) || *end || errno || v <= 0 || v > 4096)
      return jit_error(JIT_EINVAL, "TJIT_VECTOR_WIDTH='%s': must be 128, 256 or 512", w);
    bits = (int)v;
  }
  return cg_target_resolve(getenv("TJIT_CPU"), bits, out);
}

const char *cg_target_features(const cg_target *t) {
  pthread_once(&host_once, read_host);
  return t->is_host && host_features ? host_features : "";
}

void cg_target_describe(const cg_target *t, char *buf, int n) {
  char extra[32] = "";
  if (t->bf16_dot || t->amx_bf16)
    snprintf(extra, sizeof extra, ", bf16 dot%s", t->amx_bf16 ? " + AMX" : "");
  snprintf(buf, (size_t)n, "%s, %d-bit vectors%s%s", t->cpu, t->vector_bytes * 8, extra,
           t->is_host ? " (host)" : "");
}

bool cg_target_runs_here(const char *name) {
  if (!name || !*name || strcmp(name, "host") == 0) return true;
  const struct cpu_row *r = find_cpu(name);
  char missing[32];
  return r && !host_lacks(r->needs, missing, sizeof missing);
}
