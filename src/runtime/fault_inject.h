/* fault_inject.h: with -DTJIT_FAULT_INJECTION=ON this header is force-included (-include) into
 * every source file of the library, so that each malloc, calloc, realloc, strdup, strndup,
 * posix_memalign and open_memstream the library's own code makes goes through one counter that
 * can fail the N-th of them (tests/fault/test_alloc_failures.c; $TJIT_TEST_FAIL_ALLOC=N).
 * Allocations inside LLVM (C++ new), libffi, libc's stdio buffers and pthreads are not counted:
 * they cannot be failed this way. In a normal build this header declares nothing. */
#ifndef TJIT_FAULT_INJECT_H
#define TJIT_FAULT_INJECT_H

#ifdef TJIT_FAULT_INJECTION
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Counts from now on and fails the n-th counted allocation (n >= 1; 0: fail none). */
void tjit_fault_arm(long n);
/* Allocations counted since the last tjit_fault_arm. */
long tjit_fault_count(void);
/* Whether the armed allocation has been failed since the last tjit_fault_arm. */
bool tjit_fault_fired(void);
/* Distinct call sites in the library whose allocations were counted so far (up to 8192). */
size_t tjit_fault_sites(void);

void *tjit_fault_malloc(size_t n);
void *tjit_fault_calloc(size_t n, size_t size);
void *tjit_fault_realloc(void *p, size_t n);
char *tjit_fault_strdup(const char *s);
char *tjit_fault_strndup(const char *s, size_t n);
int tjit_fault_posix_memalign(void **p, size_t align, size_t n);
FILE *tjit_fault_open_memstream(char **buf, size_t *len);

/* the system headers above are in: from here on, the library's calls are redirected */
#ifndef TJIT_FAULT_NO_REDIRECT
#undef malloc
#undef calloc
#undef realloc
#undef strdup
#undef strndup
#define malloc(n) tjit_fault_malloc(n)
#define calloc(n, size) tjit_fault_calloc(n, size)
#define realloc(p, n) tjit_fault_realloc(p, n)
#define strdup(s) tjit_fault_strdup(s)
#define strndup(s, n) tjit_fault_strndup(s, n)
#define posix_memalign(p, align, n) tjit_fault_posix_memalign(p, align, n)
#define open_memstream(buf, len) tjit_fault_open_memstream(buf, len)
#endif
#endif /* TJIT_FAULT_INJECTION */

#endif /* TJIT_FAULT_INJECT_H */
