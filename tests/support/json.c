/* json.c: the strict JSON reader of json.h (recursive descent; RFC 8259 grammar). */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
  const char *s, *p;
  char err[128];
} reader;

static void blanks(reader *r) {
  while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r') r->p++;
}

static int fail(reader *r, const char *what) {
  if (!r->err[0]) snprintf(r->err, sizeof r->err, "%s at offset %td", what, r->p - r->s);
  return 0;
}

static int value(reader *r, js_val *v, int depth);

static int hex4(reader *r, unsigned *out) {
  unsigned u = 0;
  for (int i = 0; i < 4; i++) {
    char c = *r->p++;
    u <<= 4;
    if (c >= '0' && c <= '9') u |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') u |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') u |= (unsigned)(c - 'A' + 10);
    else return fail(r, "bad \\u escape");
  }
  *out = u;
  return 1;
}

static size_t put_utf8(char *o, unsigned u) {
  if (u < 0x80) return o[0] = (char)u, 1;
  if (u < 0x800) return o[0] = (char)(0xc0 | u >> 6), o[1] = (char)(0x80 | (u & 63)), 2;
  if (u < 0x10000) {
    o[0] = (char)(0xe0 | u >> 12);
    o[1] = (char)(0x80 | (u >> 6 & 63));
    o[2] = (char)(0x80 | (u & 63));
    return 3;
  }
  o[0] = (char)(0xf0 | u >> 18);
  o[1] = (char)(0x80 | (u >> 12 & 63));
  o[2] = (char)(0x80 | (u >> 6 & 63));
  o[3] = (char)(0x80 | (u & 63));
  return 4;
}

static int string(reader *r, char **out) {
  if (*r->p != '"') return fail(r, "expected a string");
  r->p++;
  size_t cap = 16, n = 0;
  char *o = malloc(cap);
  if (!o) return fail(r, "out of memory");
  for (;;) {
    if (n + 8 > cap) {
      char *g = realloc(o, cap *= 2);
      if (!g) return free(o), fail(r, "out of memory");
      o = g;
    }
    unsigned char c = (unsigned char)*r->p;
    if (c == '"') break;
    if (c < 0x20) return free(o), fail(r, c ? "control character in a string" : "unterminated string");
    r->p++;
    if (c != '\\') {
      o[n++] = (char)c;
      continue;
    }
    char e = *r->p++;
    unsigned u;
    switch (e) {
    case '"': case '\\': case '/': o[n++] = e; break;
    case 'b': o[n++] = '\b'; break;
    case 'f': o[n++] = '\f'; break;
    case 'n': o[n++] = '\n'; break;
    case 'r': o[n++] = '\r'; break;
    case 't': o[n++] = '\t'; break;
    case 'u':
      if (!hex4(r, &u)) return free(o), 0;
      if (u >= 0xd800 && u < 0xdc00 && r->p[0] == '\\' && r->p[1] == 'u') {
        unsigned lo;
        r->p += 2;
        if (!hex4(r, &lo)) return free(o), 0;
        u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
      }
      n += put_utf8(o + n, u);
      break;
    default: return free(o), fail(r, "bad escape");
    }
  }
  r->p++;
  o[n] = '\0';
  *out = o;
  return 1;
}

static int number(reader *r, js_val *v) {
  const char *b = r->p;
  if (*r->p == '-') r->p++;
  if (*r->p == '0') r->p++;
  else if (*r->p >= '1' && *r->p <= '9') while (*r->p >= '0' && *r->p <= '9') r->p++;
  else return fail(r, "bad number");
  if (*r->p == '.') {
    r->p++;
    if (!(*r->p >= '0' && *r->p <= '9')) return fail(r, "bad fraction");
    while (*r->p >= '0' && *r->p <= '9') r->p++;
  }
  if (*r->p == 'e' || *r->p == 'E') {
    r->p++;
    if (*r->p == '+' || *r->p == '-') r->p++;
    if (!(*r->p >= '0' && *r->p <= '9')) return fail(r, "bad exponent");
    while (*r->p >= '0' && *r->p <= '9') r->p++;
  }
  v->kind = JS_NUM;
  v->num = strtod(b, NULL);
  return 1;
}

static int push(reader *r, js_val *v, size_t *cap, char *key) {
  if (v->n == *cap) {
    *cap = *cap ? *cap * 2 : 8;
    js_val *g = realloc(v->items, *cap * sizeof *g);
    if (!g) return fail(r, "out of memory");
    v->items = g;
    if (v->kind == JS_OBJ) {
      char **k = realloc(v->keys, *cap * sizeof *k);
      if (!k) return fail(r, "out of memory");
      v->keys = k;
    }
  }
  memset(&v->items[v->n], 0, sizeof v->items[0]);
  if (v->kind == JS_OBJ) v->keys[v->n] = key;
  v->n++;
  return 1;
}

static int container(reader *r, js_val *v, int depth) {
  char close = *r->p == '{' ? '}' : ']';
  v->kind = close == '}' ? JS_OBJ : JS_ARR;
  r->p++;
  size_t cap = 0;
  blanks(r);
  if (*r->p == close) {
    r->p++;
    return 1;
  }
  for (;;) {
    char *key = NULL;
    blanks(r);
    if (v->kind == JS_OBJ) {
      if (!string(r, &key)) return 0;
      blanks(r);
      if (*r->p++ != ':') return free(key), fail(r, "expected ':'");
    }
    if (!push(r, v, &cap, key)) return free(key), 0;
    if (!value(r, &v->items[v->n - 1], depth + 1)) return 0;
    blanks(r);
    if (*r->p == ',') {
      r->p++;
      continue;
    }
    if (*r->p++ != close) return fail(r, "expected ',' or a closing bracket");
    return 1;
  }
}

static int value(reader *r, js_val *v, int depth) {
  if (depth > 64) return fail(r, "nested too deep");
  blanks(r);
  switch (*r->p) {
  case '{': case '[': return container(r, v, depth);
  case '"': v->kind = JS_STR; return string(r, &v->str);
  case 't': if (strncmp(r->p, "true", 4)) break; r->p += 4; v->kind = JS_BOOL; v->num = 1; return 1;
  case 'f': if (strncmp(r->p, "false", 5)) break; r->p += 5; v->kind = JS_BOOL; return 1;
  case 'n': if (strncmp(r->p, "null", 4)) break; r->p += 4; v->kind = JS_NULL; return 1;
  default: return number(r, v);
  }
  return fail(r, "bad literal");
}

static void clear(js_val *v) {
  free(v->str);
  for (size_t i = 0; i < v->n; i++) {
    clear(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
}

js_val *js_parse(const char *text, const char **err) {
  static _Thread_local char msg[128];
  reader r = {text, text, {0}};
  js_val *v = calloc(1, sizeof *v);
  if (v && value(&r, v, 0)) {
    blanks(&r);
    if (!*r.p) return v;
    fail(&r, "trailing text");
  }
  snprintf(msg, sizeof msg, "%s", v ? r.err : "out of memory");
  if (err) *err = msg;
  js_free(v);
  return NULL;
}

void js_free(js_val *v) {
  if (!v) return;
  clear(v);
  free(v);
}

const js_val *js_get(const js_val *o, const char *key) {
  if (!o || o->kind != JS_OBJ) return NULL;
  for (size_t i = 0; i < o->n; i++)
    if (strcmp(o->keys[i], key) == 0) return &o->items[i];
  return NULL;
}

char *js_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *s = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1))) s[fread(s, 1, (size_t)n, f)] = '\0';
  fclose(f);
  return s;
}
