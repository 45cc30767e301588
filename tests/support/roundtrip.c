/* roundtrip.c: the print -> parse -> print check every IR-building test runs on its functions,
 * so that the text form always covers everything the IR can hold. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/roundtrip.h"

char *ir_print_to_string(const ir_func *f) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (!m) fail_msg("open_memstream failed");
  jit_status st = ir_print(f, m);
  fclose(m);
  if (st != JIT_OK) {
    free(text);
    fail_msg("ir_print failed: %s", jit_last_error());
  }
  return text;
}

void assert_ir_roundtrip(const ir_func *f) {
  if (ir_verify(f, "roundtrip") != JIT_OK) fail_msg("%s", jit_last_error());
  char *first = ir_print_to_string(f);
  ir_func **funcs = NULL;
  uint32_t n = 0;
  if (ir_parse(first, strlen(first), &funcs, &n) != JIT_OK) {
    print_error("%s", first);
    free(first);
    fail_msg("the printed function does not parse: %s", jit_last_error());
  }
  char *second = NULL;
  bool ok = n == 1;
  char why[2048] = "";
  if (!ok) snprintf(why, sizeof why, "parsing gave %u functions, not 1", (unsigned)n);
  if (ok && ir_verify(funcs[0], "roundtrip-parsed") != JIT_OK) {
    snprintf(why, sizeof why, "%s", jit_last_error());
    ok = false;
  }
  if (ok) second = ir_print_to_string(funcs[0]);
  for (uint32_t i = 0; i < n; i++) ir_func_free(funcs[i]);
  free(funcs);
  if (ok && strcmp(first, second) != 0) {
    print_error("printed:\n%s\nreprinted:\n%s", first, second);
    snprintf(why, sizeof why, "the text changed through parse -> print");
    ok = false;
  }
  free(first);
  free(second);
  if (!ok) fail_msg("%s", why);
}
