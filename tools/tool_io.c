/* tool_io.c: reading a whole input for the command-line tools (tool_io.h). */
#include <stdint.h>
#include <stdlib.h>

#include "tool_io.h"

char *tool_read_all(FILE *in, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  for (;;) {
    if (cap - n < 2) {
      if (cap > SIZE_MAX / 2) break;
      char *q = realloc(buf, cap * 2);
      if (!q) break;
      buf = q;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, in);
    n += got;
    if (got == 0) {
      if (ferror(in)) break;
      buf[n] = '\0';
      *len = n;
      return buf;
    }
  }
  free(buf);
  return NULL;
}
