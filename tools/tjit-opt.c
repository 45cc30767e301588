/* tjit-opt: reads IR text, runs the named passes, prints the result; the driver of the golden
 * tests in tests/ir and a way to try a pass on a hand-written function. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel.h"
#include "ir/ir.h"
#include "ir/passes/passes.h"
#include "runtime/sharding.h"
#include "tool_io.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: tjit-opt [--passes=a,b,c] [--no-verify] [FILE|-]\n"
          "Reads IR text from FILE (or stdin), runs the passes in order, prints the result.\n"
          "  --passes=LIST  comma-separated pass names:");
  for (int i = 0; i < PASS_COUNT; i++) fprintf(out, " %s", pass_names[i]);
  fprintf(out,
          ", or pipeline (the whole optimization pipeline)\n  --no-verify    do not run the verifier after each pass\n"
          "  --fuse         print the result as fused kernels (the JIT_DUMP_FUSED text)\n"
          "  --partition    partition the result over the mesh of its first `sharding` or `shard_map`\n"
          "                 op and print\n"
          "                 the per-device function (the JIT_DUMP_PARTITIONED text)\n");
}

static bool known_pass(const char *s, size_t n) {
  if (n == 8 && memcmp(s, "pipeline", 8) == 0) return true;
  for (int i = 0; i < PASS_COUNT; i++)
    if (strlen(pass_names[i]) == n && memcmp(pass_names[i], s, n) == 0) return true;
  return false;
}

/* --partition: the mesh is the one f's first `sharding` op names (text has no devices). */
static jit_status print_partitioned(const ir_func *f, const char *name) {
  jit_mesh *mesh = NULL;
  for (uint32_t r = 0; r < f->n_ins && !mesh; r++) {
    const ir_ins *in = &f->ins[r];
    if (in->op == IR_SHARDING) mesh = in->attr.sharding->mesh;
    if (in->op == IR_SHARD_MAP && in->n_args + in->attr.smap.n_out) mesh = in->attr.smap.specs[0]->mesh;
  }
  if (!mesh) {
    fprintf(stderr, "%s: @%s: --partition: no `sharding` or `shard_map` op names a mesh\n", name,
            f->name);
    return JIT_EINVAL;
  }
  ir_spmd *p = NULL;
  jit_status st = ir_partition(f, mesh, NULL, &p);
  if (st == JIT_OK) st = ir_verify(p->local, "partition");
  if (st == JIT_OK) st = ir_spmd_print(p, stdout);
  if (st != JIT_OK) fprintf(stderr, "%s: @%s: partition: %s\n", name, f->name, jit_last_error());
  ir_spmd_free(p);
  return st;
}

int main(int argc, char **argv) {
  const char *passes = "", *path = NULL;
  bool verify = true, fuse = false, partition = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--passes=", 9) == 0) {
      passes = a + 9;
    } else if (strcmp(a, "--passes") == 0 && i + 1 < argc) {
      passes = argv[++i];
    } else if (strcmp(a, "--no-verify") == 0) {
      verify = false;
    } else if (strcmp(a, "--fuse") == 0) {
      fuse = true;
    } else if (strcmp(a, "--partition") == 0) {
      partition = true;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "tjit-opt: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    } else if (path) {
      fprintf(stderr, "tjit-opt: more than one input file ('%s' and '%s')\n", path, a);
      usage(stderr);
      return 2;
    } else {
      path = a;
    }
  }

  /* Check every pass name before doing any work, so that a typo fails fast and clearly. */
  for (const char *s = passes; *s;) {
    size_t n = strcspn(s, ",");
    if (!known_pass(s, n)) {
      fprintf(stderr, "tjit-opt: unknown pass '%.*s'; known passes:", (int)n, s);
      for (int i = 0; i < PASS_COUNT; i++) fprintf(stderr, "%s %s", i ? "," : "", pass_names[i]);
      fprintf(stderr, "\n");
      return 2;
    }
    s += n;
    if (*s == ',') s++;
  }

  const char *name = !path || strcmp(path, "-") == 0 ? "<stdin>" : path;
  FILE *in = !path || strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (!in) {
    fprintf(stderr, "tjit-opt: cannot open '%s': %s\n", path, strerror(errno));
    return 1;
  }
  size_t len = 0;
  char *text = tool_read_all(in, &len);
  if (in != stdin) fclose(in);
  if (!text) {
    fprintf(stderr, "%s: cannot read the input\n", name);
    return 1;
  }

  ir_func **funcs = NULL;
  uint32_t n_funcs = 0;
  int rc = 0;
  if (ir_parse(text, len, &funcs, &n_funcs) != JIT_OK) {
    fprintf(stderr, "%s:%s\n", name, jit_last_error());
    rc = 1;
    goto done;
  }
  for (uint32_t i = 0; i < n_funcs; i++) {
    for (const char *s = passes; *s;) {
      size_t n = strcspn(s, ",");
      char pass[64];
      snprintf(pass, sizeof pass, "%.*s", (int)n, s);
      if (ir_run_pass(funcs[i], pass, verify) != JIT_OK) {
        fprintf(stderr, "%s: @%s: %s: %s\n", name, funcs[i]->name, pass, jit_last_error());
        rc = 1;
        goto done;
      }
      s += n;
      if (*s == ',') s++;
    }
  }
  for (uint32_t i = 0; i < n_funcs; i++) {
    if (i) fputc('\n', stdout);
    if (fuse) {
      struct fz_prog *p = NULL;
      /* complex code runs as its real expansion: its kernels are those (as JIT_DUMP_FUSED) */
      jit_status st = ir_expand_complex(funcs[i]);
      if (st == JIT_OK) st = ir_fuse(funcs[i], &p);
      if (st == JIT_OK) st = fz_print(p, stdout);
      fz_prog_free(p);
      if (st != JIT_OK) {
        fprintf(stderr, "%s: @%s: fusion: %s\n", name, funcs[i]->name, jit_last_error());
        rc = 1;
        goto done;
      }
      continue;
    }
    if (partition) {
      if (print_partitioned(funcs[i], name) != JIT_OK) {
        rc = 1;
        goto done;
      }
      continue;
    }
    if (ir_print(funcs[i], stdout) != JIT_OK) break;
  }
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "tjit-opt: writing the output failed\n");
    rc = 1;
  }
done:
  for (uint32_t i = 0; i < n_funcs; i++) ir_func_free(funcs[i]);
  free(funcs);
  free(text);
  return rc;
}
