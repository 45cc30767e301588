/* arena.c: bump allocation for IR functions; one free releases everything. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

struct ir_arena_chunk {
  ir_arena_chunk *next;
  size_t cap;
  _Alignas(16) unsigned char data[];
};

enum { CHUNK_MIN = 16 * 1024 };

void *ir_arena_alloc(ir_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  if (!a->head || a->cap - a->used < n) {
    size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
    if (cap > SIZE_MAX - sizeof(ir_arena_chunk)) return NULL;
    ir_arena_chunk *c = malloc(sizeof(ir_arena_chunk) + cap);
    if (!c) return NULL;
    c->next = a->head;
    c->cap = cap;
    a->head = c;
    a->used = 0;
    a->cap = cap;
  }
  void *p = a->head->data + a->used;
  a->used += n;
  memset(p, 0, n);
  return p;
}

void *ir_arena_array(ir_arena *a, size_t n, size_t size) {
  if (size != 0 && n > (SIZE_MAX - 16) / size) return NULL;
  return ir_arena_alloc(a, n * size);
}

char *ir_arena_strdup(ir_arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = ir_arena_alloc(a, n);
  if (p) memcpy(p, s, n);
  return p;
}

void ir_arena_free(ir_arena *a) {
  ir_arena_chunk *c = a->head;
  while (c) {
    ir_arena_chunk *next = c->next;
    free(c);
    c = next;
  }
  a->head = NULL;
  a->used = a->cap = 0;
}
