/* roundtrip.h: asserts that an IR function survives print -> parse -> print unchanged and
 * verifies; tests call it on every function they build. */
#ifndef TJIT_TEST_ROUNDTRIP_H
#define TJIT_TEST_ROUNDTRIP_H

#include "ir/ir.h"

/* Verifies f, prints it, parses the text back (exactly one function), verifies that, prints it
   again and asserts both texts are equal. Fails the current cmocka test otherwise. */
void assert_ir_roundtrip(const ir_func *f);

/* f's text form, malloc'd (the caller frees it); fails the current test if printing fails. */
char *ir_print_to_string(const ir_func *f);

#endif /* TJIT_TEST_ROUNDTRIP_H */
