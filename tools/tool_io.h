/* tool_io.h: what the command-line tools (tjit-opt, tjit-run) share: reading a whole input. */
#ifndef TJIT_TOOL_IO_H
#define TJIT_TOOL_IO_H

#include <stddef.h>
#include <stdio.h>

/* The whole of in, NUL-terminated (the parser takes a length, the NUL is for safety); *len is
   its length. NULL on a read error or out of memory. */
char *tool_read_all(FILE *in, size_t *len);

#endif /* TJIT_TOOL_IO_H */
