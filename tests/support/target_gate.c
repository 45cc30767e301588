/* target_gate.c: see target_gate.h. */
#include "support/target_gate.h"

#include <stdio.h>
#include <stdlib.h>

#include "codegen/target.h"

void tt_skip_unrunnable_target(void) {
  const char *cpu = getenv("TJIT_CPU");
  if (cg_target_runs_here(cpu)) return;
  printf("skipped: TJIT_CPU=%s names a CPU whose code this host cannot execute\n", cpu);
  exit(TT_SKIP_EXIT);
}
