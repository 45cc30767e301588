/* test_target.c: choosing the codegen target (src/codegen/target.c). What the host's target says
 * is checked against /proc/cpuinfo's flags, never against one vendor's CPU, so the same test
 * holds on Zen 3, Zen 5 and Sapphire Rapids; named CPUs the host cannot run are refused with a
 * message naming the missing feature; TJIT_CPU / TJIT_VECTOR_WIDTH are parsed strictly. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "codegen/target.h"
#include "tjit.h"

static char cpu_flags[8192];

/* The "flags" line of the first processor in /proc/cpuinfo, padded with spaces for whole-word
   search. */
static int read_flags(void **state) {
  (void)state;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return -1;
  char line[8192];
  cpu_flags[0] = '\0';
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "flags", 5) == 0) {
      char *c = strchr(line, ':');
      if (c) snprintf(cpu_flags, sizeof cpu_flags, " %s", c + 1);
      cpu_flags[strcspn(cpu_flags, "\n")] = ' ';
      break;
    }
  fclose(f);
  return cpu_flags[0] ? 0 : -1;
}

static bool host_has(const char *flag) {
  char word[64];
  snprintf(word, sizeof word, " %s ", flag);
  return strstr(cpu_flags, word) != NULL;
}

static void expect_einval(jit_status st, const char *fragment) {
  assert_int_equal(st, JIT_EINVAL);
  if (!strstr(jit_last_error(), fragment)) fail_msg("'%s' lacks '%s'", jit_last_error(), fragment);
}

static void test_host_target_follows_cpuinfo(void **state) {
  (void)state;
  cg_target t;
  assert_int_equal(cg_target_resolve(NULL, 0, &t), JIT_OK);
  assert_true(t.is_host);
  int widest = host_has("avx512f") ? 64 : host_has("avx") ? 32 : 16;
  /* AVX10/256 parts report avx512f with 256-bit registers only: accept the narrower answer */
  if (widest == 64 && t.max_vector_bytes == 32) widest = 32;
  assert_int_equal(t.max_vector_bytes, widest);
  assert_int_equal(t.vector_bytes, t.max_vector_bytes);
  assert_int_equal(t.fma, host_has("fma"));
  assert_int_equal(t.bf16_dot, t.vector_bytes == 64 && host_has("avx512_bf16"));
  assert_int_equal(t.amx_bf16, t.vector_bytes == 64 && host_has("amx_bf16") && host_has("amx_tile"));

  cg_target same;
  assert_int_equal(cg_target_resolve("host", 0, &same), JIT_OK);
  assert_string_equal(same.cpu, t.cpu);
  assert_int_equal(same.vector_bytes, t.vector_bytes);
}

static void test_host_width_narrowed(void **state) {
  (void)state;
  cg_target t;
  assert_int_equal(cg_target_resolve(NULL, 128, &t), JIT_OK);
  assert_int_equal(t.vector_bytes, 16);
  assert_false(t.bf16_dot); /* vdpbf16ps needs the 512-bit registers */
  assert_false(t.amx_bf16);
  char d[128];
  cg_target_describe(&t, d, sizeof d);
  assert_non_null(strstr(d, "128-bit vectors"));
  assert_non_null(strstr(d, "(host)"));
}

static void test_psabi_levels(void **state) {
  (void)state;
  cg_target t;
  /* every x86-64 host this project runs on has v2 */
  assert_true(cg_target_runs_here("x86-64-v2"));
  assert_int_equal(cg_target_resolve("x86-64-v2", 0, &t), JIT_OK);
  assert_false(t.is_host);
  assert_string_equal(t.cpu, "x86-64-v2");
  assert_int_equal(t.max_vector_bytes, 16);
  assert_false(t.fma);
  assert_string_equal(cg_target_features(&t), ""); /* a named CPU: LLVM's defaults for it */
  expect_einval(cg_target_resolve("x86-64-v2", 256, &t), "128-bit vectors at most");

  bool v3 = host_has("avx2") && host_has("fma") && host_has("bmi2");
  assert_int_equal(cg_target_runs_here("x86-64-v3"), v3);
  if (v3) {
    assert_int_equal(cg_target_resolve("x86-64-v3", 0, &t), JIT_OK);
    assert_int_equal(t.vector_bytes, 32);
    assert_true(t.fma);
    expect_einval(cg_target_resolve("x86-64-v3", 512, &t), "256-bit vectors at most");
  }
  bool v4 = v3 && host_has("avx512f") && host_has("avx512bw") && host_has("avx512vl") &&
            host_has("avx512dq") && host_has("avx512cd");
  assert_int_equal(cg_target_runs_here("x86-64-v4"), v4);
  if (v4) {
    assert_int_equal(cg_target_resolve("x86-64-v4", 0, &t), JIT_OK);
    assert_int_equal(t.vector_bytes, 64);
    assert_int_equal(cg_target_resolve("x86-64-v4", 256, &t), JIT_OK);
    assert_int_equal(t.vector_bytes, 32);
    assert_int_equal(t.max_vector_bytes, 64);
  } else {
    /* the message names what the host lacks, so that the user knows why */
    expect_einval(cg_target_resolve("x86-64-v4", 0, &t), "which this host");
  }
}

static void test_named_cpus(void **state) {
  (void)state;
  cg_target t;
  bool spr = cg_target_runs_here("sapphirerapids");
  if (spr) {
    assert_int_equal(cg_target_resolve("sapphirerapids", 0, &t), JIT_OK);
    assert_true(t.bf16_dot);
    assert_true(t.amx_bf16);
    char d[128];
    cg_target_describe(&t, d, sizeof d);
    assert_string_equal(d, "sapphirerapids, 512-bit vectors, bf16 dot + AMX");
    assert_int_equal(cg_target_resolve("sapphirerapids", 256, &t), JIT_OK);
    assert_false(t.bf16_dot);
  } else {
    assert_false(host_has("amx_bf16") && host_has("avx512_bf16") && host_has("avx512_fp16") &&
                 host_has("avx512vbmi2") && host_has("amx_tile") && host_has("amx_int8"));
    expect_einval(cg_target_resolve("sapphirerapids", 0, &t), "TJIT_CPU='sapphirerapids' needs");
  }
  if (cg_target_runs_here("haswell")) {
    assert_int_equal(cg_target_resolve("haswell", 0, &t), JIT_OK);
    assert_int_equal(t.max_vector_bytes, 32);
    assert_false(t.bf16_dot);
  }
}

static void test_bad_names_and_widths(void **state) {
  (void)state;
  cg_target t;
  expect_einval(cg_target_resolve("pentium9", 0, &t), "not a CPU tjit knows");
  assert_non_null(strstr(jit_last_error(), "x86-64-v3")); /* the message lists what is known */
  expect_einval(cg_target_resolve("x86-64-V2", 0, &t), "not a CPU"); /* names are exact */
  expect_einval(cg_target_resolve(NULL, 384, &t), "must be 128, 256 or 512");
  expect_einval(cg_target_resolve(NULL, -256, &t), "must be 128, 256 or 512");
  assert_false(cg_target_runs_here("pentium9"));
  assert_true(cg_target_runs_here("host"));
  assert_true(cg_target_runs_here(NULL));
}

static void test_env_parsing(void **state) {
  (void)state;
  cg_target t;
  const char *bad[] = {"256x", "abc", "-128", "0x100", " 256", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("TJIT_VECTOR_WIDTH", bad[i], 1);
    expect_einval(cg_target_from_env(&t), "TJIT_VECTOR_WIDTH=");
  }
  setenv("TJIT_VECTOR_WIDTH", "", 1); /* empty: the default */
  setenv("TJIT_CPU", "x86-64-v2", 1);
  assert_int_equal(cg_target_from_env(&t), JIT_OK);
  assert_int_equal(t.vector_bytes, 16);
  setenv("TJIT_VECTOR_WIDTH", "128", 1);
  assert_int_equal(cg_target_from_env(&t), JIT_OK);
  assert_string_equal(t.cpu, "x86-64-v2");
  unsetenv("TJIT_VECTOR_WIDTH");
  unsetenv("TJIT_CPU");
}

/* The choice reaches the public API: jit_ctx_create refuses a bad setting with the message,
   jit_ctx_target says what was chosen. */
static void test_context_reports_target(void **state) {
  (void)state;
  jit_ctx_opts o = jit_ctx_opts_default();
  jit_ctx *ctx = NULL;
  setenv("TJIT_CPU", "no-such-cpu", 1);
  expect_einval(jit_ctx_create(&o, &ctx), "TJIT_CPU='no-such-cpu'");
  assert_null(ctx);
  setenv("TJIT_CPU", "x86-64-v2", 1);
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  assert_string_equal(jit_ctx_target(ctx), "x86-64-v2, 128-bit vectors");
  jit_ctx_destroy(ctx);
  unsetenv("TJIT_CPU");
  ctx = NULL;
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  assert_non_null(strstr(jit_ctx_target(ctx), "(host)"));
  jit_ctx_destroy(ctx);
}

int main(void) {
  unsetenv("TJIT_CPU"); /* the per-target ctest runs set these for other tests, never this one */
  unsetenv("TJIT_VECTOR_WIDTH");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_host_target_follows_cpuinfo),
      cmocka_unit_test(test_host_width_narrowed),
      cmocka_unit_test(test_psabi_levels),
      cmocka_unit_test(test_named_cpus),
      cmocka_unit_test(test_bad_names_and_widths),
      cmocka_unit_test(test_env_parsing),
      cmocka_unit_test(test_context_reports_target),
  };
  return cmocka_run_group_tests(tests, read_flags, NULL);
}
