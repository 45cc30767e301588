/* profile.c: the profiler: one process-wide session at a time (jit_profile_start/stop on a
 * context, or $TJIT_PROFILE from the first context's creation to the last one's destruction),
 * per-thread event buffers registered once and appended without locks, and the Chrome
 * trace-event JSON ("traceEvents", "X" complete events, "M" names) they are merged into.
 *
 * Buffers are written by their own thread only; stop reads them after the calls that filled them
 * returned (the pool's join orders the workers' appends before it), so stop must not run while
 * another thread is inside a call it profiles. A thread's buffer outlives the thread (a pool
 * joined before the profile is written still shows its kernels); it is freed by the first stop
 * after the thread exited. */
#include "runtime/profile.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/error.h"
#include "tjit.h"

atomic_int prof_active;

typedef struct prof_event {
  uint64_t t0, t1;   /* monotonic ns */
  const char *cat;   /* a literal */
  uint32_t name;     /* offset in the thread's text */
  uint8_t n_args;
  struct {
    const char *key; /* a literal */
    int64_t num;
    uint32_t str;    /* offset in the thread's text when is_str */
    bool is_str;
  } args[PROF_MAX_ARGS];
} prof_event;

typedef struct prof_thread {
  struct prof_thread *next; /* the registry's list */
  int tid;                  /* 1, 2, ... in registration order */
  const char *role;         /* "worker", "device", or NULL: a host thread */
  int index;
  bool gone;                /* the thread exited: free the buffer at the next stop */
  prof_event *ev;
  uint32_t n, cap;
  char *text;               /* names and string args, NUL-terminated, back to back */
  size_t text_len, text_cap;
  uint64_t dropped;         /* events past max_events or out of memory */
} prof_thread;

typedef enum { OWNER_NONE, OWNER_CTX, OWNER_ENV } owner_kind;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static prof_thread *threads;
static int n_registered;
static owner_kind owner = OWNER_NONE;
static const void *owner_ctx;
static uint64_t session_t0;
static char *env_path;     /* $TJIT_PROFILE of the process's session */
static bool env_kept;      /* the buffers hold a finished $TJIT_PROFILE session to resume */
static bool atexit_set;
static int live_ctx;
static uint32_t max_events = PROF_MAX_EVENTS; /* per thread, set when a session begins */

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static bool key_ok;

static _Thread_local prof_thread *self;
static _Thread_local const char *self_role;
static _Thread_local int self_index;

uint64_t prof_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  return t ? t : 1;
}

static void thread_exit(void *p) {
  pthread_mutex_lock(&mu);
  ((prof_thread *)p)->gone = true;
  pthread_mutex_unlock(&mu);
}

static void make_key(void) { key_ok = pthread_key_create(&key, thread_exit) == 0; }

/* This thread's buffer, registered on its first event. */
static prof_thread *attach(void) {
  pthread_once(&key_once, make_key);
  prof_thread *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->role = self_role;
  t->index = self_index;
  pthread_mutex_lock(&mu);
  t->tid = ++n_registered;
  t->next = threads;
  threads = t;
  pthread_mutex_unlock(&mu);
  if (key_ok) pthread_setspecific(key, t);
  self = t;
  return t;
}

void prof_name_thread(const char *role, int index) {
  if (self_role) return;
  self_role = role;
  self_index = index;
  if (self && !self->role) {
    self->role = role;
    self->index = index;
  }
}

/* Appends s with its NUL; false when memory runs out. */
static bool put_text(prof_thread *t, const char *s, uint32_t *off) {
  size_t n = strlen(s) + 1;
  if (t->text_len + n > UINT32_MAX) return false;
  if (t->text_len + n > t->text_cap) {
    size_t cap = t->text_cap ? t->text_cap : 4096;
    while (cap < t->text_len + n) cap *= 2;
    char *g = realloc(t->text, cap);
    if (!g) return false;
    t->text = g;
    t->text_cap = cap;
  }
  memcpy(t->text + t->text_len, s, n);
  *off = (uint32_t)t->text_len;
  t->text_len += n;
  return true;
}

void prof_end(uint64_t t0, const char *cat, const char *name, int n_args, const prof_arg *args) {
  if (!t0 || !atomic_load_explicit(&prof_active, memory_order_relaxed)) return;
  uint64_t t1 = prof_clock();
  prof_thread *t = self ? self : attach();
  if (!t) return;
  if (t->n >= max_events) {
    t->dropped++;
    return;
  }
  if (t->n == t->cap) {
    uint32_t cap = t->cap ? t->cap * 2 : 256;
    if (cap > max_events) cap = max_events;
    prof_event *g = realloc(t->ev, (size_t)cap * sizeof *g);
    if (!g) {
      t->dropped++;
      return;
    }
    t->ev = g;
    t->cap = cap;
  }
  prof_event *e = &t->ev[t->n];
  size_t mark = t->text_len;
  e->t0 = t0;
  e->t1 = t1 > t0 ? t1 : t0;
  e->cat = cat;
  e->n_args = (uint8_t)(n_args < PROF_MAX_ARGS ? n_args : PROF_MAX_ARGS);
  bool ok = put_text(t, name ? name : "", &e->name);
  for (int i = 0; ok && i < e->n_args; i++) {
    e->args[i].key = args[i].key;
    e->args[i].num = args[i].num;
    e->args[i].is_str = args[i].str != NULL;
    if (args[i].str) ok = put_text(t, args[i].str, &e->args[i].str);
  }
  if (!ok) {
    t->text_len = mark;
    t->dropped++;
    return;
  }
  t->n++;
}

/* ---- the JSON file ------------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when the bytes there are not one. */
static int utf8_len(const unsigned char *s) {
  int n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
                          : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
  if (n == 2 && s[0] < 0xc2) return 0; /* overlong */
  for (int i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return n;
}

/* s as a JSON string: quotes, backslashes and control characters escaped, bytes that are not
   UTF-8 replaced by U+FFFD (names come from users and may be anything). */
static void put_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    if (*p == '"' || *p == '\\') {
      fputc('\\', f);
      fputc(*p++, f);
    } else if (*p < 0x20) {
      fprintf(f, "\\u%04x", *p++);
    } else {
      int n = utf8_len(p);
      if (n == 0) {
        fputs("\\ufffd", f);
        p++;
      } else {
        fwrite(p, 1, (size_t)n, f);
        p += n;
      }
    }
  }
  fputc('"', f);
}

/* Microseconds since the session began, exact to the nanosecond (so nested spans stay nested). */
static void put_us(FILE *f, uint64_t ns) {
  fprintf(f, "%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

static void thread_label(const prof_thread *t, char *buf, size_t n) {
  if (t->role) snprintf(buf, n, "%s %d", t->role, t->index);
  else snprintf(buf, n, "host %d", t->tid);
}

static int sort_index(const prof_thread *t) {
  if (!t->role) return t->tid;
  return (strcmp(t->role, "device") == 0 ? 20000 : 10000) + t->index;
}

static void write_events(FILE *f, int pid, const prof_thread *t, uint64_t end, bool *first) {
  for (uint32_t i = 0; i < t->n; i++) {
    const prof_event *e = &t->ev[i];
    uint64_t t0 = e->t0 > session_t0 ? e->t0 - session_t0 : 0;
    uint64_t t1 = e->t1 > session_t0 ? e->t1 - session_t0 : 0;
    fprintf(f, "%s\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"cat\":", *first ? "" : ",", pid, t->tid);
    *first = false;
    put_str(f, e->cat);
    fputs(",\"name\":", f);
    put_str(f, t->text + e->name);
    fputs(",\"ts\":", f);
    put_us(f, t0);
    fputs(",\"dur\":", f);
    put_us(f, t1 - t0);
    fputs(",\"args\":{", f);
    for (int k = 0; k < e->n_args; k++) {
      fprintf(f, "%s\"%s\":", k ? "," : "", e->args[k].key);
      if (e->args[k].is_str) put_str(f, t->text + e->args[k].str);
      else fprintf(f, "%lld", (long long)e->args[k].num);
    }
    fputs("}}", f);
  }
  if (t->dropped) {
    fprintf(f, ",\n{\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":%d,\"cat\":\"tjit\","
               "\"name\":\"events dropped\",\"ts\":", pid, t->tid);
    put_us(f, end);
    fprintf(f, ",\"args\":{\"count\":%llu}}", (unsigned long long)t->dropped);
  }
}

/* Every thread's events, under mu. false on a write error. */
static bool write_trace(FILE *f) {
  int pid = (int)getpid();
  uint64_t end = prof_clock() - session_t0, dropped = 0;
  fprintf(f, "{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\","
             "\"args\":{\"name\":\"tjit\"}}", pid);
  bool first = false;
  for (const prof_thread *t = threads; t; t = t->next) {
    if (!t->n && !t->dropped) continue;
    char label[48];
    thread_label(t, label, sizeof label);
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":",
            pid, t->tid);
    put_str(f, label);
    fprintf(f, "}},\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\","
               "\"args\":{\"sort_index\":%d}}", pid, t->tid, sort_index(t));
  }
  for (const prof_thread *t = threads; t; t = t->next) {
    write_events(f, pid, t, end, &first);
    dropped += t->dropped;
  }
  fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"tjit\","
             "\"dropped_events\":%llu}}\n", (unsigned long long)dropped);
  return !ferror(f);
}

/* Empties every buffer and frees those of exited threads. Under mu. */
static void clear_buffers(void) {
  for (prof_thread **pp = &threads; *pp;) {
    prof_thread *t = *pp;
    free(t->ev);
    free(t->text);
    t->ev = NULL;
    t->text = NULL;
    t->n = t->cap = 0;
    t->text_len = t->text_cap = 0;
    t->dropped = 0;
    if (t->gone) {
      *pp = t->next;
      free(t);
    } else {
      pp = &t->next;
    }
  }
}

static void begin_session(owner_kind k, const void *ctx) {
  const char *v = getenv("TJIT_PROFILE_MAX_EVENTS");
  char *end = NULL;
  long long n = v ? strtoll(v, &end, 10) : 0;
  max_events = v && end != v && !*end && n >= 1 && n <= PROF_MAX_EVENTS ? (uint32_t)n : PROF_MAX_EVENTS;
  owner = k;
  owner_ctx = ctx;
  session_t0 = prof_clock();
  atomic_store_explicit(&prof_active, 1, memory_order_release);
}

static void end_session(void) {
  atomic_store_explicit(&prof_active, 0, memory_order_release);
  owner = OWNER_NONE;
  owner_ctx = NULL;
}

/* Writes the trace to path; false (errno set) when it cannot be opened or written. Under mu. */
static bool write_file(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  bool ok = write_trace(f);
  int saved = errno;
  if (fclose(f) != 0) ok = false;
  else errno = saved;
  return ok;
}

/* ---- sessions ---------------------------------------------------------------------------------- */

jit_status jit_profile_start(jit_ctx *ctx) {
  if (!ctx) return jit_error(JIT_EINVAL, "jit_profile_start: ctx is NULL");
  jit_status st = JIT_OK;
  pthread_mutex_lock(&mu);
  if (owner == OWNER_ENV) {
    st = jit_error(JIT_EINVAL, "jit_profile_start: TJIT_PROFILE=%s already profiles the whole "
                               "process", env_path);
  } else if (owner == OWNER_CTX) {
    st = jit_error(JIT_EINVAL, "jit_profile_start: a profile is already running (started on %s "
                               "jit_ctx); stop it first", owner_ctx == ctx ? "this" : "another");
  } else {
    clear_buffers();
    env_kept = false;
    begin_session(OWNER_CTX, ctx);
  }
  pthread_mutex_unlock(&mu);
  return st;
}

jit_status jit_profile_stop(jit_ctx *ctx, const char *path) {
  if (!ctx) return jit_error(JIT_EINVAL, "jit_profile_stop: ctx is NULL");
  if (!path || !*path) return jit_error(JIT_EINVAL, "jit_profile_stop: path is %s", path ? "empty" : "NULL");
  jit_status st = JIT_OK;
  pthread_mutex_lock(&mu);
  if (owner == OWNER_NONE) {
    st = jit_error(JIT_EINVAL, "jit_profile_stop: no profile is running (jit_profile_start "
                               "starts one)");
  } else if (owner == OWNER_ENV) {
    st = jit_error(JIT_EINVAL, "jit_profile_stop: the process is profiled by TJIT_PROFILE=%s, "
                               "written when the last context is destroyed", env_path);
  } else if (owner_ctx != ctx) {
    st = jit_error(JIT_EINVAL, "jit_profile_stop: the running profile was started on another "
                               "jit_ctx");
  } else {
    atomic_store_explicit(&prof_active, 0, memory_order_release);
    if (!write_file(path)) {
      /* the events stay: the caller may stop again with a path that works */
      st = jit_error(JIT_EIO, "jit_profile_stop: cannot write '%s': %s (the profile keeps "
                              "running)", path, strerror(errno));
      atomic_store_explicit(&prof_active, 1, memory_order_release);
    } else {
      end_session();
      clear_buffers();
    }
  }
  pthread_mutex_unlock(&mu);
  return st;
}

/* A process that exits with contexts alive still gets its $TJIT_PROFILE file. */
static void write_at_exit(void) {
  pthread_mutex_lock(&mu);
  if (owner == OWNER_ENV) {
    atomic_store_explicit(&prof_active, 0, memory_order_release);
    write_file(env_path);
    end_session();
  }
  pthread_mutex_unlock(&mu);
}

void prof_ctx_created(const void *ctx) {
  (void)ctx;
  pthread_mutex_lock(&mu);
  if (++live_ctx == 1 && owner == OWNER_NONE) {
    const char *path = getenv("TJIT_PROFILE");
    if (path && *path) {
      /* a later context of the same process resumes the session its predecessors recorded */
      bool resume = env_kept && env_path && strcmp(env_path, path) == 0;
      if (!resume) {
        free(env_path);
        env_path = strdup(path);
        clear_buffers();
      }
      if (env_path) {
        uint64_t t0 = session_t0;
        begin_session(OWNER_ENV, NULL);
        if (resume) session_t0 = t0;
        if (!atexit_set) atexit_set = atexit(write_at_exit) == 0;
      }
    }
  }
  pthread_mutex_unlock(&mu);
}

void prof_ctx_destroyed(const void *ctx) {
  pthread_mutex_lock(&mu);
  live_ctx--;
  if (owner == OWNER_CTX && owner_ctx == ctx) {
    end_session(); /* nowhere to write it: the context that would stop it is gone */
    clear_buffers();
  } else if (owner == OWNER_ENV && live_ctx == 0) {
    atomic_store_explicit(&prof_active, 0, memory_order_release);
    write_file(env_path); /* the library never prints: a file that cannot be written is skipped */
    end_session();
    env_kept = true;
  }
  pthread_mutex_unlock(&mu);
}
