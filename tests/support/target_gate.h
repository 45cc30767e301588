/* target_gate.h: the per-target runs of the codegen tests (ctest NAME@CPU, TJIT_CPU=CPU) skip
 * themselves on hosts that cannot execute code for CPU, instead of failing or faulting. */
#ifndef TJIT_TEST_TARGET_GATE_H
#define TJIT_TEST_TARGET_GATE_H

/* ctest's SKIP_RETURN_CODE for the per-target tests */
enum { TT_SKIP_EXIT = 77 };

/* Exits TT_SKIP_EXIT, saying why on stdout, when $TJIT_CPU names a CPU this host cannot run;
   returns otherwise. Call first thing in main. */
void tt_skip_unrunnable_target(void);

#endif /* TJIT_TEST_TARGET_GATE_H */
