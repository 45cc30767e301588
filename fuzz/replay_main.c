/* replay_main.c: a fuzz target as a plain program (any compiler, no libFuzzer): runs each file
 * named on the command line, and each file of each directory named, through
 * LLVMFuzzerTestOneInput once. How the committed corpora and findings replay under ctest. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open\n", path);
    return 1;
  }
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      uint8_t *g = realloc(buf, cap = cap ? 2 * cap : 4096);
      if (!g) abort();
      buf = g;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    if (got == 0) break;
    len += got;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, len);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int bad = 0, n = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "%s: missing\n", argv[i]);
      bad++;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad += run_file(argv[i]);
      n++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    for (struct dirent *e; d && (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
      bad += run_file(p);
      n++;
    }
    if (d) closedir(d);
  }
  fprintf(stderr, "%d inputs replayed\n", n);
  return bad != 0;
}
