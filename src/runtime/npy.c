/* npy.c: NumPy .npy files: jit_array_save_npy writes format 1.0 in C order, jit_array_load_npy
 * reads formats 1.0-3.0 and checks every byte it relies on, so a corrupt file is refused, never
 * over-read. The format: numpy.org/doc/stable/reference/generated/numpy.lib.format.html */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/error.h"
#include "runtime/runtime.h"

/* A dtype's NumPy type string is its byte order followed by code, e.g. '<' "f4". swap_unit is
   the size of the scalars whose bytes a big-endian file reverses (a complex element is two).
   A dtype tjit gains is one more line here, e.g. {JIT_U32, "u4", '<', 4}, {JIT_U64, "u8", '<', 8},
   {JIT_C64, "c8", '<', 4}, {JIT_C128, "c16", '<', 8}. */
typedef struct npy_type {
  jit_dtype dt;
  const char *code;  /* kind letter and item size in bytes, as NumPy writes it */
  char order;        /* the byte-order character save writes: '<' little, '|' not applicable */
  unsigned swap_unit;
} npy_type;

static const npy_type npy_types[] = {
    {JIT_BOOL, "b1", '|', 1}, {JIT_I8, "i1", '|', 1},  {JIT_U8, "u1", '|', 1},
    {JIT_I32, "i4", '<', 4},  {JIT_I64, "i8", '<', 8}, {JIT_F16, "f2", '<', 2},
    /* ml_dtypes' bfloat16 has no NumPy type code: numpy.save writes it as the 2-byte opaque
       type '<V2' (checked with numpy 2.4 and ml_dtypes 0.6), and np.load gives back V2 bytes
       that .view(ml_dtypes.bfloat16) reinterprets. Load takes any V2 as bf16. */
    {JIT_BF16, "V2", '<', 2}, {JIT_F32, "f4", '<', 4}, {JIT_F64, "f8", '<', 8},
    {JIT_C64, "c8", '<', 4},  {JIT_C128, "c16", '<', 8},
};
enum { N_NPY_TYPES = sizeof npy_types / sizeof npy_types[0] };

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
#define NPY_MAX_HEADER (1u << 20) /* far above any real header (rank <= 8 needs < 300 bytes) */
#define NPY_ALIGN 64              /* NumPy pads the preamble + header to a multiple of this */

static const npy_type *type_of_dtype(jit_dtype dt) {
  for (int i = 0; i < N_NPY_TYPES; i++)
    if (npy_types[i].dt == dt) return &npy_types[i];
  return NULL;
}

static const npy_type *type_of_code(const char *code, size_t n) {
  for (int i = 0; i < N_NPY_TYPES; i++)
    if (strlen(npy_types[i].code) == n && memcmp(npy_types[i].code, code, n) == 0)
      return &npy_types[i];
  return NULL;
}

/* ---- load: the header dict ------------------------------------------------------------------ */

typedef struct npy_header {
  const npy_type *type;
  bool big_endian;
  bool fortran_order;
  int rank;
  int64_t shape[JIT_MAX_RANK];
} npy_header;

/* A cursor over the header text [p, end) and what a failure message needs. */
typedef struct hdr_parser {
  const char *p, *end;
  const char *path;
  jit_status st;      /* the first failure */
} hdr_parser;

static jit_status load_error(const char *path, jit_status s, const char *fmt, ...)
    JIT_PRINTF(3, 4);
static jit_status load_error(const char *path, jit_status s, const char *fmt, ...) {
  char msg[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return jit_error(s, "jit_array_load_npy: %s: %s", path, msg);
}

static bool hdr_fail(hdr_parser *h, jit_status s, const char *what) {
  if (h->st == JIT_OK) h->st = load_error(h->path, s, "bad header: %s", what);
  return false;
}

static void skip_space(hdr_parser *h) {
  while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
    h->p++;
}

static bool eat(hdr_parser *h, char c) {
  skip_space(h);
  if (h->p < h->end && *h->p == c) {
    h->p++;
    return true;
  }
  return false;
}

/* A Python string literal in ' or " quotes (no escapes: no valid key or descr needs one). */
static bool parse_string(hdr_parser *h, const char **s, size_t *n) {
  skip_space(h);
  if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return false;
  char q = *h->p++;
  const char *start = h->p;
  while (h->p < h->end && *h->p != q && *h->p != '\\') h->p++;
  if (h->p >= h->end || *h->p != q) return false;
  *s = start;
  *n = (size_t)(h->p - start);
  h->p++;
  return true;
}

static bool parse_word(hdr_parser *h, const char *w) {
  size_t n = strlen(w);
  skip_space(h);
  if ((size_t)(h->end - h->p) < n || memcmp(h->p, w, n) != 0) return false;
  h->p += n;
  return true;
}

/* A non-negative Python int (Python 2's 123L too), at most INT64_MAX. */
static bool parse_dim(hdr_parser *h, int64_t *out) {
  skip_space(h);
  if (h->p >= h->end || *h->p < '0' || *h->p > '9')
    return hdr_fail(h, JIT_EINVAL, "a shape entry is not a non-negative integer");
  int64_t v = 0;
  while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
    int d = *h->p++ - '0';
    if (v > (INT64_MAX - d) / 10) return hdr_fail(h, JIT_EINVAL, "a shape entry overflows int64");
    v = v * 10 + d;
  }
  if (h->p < h->end && *h->p == 'L') h->p++;
  *out = v;
  return true;
}

/* (), (n,), (a, b) and (a, b,): the dims, at most JIT_MAX_RANK of them. */
static bool parse_shape(hdr_parser *h, npy_header *hd) {
  if (!eat(h, '(')) return hdr_fail(h, JIT_EINVAL, "'shape' is not a tuple");
  hd->rank = 0;
  if (eat(h, ')')) return true;
  for (;;) {
    int64_t d;
    if (!parse_dim(h, &d)) return false;
    if (hd->rank == JIT_MAX_RANK)
      return hdr_fail(h, JIT_EUNSUPPORTED, "rank above tjit's maximum of 8");
    hd->shape[hd->rank++] = d;
    bool comma = eat(h, ',');
    if (eat(h, ')')) return true;
    if (!comma) return hdr_fail(h, JIT_EINVAL, "'shape' tuple is not closed");
  }
}

/* A descr: a byte-order character then a type code tjit has. */
static bool parse_descr(hdr_parser *h, npy_header *hd) {
  skip_space(h);
  if (h->p < h->end && *h->p == '[')
    return hdr_fail(h, JIT_EUNSUPPORTED, "structured dtypes (a list 'descr') are not supported");
  const char *s;
  size_t n;
  if (!parse_string(h, &s, &n)) return hdr_fail(h, JIT_EINVAL, "'descr' is not a string");
  bool order_ok = n >= 1 && strchr("<>|=", s[0]) != NULL;
  if (order_ok) hd->type = type_of_code(s + 1, n - 1);
  if (hd->type) {
    hd->big_endian = s[0] == '>';
    return true;
  }
  /* A well-formed code tjit lacks ('<u2', '<U10') is unsupported; anything else is malformed. */
  bool code_ok = order_ok && n >= 3 && ((s[1] >= 'a' && s[1] <= 'z') || (s[1] >= 'A' && s[1] <= 'Z'));
  for (size_t i = 2; code_ok && i < n; i++) code_ok = s[i] >= '0' && s[i] <= '9';
  if (h->st == JIT_OK)
    h->st = load_error(h->path, code_ok ? JIT_EUNSUPPORTED : JIT_EINVAL,
                       code_ok ? "tjit has no dtype for NumPy's '%.*s'"
                               : "bad header: 'descr' '%.*s' is not a NumPy type string",
                       (int)(n > 32 ? 32 : n), s);
  return false;
}

/* {'descr': ..., 'fortran_order': ..., 'shape': ...}: those three keys, each once, in any order,
   then only whitespace. */
static jit_status parse_header(const char *text, size_t len, const char *path, npy_header *hd) {
  hdr_parser h = {.p = text, .end = text + len, .path = path, .st = JIT_OK};
  memset(hd, 0, sizeof *hd);
  static const char *const keys[3] = {"descr", "fortran_order", "shape"};
  bool seen[3] = {false, false, false};
  if (!eat(&h, '{')) return hdr_fail(&h, JIT_EINVAL, "not a dict"), h.st;
  while (!eat(&h, '}')) {
    const char *k;
    size_t n;
    int key = -1;
    if (!parse_string(&h, &k, &n)) return hdr_fail(&h, JIT_EINVAL, "a key is not a string"), h.st;
    for (int i = 0; i < 3; i++)
      if (strlen(keys[i]) == n && memcmp(keys[i], k, n) == 0) key = i;
    if (key < 0 || seen[key])
      return hdr_fail(&h, JIT_EINVAL, key < 0 ? "unknown key" : "repeated key"), h.st;
    seen[key] = true;
    if (!eat(&h, ':')) return hdr_fail(&h, JIT_EINVAL, "':' missing after a key"), h.st;
    bool ok = true;
    if (key == 0) ok = parse_descr(&h, hd);
    else if (key == 2) ok = parse_shape(&h, hd);
    else if (parse_word(&h, "True")) hd->fortran_order = true;
    else if (!parse_word(&h, "False"))
      ok = hdr_fail(&h, JIT_EINVAL, "'fortran_order' is not True or False");
    if (!ok) return h.st;
    if (!eat(&h, ',')) {
      skip_space(&h);
      if (h.p >= h.end || *h.p != '}')
        return hdr_fail(&h, JIT_EINVAL, "',' or '}' missing after a value"), h.st;
    }
  }
  if (!seen[0] || !seen[1] || !seen[2])
    return hdr_fail(&h, JIT_EINVAL, "it needs the keys 'descr', 'fortran_order' and 'shape'"), h.st;
  skip_space(&h);
  if (h.p != h.end) return hdr_fail(&h, JIT_EINVAL, "text after the dict"), h.st;
  return JIT_OK;
}

/* ---- load: the data ---------------------------------------------------------------------------- */

/* Reverses each swap_unit-byte scalar of buf in place. */
static void swap_bytes(unsigned char *buf, size_t nbytes, unsigned unit) {
  if (unit < 2) return;
  for (size_t i = 0; i + unit <= nbytes; i += unit)
    for (unsigned a = 0, b = unit - 1; a < b; a++, b--) {
      unsigned char t = buf[i + a];
      buf[i + a] = buf[i + b];
      buf[i + b] = t;
    }
}

/* dst (C order) = src (Fortran order) of shape[rank], elements of esize bytes: walks dst in order
   with an index counter, keeping src's offset in step. */
static void fortran_to_c(unsigned char *dst, const unsigned char *src, int rank,
                         const int64_t *shape, size_t esize, size_t numel) {
  int64_t idx[JIT_MAX_RANK] = {0};
  size_t fstride[JIT_MAX_RANK], off = 0;
  size_t s = 1;
  for (int d = 0; d < rank; d++) {
    fstride[d] = s;
    s *= (size_t)shape[d];
  }
  for (size_t i = 0; i < numel; i++) {
    memcpy(dst + i * esize, src + off * esize, esize);
    for (int d = rank - 1; d >= 0; d--) {
      off += fstride[d];
      if (++idx[d] < shape[d]) break;
      off -= fstride[d] * (size_t)shape[d];
      idx[d] = 0;
    }
  }
}

static uint32_t read_le(const unsigned char *p, int n) {
  uint32_t v = 0;
  for (int i = n; i-- > 0;) v = v << 8 | p[i];
  return v;
}

/* The preamble and header of an open file: on success hd is filled and the file stands at the
   first data byte, header_end bytes from its start. */
static jit_status read_header(FILE *in, const char *path, npy_header *hd, uint64_t *header_end) {
  unsigned char pre[12];
  size_t got = fread(pre, 1, 10, in);
  if (got < 6)
    return load_error(path, JIT_EIO, "file ends after %zu bytes, inside the .npy magic", got);
  if (memcmp(pre, npy_magic, 6) != 0)
    return load_error(path, JIT_EINVAL, "not a .npy file (bad magic)");
  if (got < 8) return load_error(path, JIT_EIO, "file ends inside the format version");
  unsigned major = pre[6], minor = pre[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return load_error(path, JIT_EUNSUPPORTED, "format version %u.%u (tjit reads 1.0, 2.0, 3.0)",
                      major, minor);
  int len_bytes = major == 1 ? 2 : 4;
  if (len_bytes == 4) got += fread(pre + 10, 1, 2, in);
  if (got < (size_t)(8 + len_bytes))
    return load_error(path, JIT_EIO, "file ends inside the header length");
  uint32_t hlen = read_le(pre + 8, len_bytes);
  if (hlen > NPY_MAX_HEADER)
    return load_error(path, JIT_EINVAL, "header length %u is over tjit's limit of %u bytes", hlen,
                      NPY_MAX_HEADER);
  char *text = malloc(hlen ? hlen : 1);
  if (!text) return load_error(path, JIT_ENOMEM, "out of memory for a %u-byte header", hlen);
  size_t hgot = fread(text, 1, hlen, in);
  jit_status st;
  if (hgot < hlen)
    st = load_error(path, JIT_EIO, "file ends %zu bytes into a %u-byte header", hgot, hlen);
  /* 1.0 and 2.0 headers are latin-1 and 3.0's UTF-8: none of the text this parser accepts is
     outside ASCII, so one byte parser reads all three. */
  else if (memchr(text, '\0', hlen))
    st = load_error(path, JIT_EINVAL, "bad header: it contains a NUL byte");
  else
    st = parse_header(text, hlen, path, hd);
  free(text);
  *header_end = (uint64_t)(8 + len_bytes) + hlen;
  return st;
}

jit_status jit_array_load_npy(jit_ctx *ctx, const char *path, jit_array **out) {
  if (!out) return jit_error(JIT_EINVAL, "jit_array_load_npy: out is NULL");
  *out = NULL;
  if (!ctx) return jit_error(JIT_EINVAL, "jit_array_load_npy: ctx is NULL");
  if (!path) return jit_error(JIT_EINVAL, "jit_array_load_npy: path is NULL");
  FILE *in = fopen(path, "rb");
  if (!in) return load_error(path, JIT_EIO, "cannot open: %s", strerror(errno));

  jit_status st = JIT_OK;
  jit_array *a = NULL;
  unsigned char *fortran = NULL;
  npy_header hd;
  uint64_t header_end = 0;
  TRY(read_header(in, path, &hd, &header_end));

  jit_dtype dt = hd.type->dt;
  size_t nbytes;
  if (!array_byte_size(dt, hd.rank, hd.shape, &nbytes))
    TRY(load_error(path, JIT_EINVAL, "bad header: the shape's byte size overflows"));
  /* Check the size against the file's before allocating, so that a header claiming terabytes
     is refused, not attempted. Trailing bytes are allowed (np.save may append arrays). */
  struct stat sb;
  if (fstat(fileno(in), &sb) == 0 && S_ISREG(sb.st_mode) &&
      (uint64_t)sb.st_size - header_end < nbytes)
    TRY(load_error(path, JIT_EIO, "data is %llu bytes; the header's %s shape needs %zu",
                   (unsigned long long)((uint64_t)sb.st_size - header_end), jit_dtype_name(dt),
                   nbytes));
  ir_type t = {.dtype = dt, .rank = hd.rank};
  for (int i = 0; i < hd.rank; i++) t.dims[i] = hd.shape[i];
  if (array_new_type(ctx, &t, &a) != JIT_OK)
    TRY(load_error(path, JIT_ENOMEM, "out of memory for %zu bytes", nbytes));
  size_t numel = nbytes / jit_dtype_size(dt);
  bool transpose = hd.fortran_order && hd.rank > 1 && numel > 1;
  unsigned char *dst = a->data;
  if (transpose) {
    dst = fortran = malloc(nbytes);
    if (!fortran) TRY(load_error(path, JIT_ENOMEM, "out of memory for %zu bytes", nbytes));
  }
  size_t got = nbytes ? fread(dst, 1, nbytes, in) : 0;
  if (got < nbytes)
    TRY(load_error(path, JIT_EIO, "data is %zu bytes; the header's %s shape needs %zu", got,
                   jit_dtype_name(dt), nbytes));
  if (hd.big_endian) swap_bytes(dst, nbytes, hd.type->swap_unit);
  if (transpose) fortran_to_c(a->data, fortran, hd.rank, hd.shape, jit_dtype_size(dt), numel);
  free(fortran);
  fclose(in);
  *out = a;
  return JIT_OK;
fail:
  free(fortran);
  jit_array_free(a);
  fclose(in);
  return st;
}

/* ---- save ---------------------------------------------------------------------------------------- */

/* The header text numpy.save writes for t (keys sorted, a trailing ", "), padded with spaces and
   ended by '\n' so that preamble + header is a multiple of 64 bytes. Returns its length. */
static size_t format_header(const npy_type *nt, int rank, const int64_t *shape, char *buf,
                            size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                              nt->order, nt->code);
  for (int i = 0; i < rank; i++)
    n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)shape[i]);
  n += (size_t)snprintf(buf + n, cap - n, "%s), }", rank == 1 ? "," : "");
  size_t total = (10 + n + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
  while (10 + n + 1 < total) buf[n++] = ' ';
  buf[n++] = '\n';
  return n;
}

jit_status jit_array_save_npy(const jit_array *a, const char *path) {
  if (!a) return jit_error(JIT_EINVAL, "jit_array_save_npy: array is NULL");
  if (!path) return jit_error(JIT_EINVAL, "jit_array_save_npy: path is NULL");
  jit_status live = array_check_live(a, "jit_array_save_npy");
  if (live != JIT_OK) return live;
  const npy_type *nt = type_of_dtype(a->dtype);
  if (!nt)
    return jit_error(JIT_EUNSUPPORTED, "jit_array_save_npy: %s: no .npy type for dtype %s", path,
                     jit_dtype_name(a->dtype));
  /* rank <= 8 dims of at most 19 digits: the header always fits format 1.0's 65535 bytes */
  char header[512];
  size_t hlen = format_header(nt, a->rank, a->shape, header, sizeof header);
  unsigned char pre[10];
  memcpy(pre, npy_magic, 6);
  pre[6] = 1;
  pre[7] = 0;
  pre[8] = (unsigned char)(hlen & 0xff);
  pre[9] = (unsigned char)(hlen >> 8);

  /* A committed (sharded) array is written as its gathered global value. */
  void *gathered = NULL;
  const void *data = a->data;
  if (!data && a->nbytes) {
    gathered = malloc(a->nbytes);
    if (!gathered)
      return jit_error(JIT_ENOMEM, "jit_array_save_npy: %s: out of memory for %zu bytes", path,
                       a->nbytes);
    jit_status st = jit_array_to_host(a, gathered, a->nbytes);
    if (st != JIT_OK) {
      free(gathered);
      return st;
    }
    data = gathered;
  }
  FILE *out = fopen(path, "wb");
  if (!out) {
    free(gathered);
    return jit_error(JIT_EIO, "jit_array_save_npy: %s: cannot create: %s", path, strerror(errno));
  }
  bool ok = fwrite(pre, 1, sizeof pre, out) == sizeof pre &&
            fwrite(header, 1, hlen, out) == hlen &&
            (a->nbytes == 0 || fwrite(data, 1, a->nbytes, out) == a->nbytes);
  int err = errno;
  if (fclose(out) != 0 && ok) {
    ok = false;
    err = errno;
  }
  free(gathered);
  if (!ok) {
    remove(path); /* no half-written file that a later load would refuse */
    return jit_error(JIT_EIO, "jit_array_save_npy: %s: write failed: %s", path, strerror(err));
  }
  return JIT_OK;
}
