/* json.h: a small strict JSON reader for tests that check files tjit writes (the profiler's
 * trace): objects, arrays, strings (escapes and \u sequences decoded to UTF-8), numbers, literals. */
#ifndef TJIT_TEST_JSON_H
#define TJIT_TEST_JSON_H

#include <stddef.h>

typedef enum { JS_NULL, JS_BOOL, JS_NUM, JS_STR, JS_ARR, JS_OBJ } js_kind;

typedef struct js_val {
  js_kind kind;
  double num;           /* JS_NUM; JS_BOOL: 0 or 1 */
  char *str;            /* JS_STR (decoded, NUL-terminated) */
  struct js_val *items; /* JS_ARR: n values; JS_OBJ: n values */
  char **keys;          /* JS_OBJ: n keys */
  size_t n;
} js_val;

/* Parses the whole text (trailing blanks allowed). NULL on any syntax error, with *err set to a
   message naming the offset. Free with js_free. */
js_val *js_parse(const char *text, const char **err);
void js_free(js_val *v);
/* A whole file as a NUL-terminated string (malloc'd), or NULL when it cannot be read. */
char *js_read_file(const char *path);
/* o's member key, or NULL (o may be NULL or not an object). */
const js_val *js_get(const js_val *o, const char *key);

#endif /* TJIT_TEST_JSON_H */
