/* fuzz_npy.c: bytes as a .npy file -> jit_array_load_npy (src/runtime/npy.c), through a memfd so
 * that nothing touches the disk; a loaded array is read back to the host. */
#define _GNU_SOURCE /* memfd_create */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tjit.h"

static jit_ctx *ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx && jit_ctx_create(NULL, &ctx) != JIT_OK) abort();
  if (size > (1u << 20)) return 0;
  int fd = memfd_create("fuzz.npy", MFD_CLOEXEC);
  if (fd < 0) abort();
  if (size && write(fd, data, size) != (ssize_t)size) abort();
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  jit_array *a = NULL;
  if (jit_array_load_npy(ctx, path, &a) == JIT_OK) {
    size_t n = jit_array_nbytes(a);
    void *h = malloc(n ? n : 1);
    if (!h || jit_array_to_host(a, h, n) != JIT_OK) abort();
    free(h);
  }
  jit_array_free(a);
  close(fd);
  return 0;
}
