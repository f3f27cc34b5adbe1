/*
 * cpu_stream.c - memory, streams and events of the host backends, and the
 * two test modes that prove the asynchrony rules of backend.h on the CPU.
 *
 * Every op goes through one path: its arguments are packed into a command,
 * and the command is submitted to a stream.
 *   sync  (cpu, cpu-ref)  the command runs at once on the calling thread;
 *                         events complete when recorded.
 *   async (cpu-async)     the command is queued; a worker thread per stream
 *                         runs the queue in order, each command no earlier
 *                         than `delay` after it was queued. Events complete
 *                         when the worker reaches them.
 *   guard (cpu-guard)     the command runs at once, with every device
 *                         allocation readable and writable only while it
 *                         runs (mprotect PROT_NONE otherwise); a host touch
 *                         of device memory faults, and the SIGSEGV handler
 *                         names the address and the allocation.
 * An error in a queued command is kept by its stream and raised on the host
 * thread by the next call on the backend.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <execinfo.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "build_config.h"
#include "cpu_backends.h"
#include "gridtrain/error.h"
#include "gridtrain/timer.h"

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int num_threads);
#endif

#define GT_MAX_STREAMS 8

typedef struct gt_cpu_state gt_cpu_state;

/* A command: run(be, args) with the arguments packed by the op's wrapper. */
typedef struct gt_cmd {
  int (*run)(gt_backend *be, const void *args);
  double due; /* async: not before this time */
  union {
    char bytes[160];
    double align;
  } args;
} gt_cmd;

struct gt_stream {
  gt_cpu_state *st;
  /* async only */
  pthread_t thread;
  bool running, stop;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  gt_cmd *ring;
  size_t cap, head, count;
  unsigned long long queued, done; /* commands queued / completed */
  int error;                       /* first error of a command, with its text */
  char message[1024], origin[256];
  unsigned long long serial;       /* tells it from a later stream at the same address */
};

struct gt_device_event {
  gt_stream *s;
  unsigned long long serial; /* of s when recorded */
  unsigned long long ticket; /* complete when s->done >= ticket */
  double time;               /* when it completed */
};

struct gt_cpu_state {
  gt_backend_ops table; /* what be->ops points at */
  const gt_backend_ops *kernels;
  gt_cpu_mode mode;
  double delay;
  gt_stream *streams[GT_MAX_STREAMS];
  int nstreams;
  size_t in_use, peak; /* bytes of device memory allocated now and at most */
};

static gt_cpu_state *gt_state(gt_backend *be) { return be->impl; }

// ---- thread counts ------------------------------------------------------------------

int gt_cpu_setup(gt_backend *be)
{
  omp_set_num_threads(be->threads);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
  openblas_set_num_threads(be->threads);
#endif
  return GT_SUCCESS;
}

// ---- guarded memory (cpu-guard) ------------------------------------------------------

/* Every guarded allocation of the process, for the mprotect flips and for
 * the SIGSEGV handler (which reads it without locks: it only grows while
 * the host thread allocates). */
#define GT_GUARD_MAX 4096
static struct {
  char *base;
  size_t len, bytes;
} gt_guard_regions[GT_GUARD_MAX];
static int gt_guard_count;
static bool gt_guard_handler_set;

static void gt_guard_write(const char *s) { (void)!write(STDERR_FILENO, s, strlen(s)); }

/* Async-signal-safe formatting of an unsigned number in base 10 or 16. */
static void gt_guard_number(char *out, unsigned long long v, int base)
{
  char tmp[32];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v % (unsigned)base];
    v /= (unsigned)base;
  } while (v && n < 31);
  int k = 0;
  if (base == 16) {
    out[k++] = '0';
    out[k++] = 'x';
  }
  while (n)
    out[k++] = tmp[--n];
  out[k] = '\0';
}

static void gt_guard_fault(int sig, siginfo_t *info, void *uctx)
{
  (void)uctx;
  const char *addr = info->si_addr;
  for (int i = 0; i < gt_guard_count; i++) {
    const char *b = gt_guard_regions[i].base;
    if (b && addr >= b && addr < b + gt_guard_regions[i].len) {
      char num[3][40];
      gt_guard_number(num[0], (unsigned long long)(uintptr_t)addr, 16);
      gt_guard_number(num[1], (unsigned long long)(addr - b), 10);
      gt_guard_number(num[2], gt_guard_regions[i].bytes, 10);
      gt_guard_write("gridtrain: error: cpu-guard: device memory was touched from the host at ");
      gt_guard_write(num[0]);
      gt_guard_write(" (byte ");
      gt_guard_write(num[1]);
      gt_guard_write(" of a ");
      gt_guard_write(num[2]);
      gt_guard_write("-byte device allocation), outside the backend's ops; host code may "
                     "read device memory only through a waited-for download\n");
      void *frames[32];
      int n = backtrace(frames, 32);
      backtrace_symbols_fd(frames, n, STDERR_FILENO);
      break;
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static int gt_guard_install(void)
{
  if (gt_guard_handler_set)
    return GT_SUCCESS;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = gt_guard_fault;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  GT_CHECK(sigaction(SIGSEGV, &sa, NULL) == 0, GT_ERR_SYSTEM, "sigaction(SIGSEGV): %s",
           strerror(errno));
  gt_guard_handler_set = true;
  return GT_SUCCESS;
}

/* Open (read-write) or close (no access) every guarded region. */
static int gt_guard_flip(bool open)
{
  for (int i = 0; i < gt_guard_count; i++)
    if (gt_guard_regions[i].base &&
        mprotect(gt_guard_regions[i].base, gt_guard_regions[i].len,
                 open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
      return GT_ERROR(GT_ERR_SYSTEM, "cpu-guard: mprotect of %zu bytes failed: %s",
                      gt_guard_regions[i].len, strerror(errno));
  return GT_SUCCESS;
}

// ---- streams ---------------------------------------------------------------------------

static void gt_stream_fail(gt_stream *s, int status)
{
  if (s->error != GT_SUCCESS)
    return;
  s->error = status;
  snprintf(s->message, sizeof s->message, "%s", gt_error_message());
  snprintf(s->origin, sizeof s->origin, "%s (queued op, cpu-async worker)", gt_error_origin());
}

/* Raise a queued command's error on the calling (host) thread. */
static int gt_stream_check(gt_stream *s)
{
  if (s->error == GT_SUCCESS)
    return GT_SUCCESS;
  pthread_mutex_lock(&s->mu);
  int code = s->error;
  char message[1024], origin[256];
  snprintf(message, sizeof message, "%s", s->message);
  snprintf(origin, sizeof origin, "%s", s->origin);
  pthread_mutex_unlock(&s->mu);
  gt_error_set(code, __FILE__, __LINE__, __func__, "%s", message);
  gt_error_set_origin(origin);
  return code;
}

static int gt_backend_check(gt_backend *be)
{
  gt_cpu_state *st = gt_state(be);
  for (int i = 0; i < st->nstreams; i++)
    GT_CALL(gt_stream_check(st->streams[i]));
  return GT_SUCCESS;
}

static void gt_sleep_until(double t)
{
  double left = t - gt_now();
  if (left <= 0)
    return;
  struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
  nanosleep(&ts, NULL);
}

static void *gt_stream_worker(void *arg)
{
  gt_stream *s = arg;
  gt_backend *be = NULL;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (s->count == 0 && !s->stop)
      pthread_cond_wait(&s->cv_work, &s->mu);
    if (s->count == 0 && s->stop) {
      pthread_mutex_unlock(&s->mu);
      return NULL;
    }
    gt_cmd cmd = s->ring[s->head];
    pthread_mutex_unlock(&s->mu);
    if (!be) { /* first command: this thread's OpenMP and BLAS thread counts */
      be = *(gt_backend **)cmd.args.bytes;
      gt_cpu_setup(be);
    }
    gt_sleep_until(cmd.due);
    int status = s->error == GT_SUCCESS ? cmd.run(be, cmd.args.bytes) : GT_SUCCESS;
    pthread_mutex_lock(&s->mu);
    if (status != GT_SUCCESS)
      gt_stream_fail(s, status);
    s->head = (s->head + 1) % s->cap;
    s->count--;
    s->done++;
    pthread_cond_broadcast(&s->cv_done);
    pthread_mutex_unlock(&s->mu);
  }
}

static int gt_stream_new(gt_backend *be, gt_stream **out)
{
  gt_cpu_state *st = gt_state(be);
  GT_CHECK(st->nstreams < GT_MAX_STREAMS, GT_ERR_INTERNAL,
           "internal error: more than %d streams", GT_MAX_STREAMS);
  gt_stream *s = calloc(1, sizeof *s);
  GT_CHECK_ALLOC(s, sizeof *s);
  static unsigned long long serials;
  s->st = st;
  s->serial = ++serials;
  if (st->mode == GT_CPU_ASYNC) {
    s->cap = 1024;
    s->ring = malloc(s->cap * sizeof *s->ring);
    if (!s->ring) {
      free(s);
      GT_CHECK_ALLOC(NULL, 1024 * sizeof(gt_cmd));
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv_work, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    if (pthread_create(&s->thread, NULL, gt_stream_worker, s) != 0) {
      free(s->ring);
      free(s);
      return GT_ERROR(GT_ERR_SYSTEM, "cpu-async: cannot start a stream's worker thread");
    }
    s->running = true;
  }
  st->streams[st->nstreams++] = s;
  *out = s;
  return GT_SUCCESS;
}

/* The stream an event was recorded on, while it lives; NULL once it was
 * destroyed (destroying a stream runs all its work: the event is complete). */
static gt_stream *gt_event_stream(const gt_cpu_state *st, const gt_device_event *ev)
{
  for (int i = 0; ev->s && i < st->nstreams; i++)
    if (st->streams[i] == ev->s && ev->s->serial == ev->serial)
      return ev->s;
  return NULL;
}

/* Wait until s has run everything queued up to ticket. */
static void gt_stream_wait_ticket(gt_stream *s, unsigned long long ticket)
{
  if (s->st->mode != GT_CPU_ASYNC)
    return;
  pthread_mutex_lock(&s->mu);
  while (s->done < ticket)
    pthread_cond_wait(&s->cv_done, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

/* Wait until s has run everything queued so far. */
static void gt_stream_wait_all(gt_stream *s)
{
  if (s->st->mode == GT_CPU_ASYNC) {
    pthread_mutex_lock(&s->mu);
    unsigned long long ticket = s->queued;
    pthread_mutex_unlock(&s->mu);
    gt_stream_wait_ticket(s, ticket);
  }
}

static int gt_stream_drain(gt_stream *s)
{
  gt_stream_wait_all(s);
  GT_CALL(gt_stream_check(s));
  return GT_SUCCESS;
}

/* Before memory is freed: no queued work may still use it. The memory is
 * freed even after an op failed (a failed run still cleans up); the error
 * comes back from the free, as cudaFree returns earlier launches' errors. */
static void gt_backend_wait_all(gt_backend *be)
{
  gt_cpu_state *st = gt_state(be);
  for (int i = 0; i < st->nstreams; i++)
    gt_stream_wait_all(st->streams[i]);
}

static void gt_stream_free(gt_stream *s)
{
  if (s->running) {
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
  }
  free(s->ring);
  free(s);
}

/* Submit a command to s (NULL: compute). The first argument of every
 * command is the backend (the worker reads it from there). */
static int gt_submit(gt_backend *be, gt_stream *s, gt_cmd *cmd)
{
  gt_cpu_state *st = gt_state(be);
  if (!s)
    s = be->compute;
  switch (st->mode) {
  case GT_CPU_SYNC: return cmd->run(be, cmd->args.bytes);
  case GT_CPU_GUARD: {
    GT_CALL(gt_guard_flip(true));
    int status = cmd->run(be, cmd->args.bytes);
    int closed = gt_guard_flip(false);
    GT_CALL(status);
    GT_CALL(closed);
    return GT_SUCCESS;
  }
  case GT_CPU_ASYNC: break;
  }
  GT_CALL(gt_stream_check(s));
  cmd->due = gt_now() + st->delay;
  pthread_mutex_lock(&s->mu);
  if (s->count == s->cap) { /* grow the ring, keeping the order */
    gt_cmd *bigger = malloc(2 * s->cap * sizeof *bigger);
    if (!bigger) {
      pthread_mutex_unlock(&s->mu);
      GT_CHECK_ALLOC(NULL, 2 * s->cap * sizeof *bigger);
    }
    for (size_t i = 0; i < s->count; i++)
      bigger[i] = s->ring[(s->head + i) % s->cap];
    free(s->ring);
    s->ring = bigger;
    s->head = 0;
    s->cap *= 2;
  }
  s->ring[(s->head + s->count) % s->cap] = *cmd;
  s->count++;
  s->queued++;
  pthread_cond_signal(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
  return GT_SUCCESS;
}

/* Pack the arguments of an op into cmd: `struct NAME_args a = {be, ...}`
 * must fit the command. */
#define GT_PACK(cmd, fn, a)                                                                  \
  do {                                                                                       \
    _Static_assert(sizeof(a) <= sizeof((cmd).args.bytes), "command arguments too large");   \
    (cmd).run = (fn);                                                                        \
    memcpy((cmd).args.bytes, &(a), sizeof(a));                                               \
  } while (0)

// ---- memory --------------------------------------------------------------------------------

static size_t gt_page_round(size_t bytes)
{
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return bytes ? (bytes + page - 1) / page * page : page;
}

/* Outside cpu-guard each device allocation starts with a 64-byte header
 * that holds its size, for the allocator's account. */
#define GT_CPU_HEADER 64

static void gt_cpu_account(gt_cpu_state *st, size_t bytes, bool add)
{
  st->in_use = add ? st->in_use + bytes : st->in_use - bytes;
  st->peak = st->in_use > st->peak ? st->in_use : st->peak;
}

void gt_cpu_memory_stats(gt_backend *be, size_t *in_use, size_t *peak)
{
  const gt_cpu_state *st = gt_state(be);
  *in_use = st->in_use;
  *peak = st->peak;
}

void gt_cpu_memory_rewind(gt_backend *be, size_t peak)
{
  gt_cpu_state *st = gt_state(be);
  st->peak = peak > st->in_use ? peak : st->in_use;
}

static int cpu_alloc(gt_backend *be, size_t bytes, void **ptr)
{
  gt_cpu_state *st = gt_state(be);
  if (st->mode == GT_CPU_GUARD) {
    GT_CALL(gt_guard_install());
    GT_CHECK(gt_guard_count < GT_GUARD_MAX, GT_ERR_SYSTEM,
             "cpu-guard: more than %d device allocations", GT_GUARD_MAX);
    const size_t len = gt_page_round(bytes);
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    GT_CHECK(p != MAP_FAILED, GT_ERR_SYSTEM, "out of memory allocating %zu bytes of device "
             "memory (cpu-guard): %s", bytes, strerror(errno));
    gt_guard_regions[gt_guard_count].len = len;
    gt_guard_regions[gt_guard_count].bytes = bytes;
    gt_guard_regions[gt_guard_count].base = p;
    gt_guard_count++;
    gt_cpu_account(st, bytes, true);
    *ptr = p;
    return GT_SUCCESS;
  }
  void *p = NULL;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  GT_CHECK(posix_memalign(&p, 64, GT_CPU_HEADER + rounded) == 0, GT_ERR_SYSTEM,
           "out of memory allocating %zu bytes of device memory", bytes);
  *(size_t *)p = bytes;
  gt_cpu_account(st, bytes, true);
  *ptr = (char *)p + GT_CPU_HEADER;
  return GT_SUCCESS;
}

static int cpu_free(gt_backend *be, void *ptr)
{
  if (!ptr)
    return GT_SUCCESS;
  gt_cpu_state *st = gt_state(be);
  gt_backend_wait_all(be); /* as cudaFree: queued work may use it */
  if (st->mode == GT_CPU_GUARD) {
    for (int i = 0; i < gt_guard_count; i++)
      if (gt_guard_regions[i].base == ptr) {
        gt_guard_regions[i].base = NULL;
        gt_cpu_account(st, gt_guard_regions[i].bytes, false);
        GT_CHECK(munmap(ptr, gt_guard_regions[i].len) == 0, GT_ERR_SYSTEM, "munmap: %s",
                 strerror(errno));
        return gt_backend_check(be);
      }
    return GT_ERROR(GT_ERR_INTERNAL, "internal error: cpu-guard: freeing %p, which is not a "
                    "device allocation", ptr);
  }
  char *base = (char *)ptr - GT_CPU_HEADER;
  gt_cpu_account(st, *(size_t *)base, false);
  free(base);
  return gt_backend_check(be);
}

static int cpu_alloc_host(gt_backend *be, size_t bytes, void **ptr)
{
  (void)be;
  void *p = NULL;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  GT_CHECK(posix_memalign(&p, 64, rounded ? rounded : 64) == 0, GT_ERR_SYSTEM,
           "out of memory allocating %zu bytes of pinned host memory", bytes);
  *ptr = p;
  return GT_SUCCESS;
}

static int cpu_free_host(gt_backend *be, void *ptr)
{
  if (!ptr)
    return GT_SUCCESS;
  gt_backend_wait_all(be); /* a queued copy may still read it */
  free(ptr);
  return gt_backend_check(be);
}

// ---- streams and events ----------------------------------------------------------------------

static int cpu_stream_create(gt_backend *be, gt_stream **s)
{
  GT_CALL(gt_stream_new(be, s));
  return GT_SUCCESS;
}

static int cpu_stream_destroy(gt_backend *be, gt_stream *s)
{
  if (!s)
    return GT_SUCCESS;
  gt_cpu_state *st = gt_state(be);
  GT_CHECK(s != be->compute, GT_ERR_INTERNAL, "internal error: destroying the compute stream");
  int status = gt_stream_drain(s);
  for (int i = 0; i < st->nstreams; i++)
    if (st->streams[i] == s) {
      st->streams[i] = st->streams[--st->nstreams];
      break;
    }
  gt_stream_free(s);
  GT_CALL(status);
  return GT_SUCCESS;
}

static int cpu_event_create(gt_backend *be, gt_device_event **ev)
{
  (void)be;
  gt_device_event *e = calloc(1, sizeof *e);
  GT_CHECK_ALLOC(e, sizeof *e);
  *ev = e;
  return GT_SUCCESS;
}

static int cpu_event_destroy(gt_backend *be, gt_device_event *ev)
{
  gt_stream *s = ev ? gt_event_stream(gt_state(be), ev) : NULL;
  if (s)
    gt_stream_wait_ticket(s, ev->ticket); /* its marker may still be queued */
  free(ev);
  return GT_SUCCESS;
}

typedef struct {
  gt_backend *be;
  gt_device_event *ev;
  unsigned long long ticket;
} gt_mark_args;

static int gt_run_mark(gt_backend *be, const void *args)
{
  (void)be;
  const gt_mark_args *a = args;
  if (a->ev->ticket == a->ticket) /* not recorded again since */
    a->ev->time = gt_now();
  return GT_SUCCESS;
}

static int cpu_event_record(gt_backend *be, gt_device_event *ev, gt_stream *s)
{
  gt_cpu_state *st = gt_state(be);
  if (!s)
    s = be->compute;
  if (st->mode != GT_CPU_ASYNC) {
    ev->s = s;
    ev->serial = s->serial;
    ev->ticket = 0;
    ev->time = gt_now();
    return GT_SUCCESS;
  }
  /* The marker is the command queued next: its ticket is queued + 1. The
   * ticket is written before the marker can run (the stream's lock orders
   * the two). */
  pthread_mutex_lock(&s->mu);
  unsigned long long ticket = s->queued + 1;
  ev->s = s;
  ev->serial = s->serial;
  ev->ticket = ticket;
  pthread_mutex_unlock(&s->mu);
  gt_mark_args a = {be, ev, ticket};
  gt_cmd cmd;
  GT_PACK(cmd, gt_run_mark, a);
  GT_CALL(gt_submit(be, s, &cmd));
  return GT_SUCCESS;
}

static int cpu_event_query(gt_backend *be, gt_device_event *ev, bool *done)
{
  GT_CALL(gt_backend_check(be));
  gt_stream *s = gt_event_stream(gt_state(be), ev);
  if (!s || gt_state(be)->mode != GT_CPU_ASYNC) {
    *done = true;
    return GT_SUCCESS;
  }
  pthread_mutex_lock(&s->mu);
  *done = s->done >= ev->ticket;
  pthread_mutex_unlock(&s->mu);
  return GT_SUCCESS;
}

static int cpu_event_wait(gt_backend *be, gt_device_event *ev)
{
  gt_stream *s = gt_event_stream(gt_state(be), ev);
  if (s)
    gt_stream_wait_ticket(s, ev->ticket);
  GT_CALL(gt_backend_check(be));
  return GT_SUCCESS;
}

typedef struct {
  gt_backend *be;
  gt_stream *s;
  unsigned long long ticket;
} gt_wait_args;

static int gt_run_stream_wait(gt_backend *be, const void *args)
{
  (void)be;
  const gt_wait_args *a = args;
  gt_stream_wait_ticket(a->s, a->ticket);
  return GT_SUCCESS;
}

static int cpu_stream_wait(gt_backend *be, gt_stream *s, gt_device_event *ev)
{
  gt_stream *from = gt_event_stream(gt_state(be), ev);
  if (gt_state(be)->mode != GT_CPU_ASYNC || !from)
    return GT_SUCCESS;
  gt_wait_args a = {be, from, ev->ticket};
  gt_cmd cmd;
  GT_PACK(cmd, gt_run_stream_wait, a);
  GT_CALL(gt_submit(be, s, &cmd));
  return GT_SUCCESS;
}

static int cpu_event_elapsed(gt_backend *be, gt_device_event *start, gt_device_event *end, double *seconds)
{
  bool a, b;
  GT_CALL(cpu_event_query(be, start, &a));
  GT_CALL(cpu_event_query(be, end, &b));
  GT_CHECK(a && b, GT_ERR_INTERNAL, "internal error: event_elapsed of an event not complete");
  *seconds = end->time - start->time;
  return GT_SUCCESS;
}

static int cpu_sync(gt_backend *be)
{
  gt_cpu_state *st = gt_state(be);
  for (int i = 0; i < st->nstreams; i++)
    GT_CALL(gt_stream_drain(st->streams[i]));
  return GT_SUCCESS;
}

// ---- copies and fills ------------------------------------------------------------------------

typedef struct {
  gt_backend *be;
  void *dst;
  const void *src;
  size_t bytes;
} gt_copy_args;

/* Large copies (a checkpoint's snapshot, uploads of whole tensors) by all
 * threads: a 1.5 GB copy took 0.12 s on one core of this project's VM and
 * 0.07 s on two. */
static int gt_run_copy(gt_backend *be, const void *args)
{
  (void)be;
  const gt_copy_args *a = args;
  if (a->dst == a->src || !a->bytes)
    return GT_SUCCESS;
  const size_t block = (size_t)1 << 20;
  if (a->bytes < 4 * block) {
    memcpy(a->dst, a->src, a->bytes);
    return GT_SUCCESS;
  }
  const size_t nblocks = (a->bytes + block - 1) / block;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nblocks; b++) {
    const size_t off = b * block;
    memcpy((char *)a->dst + off, (const char *)a->src + off,
           a->bytes - off < block ? a->bytes - off : block);
  }
  return GT_SUCCESS;
}

static int cpu_copy(gt_backend *be, void *dst, const void *src, size_t bytes, gt_stream *s)
{
  gt_copy_args a = {be, dst, src, bytes};
  gt_cmd cmd;
  GT_PACK(cmd, gt_run_copy, a);
  GT_CALL(gt_submit(be, s, &cmd));
  return GT_SUCCESS;
}

typedef struct {
  gt_backend *be;
  void *ptr;
  size_t bytes;
} gt_zero_args;

/* Large buffers (gradients) are zeroed by all threads: first touch and
 * bandwidth both favour it. */
static int gt_run_zero(gt_backend *be, const void *args)
{
  (void)be;
  const gt_zero_args *a = args;
  const size_t block = (size_t)1 << 20;
  if (a->bytes < 4 * block) {
    memset(a->ptr, 0, a->bytes);
    return GT_SUCCESS;
  }
  const size_t nblocks = (a->bytes + block - 1) / block;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nblocks; b++) {
    size_t off = b * block;
    memset((char *)a->ptr + off, 0, a->bytes - off < block ? a->bytes - off : block);
  }
  return GT_SUCCESS;
}

static int cpu_zero(gt_backend *be, void *ptr, size_t bytes)
{
  gt_zero_args a = {be, ptr, bytes};
  gt_cmd cmd;
  GT_PACK(cmd, gt_run_zero, a);
  GT_CALL(gt_submit(be, NULL, &cmd));
  return GT_SUCCESS;
}

// ---- kernels: one command per op, run through the kernel table ---------------------------------

#define GT_KERNELS(be) (gt_state(be)->kernels)

typedef struct {
  gt_backend *be;
  gt_dtype dst_t, src_t;
  void *dst;
  const void *src;
  size_t n;
} gt_cast_args;
static int gt_run_cast(gt_backend *be, const void *p)
{
  const gt_cast_args *a = p;
  return GT_KERNELS(be)->cast(be, a->dst_t, a->dst, a->src_t, a->src, a->n);
}
static int cpu_cast(gt_backend *be, gt_dtype dst_t, void *dst, gt_dtype src_t,
                    const void *src, size_t n)
{
  gt_cast_args a = {be, dst_t, src_t, dst, src, n};
  gt_cmd c;
  GT_PACK(c, gt_run_cast, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *out;
  const void *in, *w, *bias, *residual;
  int64_t N, C, OC;
} gt_linf_args;
static int gt_run_linf(gt_backend *be, const void *p)
{
  const gt_linf_args *a = p;
  return GT_KERNELS(be)->linear_forward(be, a->dt, a->out, a->in, a->w, a->bias, a->residual,
                                        a->N, a->C, a->OC);
}
static int cpu_linear_forward(gt_backend *be, gt_dtype dt, void *out, const void *in,
                              const void *w, const void *bias, const void *residual, int64_t N,
                              int64_t C, int64_t OC)
{
  gt_linf_args a = {be, dt, out, in, w, bias, residual, N, C, OC};
  gt_cmd c;
  GT_PACK(c, gt_run_linf, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *din;
  float *dw, *dbias;
  const void *dout, *in, *w;
  int64_t N, C, OC;
} gt_linb_args;
static int gt_run_linb(gt_backend *be, const void *p)
{
  const gt_linb_args *a = p;
  return GT_KERNELS(be)->linear_backward(be, a->dt, a->din, a->dw, a->dbias, a->dout, a->in,
                                         a->w, a->N, a->C, a->OC);
}
static int cpu_linear_backward(gt_backend *be, gt_dtype dt, void *din, float *dw, float *dbias,
                               const void *dout, const void *in, const void *w, int64_t N,
                               int64_t C, int64_t OC)
{
  gt_linb_args a = {be, dt, din, dw, dbias, dout, in, w, N, C, OC};
  gt_cmd c;
  GT_PACK(c, gt_run_linb, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *out;
  float *mean, *rstd;
  const void *in, *w, *b;
  int64_t N, C;
} gt_lnf_args;
static int gt_run_lnf(gt_backend *be, const void *p)
{
  const gt_lnf_args *a = p;
  return GT_KERNELS(be)->layernorm_forward(be, a->dt, a->out, a->mean, a->rstd, a->in, a->w,
                                           a->b, a->N, a->C);
}
static int cpu_layernorm_forward(gt_backend *be, gt_dtype dt, void *out, float *mean,
                                 float *rstd, const void *in, const void *w, const void *b,
                                 int64_t N, int64_t C)
{
  gt_lnf_args a = {be, dt, out, mean, rstd, in, w, b, N, C};
  gt_cmd c;
  GT_PACK(c, gt_run_lnf, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *din;
  float *dw, *db;
  const void *dout, *in, *w;
  const float *mean, *rstd;
  int64_t N, C;
} gt_lnb_args;
static int gt_run_lnb(gt_backend *be, const void *p)
{
  const gt_lnb_args *a = p;
  return GT_KERNELS(be)->layernorm_backward(be, a->dt, a->din, a->dw, a->db, a->dout, a->in,
                                            a->w, a->mean, a->rstd, a->N, a->C);
}
static int cpu_layernorm_backward(gt_backend *be, gt_dtype dt, void *din, float *dw, float *db,
                                  const void *dout, const void *in, const void *w,
                                  const float *mean, const float *rstd, int64_t N, int64_t C)
{
  gt_lnb_args a = {be, dt, din, dw, db, dout, in, w, mean, rstd, N, C};
  gt_cmd c;
  GT_PACK(c, gt_run_lnb, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *out;
  const void *in, *dout;
  size_t n;
} gt_gelu_args;
static int gt_run_geluf(gt_backend *be, const void *p)
{
  const gt_gelu_args *a = p;
  return GT_KERNELS(be)->gelu_forward(be, a->dt, a->out, a->in, a->n);
}
static int cpu_gelu_forward(gt_backend *be, gt_dtype dt, void *out, const void *in, size_t n)
{
  gt_gelu_args a = {be, dt, out, in, NULL, n};
  gt_cmd c;
  GT_PACK(c, gt_run_geluf, a);
  return gt_submit(be, NULL, &c);
}
static int gt_run_gelub(gt_backend *be, const void *p)
{
  const gt_gelu_args *a = p;
  return GT_KERNELS(be)->gelu_backward(be, a->dt, a->out, a->in, a->dout, a->n);
}
static int cpu_gelu_backward(gt_backend *be, gt_dtype dt, void *din, const void *in,
                             const void *dout, size_t n)
{
  gt_gelu_args a = {be, dt, din, in, dout, n};
  gt_cmd c;
  GT_PACK(c, gt_run_gelub, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *out; /* forward: out; backward: din */
  float *rstd_out, *dw;
  const void *in, *w, *dout;
  const float *rstd;
  float eps;
  int64_t N, C;
} gt_rms_args;
static int gt_run_rmsf(gt_backend *be, const void *p)
{
  const gt_rms_args *a = p;
  return GT_KERNELS(be)->rmsnorm_forward(be, a->dt, a->out, a->rstd_out, a->in, a->w, a->eps,
                                         a->N, a->C);
}
static int cpu_rmsnorm_forward(gt_backend *be, gt_dtype dt, void *out, float *rstd,
                               const void *in, const void *w, float eps, int64_t N, int64_t C)
{
  gt_rms_args a = {.be = be, .dt = dt, .out = out, .rstd_out = rstd, .in = in, .w = w,
                   .eps = eps, .N = N, .C = C};
  gt_cmd c;
  GT_PACK(c, gt_run_rmsf, a);
  return gt_submit(be, NULL, &c);
}
static int gt_run_rmsb(gt_backend *be, const void *p)
{
  const gt_rms_args *a = p;
  return GT_KERNELS(be)->rmsnorm_backward(be, a->dt, a->out, a->dw, a->dout, a->in, a->w,
                                          a->rstd, a->N, a->C);
}
static int cpu_rmsnorm_backward(gt_backend *be, gt_dtype dt, void *din, float *dw,
                                const void *dout, const void *in, const void *w,
                                const float *rstd, int64_t N, int64_t C)
{
  gt_rms_args a = {.be = be, .dt = dt, .out = din, .dw = dw, .in = in, .w = w, .dout = dout,
                   .rstd = rstd, .N = N, .C = C};
  gt_cmd c;
  GT_PACK(c, gt_run_rmsb, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *x;
  const float *cos, *sin;
  int64_t B, T, S, nrot, hs, pos0;
} gt_rope_args;
static int gt_run_ropef(gt_backend *be, const void *p)
{
  const gt_rope_args *a = p;
  return GT_KERNELS(be)->rope_forward(be, a->dt, a->x, a->cos, a->sin, a->B, a->T, a->S,
                                      a->nrot, a->hs, a->pos0);
}
static int cpu_rope_forward(gt_backend *be, gt_dtype dt, void *x, const float *cos,
                            const float *sin, int64_t B, int64_t T, int64_t S, int64_t nrot,
                            int64_t hs, int64_t pos0)
{
  gt_rope_args a = {.be = be, .dt = dt, .x = x, .cos = cos, .sin = sin, .B = B, .T = T,
                    .S = S, .nrot = nrot, .hs = hs, .pos0 = pos0};
  gt_cmd c;
  GT_PACK(c, gt_run_ropef, a);
  return gt_submit(be, NULL, &c);
}
static int gt_run_ropeb(gt_backend *be, const void *p)
{
  const gt_rope_args *a = p;
  return GT_KERNELS(be)->rope_backward(be, a->dt, a->x, a->cos, a->sin, a->B, a->T, a->S,
                                       a->nrot, a->hs, a->pos0);
}
static int cpu_rope_backward(gt_backend *be, gt_dtype dt, void *dx, const float *cos,
                             const float *sin, int64_t B, int64_t T, int64_t S, int64_t nrot,
                             int64_t hs, int64_t pos0)
{
  gt_rope_args a = {.be = be, .dt = dt, .x = dx, .cos = cos, .sin = sin, .B = B, .T = T,
                    .S = S, .nrot = nrot, .hs = hs, .pos0 = pos0};
  gt_cmd c;
  GT_PACK(c, gt_run_ropeb, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *out; /* forward: out; backward: dh */
  const void *h, *dout;
  int64_t N, F;
} gt_swiglu_args;
static int gt_run_swiglub(gt_backend *be, const void *p)
{
  const gt_swiglu_args *a = p;
  return GT_KERNELS(be)->swiglu_backward(be, a->dt, a->out, a->dout, a->h, a->N, a->F);
}
static int gt_run_swigluf(gt_backend *be, const void *p)
{
  const gt_swiglu_args *a = p;
  return GT_KERNELS(be)->swiglu_forward(be, a->dt, a->out, a->h, a->N, a->F);
}
static int cpu_swiglu_forward(gt_backend *be, gt_dtype dt, void *out, const void *h, int64_t N,
                              int64_t F)
{
  gt_swiglu_args a = {.be = be, .dt = dt, .out = out, .h = h, .N = N, .F = F};
  gt_cmd c;
  GT_PACK(c, gt_run_swigluf, a);
  return gt_submit(be, NULL, &c);
}
static int cpu_swiglu_backward(gt_backend *be, gt_dtype dt, void *dh, const void *dout,
                               const void *h, int64_t N, int64_t F)
{
  gt_swiglu_args a = {.be = be, .dt = dt, .out = dh, .h = h, .dout = dout, .N = N, .F = F};
  gt_cmd c;
  GT_PACK(c, gt_run_swiglub, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  float *probs, *lse, *gate;
  int32_t *sel;
  const float *logits;
  int64_t N, E, k;
} gt_route_args;
static int gt_run_route(gt_backend *be, const void *p)
{
  const gt_route_args *a = p;
  return GT_KERNELS(be)->moe_route(be, a->probs, a->lse, a->sel, a->gate, a->logits, a->N, a->E,
                                   a->k);
}
static int cpu_moe_route(gt_backend *be, float *probs, float *lse, int32_t *sel, float *gate,
                         const float *logits, int64_t N, int64_t E, int64_t k)
{
  gt_route_args a = {.be = be, .probs = probs, .lse = lse, .gate = gate, .sel = sel,
                     .logits = logits, .N = N, .E = E, .k = k};
  gt_cmd c;
  GT_PACK(c, gt_run_route, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  int32_t *pos, *load, *kept;
  const int32_t *sel;
  int64_t N, k, E, capacity;
} gt_assign_args;
static int gt_run_assign(gt_backend *be, const void *p)
{
  const gt_assign_args *a = p;
  return GT_KERNELS(be)->moe_assign(be, a->pos, a->load, a->kept, a->sel, a->N, a->k, a->E,
                                    a->capacity);
}
static int cpu_moe_assign(gt_backend *be, int32_t *pos, int32_t *load, int32_t *kept,
                          const int32_t *sel, int64_t N, int64_t k, int64_t E, int64_t capacity)
{
  gt_assign_args a = {.be = be, .pos = pos, .load = load, .kept = kept, .sel = sel, .N = N,
                      .k = k, .E = E, .capacity = capacity};
  gt_cmd c;
  GT_PACK(c, gt_run_assign, a);
  return gt_submit(be, NULL, &c);
}

/* The token-order ops: permute (out = xp, in = x), permute_backward (out =
 * dx, in = dxp), combine (out, in = base, y) and combine_backward (out = dy,
 * in = dout, y). */
typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *out;
  float *dgate;
  const void *in, *y;
  const float *extra, *gate;
  const int32_t *pos;
  int64_t N, k, C;
} gt_moe_tok_args;
static int gt_run_permf(gt_backend *be, const void *p)
{
  const gt_moe_tok_args *a = p;
  return GT_KERNELS(be)->moe_permute(be, a->dt, a->out, a->in, a->pos, a->N, a->k, a->C);
}
static int cpu_moe_permute(gt_backend *be, gt_dtype dt, void *xp, const void *x,
                           const int32_t *pos, int64_t N, int64_t k, int64_t C)
{
  gt_moe_tok_args a = {.be = be, .dt = dt, .out = xp, .in = x, .pos = pos, .N = N, .k = k,
                       .C = C};
  gt_cmd c;
  GT_PACK(c, gt_run_permf, a);
  return gt_submit(be, NULL, &c);
}
static int gt_run_permb(gt_backend *be, const void *p)
{
  const gt_moe_tok_args *a = p;
  return GT_KERNELS(be)->moe_permute_backward(be, a->dt, a->out, a->in, a->extra, a->pos, a->N,
                                              a->k, a->C);
}
static int cpu_moe_permute_backward(gt_backend *be, gt_dtype dt, void *dx, const void *dxp,
                                    const float *extra, const int32_t *pos, int64_t N,
                                    int64_t k, int64_t C)
{
  gt_moe_tok_args a = {.be = be, .dt = dt, .out = dx, .in = dxp, .extra = extra, .pos = pos,
                       .N = N, .k = k, .C = C};
  gt_cmd c;
  GT_PACK(c, gt_run_permb, a);
  return gt_submit(be, NULL, &c);
}
static int gt_run_combf(gt_backend *be, const void *p)
{
  const gt_moe_tok_args *a = p;
  return GT_KERNELS(be)->moe_combine(be, a->dt, a->out, a->in, a->y, a->gate, a->pos, a->N,
                                     a->k, a->C);
}
static int cpu_moe_combine(gt_backend *be, gt_dtype dt, void *out, const void *base,
                           const void *y, const float *gate, const int32_t *pos, int64_t N,
                           int64_t k, int64_t C)
{
  gt_moe_tok_args a = {.be = be, .dt = dt, .out = out, .in = base, .y = y, .gate = gate,
                       .pos = pos, .N = N, .k = k, .C = C};
  gt_cmd c;
  GT_PACK(c, gt_run_combf, a);
  return gt_submit(be, NULL, &c);
}
static int gt_run_combb(gt_backend *be, const void *p)
{
  const gt_moe_tok_args *a = p;
  return GT_KERNELS(be)->moe_combine_backward(be, a->dt, a->out, a->dgate, a->in, a->y,
                                              a->gate, a->pos, a->N, a->k, a->C);
}
static int cpu_moe_combine_backward(gt_backend *be, gt_dtype dt, void *dy, float *dgate,
                                    const void *dout, const void *y, const float *gate,
                                    const int32_t *pos, int64_t N, int64_t k, int64_t C)
{
  gt_moe_tok_args a = {.be = be, .dt = dt, .out = dy, .dgate = dgate, .in = dout, .y = y,
                       .gate = gate, .pos = pos, .N = N, .k = k, .C = C};
  gt_cmd c;
  GT_PACK(c, gt_run_combb, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  float *dlogits;
  const float *dgate, *probs, *lse, *gate;
  const int32_t *sel, *load;
  int64_t N, E, k;
  float aux_scale, z_scale;
} gt_route_back_args;
static int gt_run_routeb(gt_backend *be, const void *p)
{
  const gt_route_back_args *a = p;
  return GT_KERNELS(be)->moe_route_backward(be, a->dlogits, a->dgate, a->probs, a->lse, a->sel,
                                            a->gate, a->load, a->N, a->E, a->k, a->aux_scale,
                                            a->z_scale);
}
static int cpu_moe_route_backward(gt_backend *be, float *dlogits, const float *dgate,
                                  const float *probs, const float *lse, const int32_t *sel,
                                  const float *gate, const int32_t *load, int64_t N, int64_t E,
                                  int64_t k, float aux_scale, float z_scale)
{
  gt_route_back_args a = {.be = be, .dlogits = dlogits, .dgate = dgate, .probs = probs,
                          .lse = lse, .gate = gate, .sel = sel, .load = load, .N = N, .E = E,
                          .k = k, .aux_scale = aux_scale, .z_scale = z_scale};
  gt_cmd c;
  GT_PACK(c, gt_run_routeb, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *out; /* forward: out; backward: dqkv */
  float *lse;
  const void *qkv, *dout, *fwd_out;
  const float *lse_in;
  int64_t B, T, H, Hkv, hs;
} gt_att_args;
static int gt_run_attf(gt_backend *be, const void *p)
{
  const gt_att_args *a = p;
  return GT_KERNELS(be)->attention_forward(be, a->dt, a->out, a->lse, a->qkv, a->B, a->T, a->H,
                                           a->Hkv, a->hs);
}
static int cpu_attention_forward(gt_backend *be, gt_dtype dt, void *out, float *lse,
                                 const void *qkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                 int64_t hs)
{
  gt_att_args a = {be, dt, out, lse, qkv, NULL, NULL, NULL, B, T, H, Hkv, hs};
  gt_cmd c;
  GT_PACK(c, gt_run_attf, a);
  return gt_submit(be, NULL, &c);
}
static int gt_run_attb(gt_backend *be, const void *p)
{
  const gt_att_args *a = p;
  return GT_KERNELS(be)->attention_backward(be, a->dt, a->out, a->dout, a->qkv, a->fwd_out,
                                            a->lse_in, a->B, a->T, a->H, a->Hkv, a->hs);
}
static int cpu_attention_backward(gt_backend *be, gt_dtype dt, void *dqkv, const void *dout,
                                  const void *qkv, const void *out, const float *lse,
                                  int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  gt_att_args a = {be, dt, dqkv, NULL, qkv, dout, out, lse, B, T, H, Hkv, hs};
  gt_cmd c;
  GT_PACK(c, gt_run_attb, a);
  return gt_submit(be, NULL, &c);
}

static int gt_run_attd(gt_backend *be, const void *p)
{
  const gt_att_args *a = p;
  return GT_KERNELS(be)->attention_decode(be, a->dt, a->out, a->qkv, a->T, a->H, a->Hkv,
                                          a->hs);
}
static int cpu_attention_decode(gt_backend *be, gt_dtype dt, void *out, const void *qkv,
                                int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  gt_att_args a = {be, dt, out, NULL, qkv, NULL, NULL, NULL, 1, T, H, Hkv, hs};
  gt_cmd c;
  GT_PACK(c, gt_run_attd, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  void *out;
  float *dwte, *dwpe;
  const int32_t *tokens;
  const void *wte, *wpe, *dout;
  int64_t B, T, C, v0, nv;
} gt_emb_args;
static int gt_run_embf(gt_backend *be, const void *p)
{
  const gt_emb_args *a = p;
  return GT_KERNELS(be)->embedding_forward(be, a->dt, a->out, a->tokens, a->wte, a->wpe, a->B,
                                           a->T, a->C, a->v0, a->nv);
}
static int cpu_embedding_forward(gt_backend *be, gt_dtype dt, void *out, const int32_t *tokens,
                                 const void *wte, const void *wpe, int64_t B, int64_t T,
                                 int64_t C, int64_t v0, int64_t nv)
{
  gt_emb_args a = {be, dt, out, NULL, NULL, tokens, wte, wpe, NULL, B, T, C, v0, nv};
  gt_cmd c;
  GT_PACK(c, gt_run_embf, a);
  return gt_submit(be, NULL, &c);
}
static int gt_run_embb(gt_backend *be, const void *p)
{
  const gt_emb_args *a = p;
  return GT_KERNELS(be)->embedding_backward(be, a->dt, a->dwte, a->dwpe, a->dout, a->tokens,
                                            a->B, a->T, a->C, a->v0, a->nv);
}
static int cpu_embedding_backward(gt_backend *be, gt_dtype dt, float *dwte, float *dwpe,
                                  const void *dout, const int32_t *tokens, int64_t B,
                                  int64_t T, int64_t C, int64_t v0, int64_t nv)
{
  gt_emb_args a = {be, dt, NULL, dwte, dwpe, tokens, NULL, NULL, dout, B, T, C, v0, nv};
  gt_cmd c;
  GT_PACK(c, gt_run_embb, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  gt_dtype dt;
  float *stats_out, *losses;
  void *logits;
  const float *stats;
  const int32_t *targets;
  int P;
  int64_t N, nv, ld, v0;
  float scale;
} gt_xent_args;
static int gt_run_xentp(gt_backend *be, const void *p)
{
  const gt_xent_args *a = p;
  return GT_KERNELS(be)->xent_partial(be, a->dt, a->stats_out, a->logits, a->targets, a->N,
                                      a->nv, a->ld, a->v0);
}
static int cpu_xent_partial(gt_backend *be, gt_dtype dt, float *stats, const void *logits,
                            const int32_t *targets, int64_t N, int64_t nv, int64_t ld,
                            int64_t v0)
{
  gt_xent_args a = {be, dt, stats, NULL, (void *)logits, NULL, targets, 0, N, nv, ld, v0, 0};
  gt_cmd c;
  GT_PACK(c, gt_run_xentp, a);
  return gt_submit(be, NULL, &c);
}
static int gt_run_xentf(gt_backend *be, const void *p)
{
  const gt_xent_args *a = p;
  return GT_KERNELS(be)->xent_finish(be, a->dt, a->losses, a->logits, a->stats, a->P,
                                     a->targets, a->N, a->nv, a->ld, a->v0, a->scale);
}
static int cpu_xent_finish(gt_backend *be, gt_dtype dt, float *losses, void *logits,
                           const float *stats, int P, const int32_t *targets, int64_t N,
                           int64_t nv, int64_t ld, int64_t v0, float dlogit_scale)
{
  gt_xent_args a = {be, dt, NULL, losses, logits, stats, targets, P, N, nv, ld, v0,
                    dlogit_scale};
  gt_cmd c;
  GT_PACK(c, gt_run_xentf, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  float *p, *m, *v;
  const float *g;
  void *compute;
  gt_dtype compute_t;
  size_t n;
  float lr, beta1, beta2, eps, wd, bc1, bc2, mult;
} gt_adamw_args;
static int gt_run_adamw(gt_backend *be, const void *p)
{
  const gt_adamw_args *a = p;
  return GT_KERNELS(be)->adamw(be, a->p, a->g, a->m, a->v, a->compute, a->compute_t, a->n,
                               a->lr, a->beta1, a->beta2, a->eps, a->wd, a->bc1, a->bc2,
                               a->mult);
}
static int cpu_adamw(gt_backend *be, float *p, const float *g, float *m, float *v,
                     void *compute, gt_dtype compute_t, size_t n, float lr, float beta1,
                     float beta2, float eps, float weight_decay, float bc1, float bc2,
                     float grad_mult)
{
  gt_adamw_args a = {be,  p,     m,     v,   g,   compute,      compute_t, n,
                     lr,  beta1, beta2, eps, weight_decay, bc1, bc2,       grad_mult};
  gt_cmd c;
  GT_PACK(c, gt_run_adamw, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  double *acc;
  const float *x;
  size_t n;
} gt_sum_args;
static int gt_run_sum(gt_backend *be, const void *p)
{
  const gt_sum_args *a = p;
  return GT_KERNELS(be)->sum_add(be, a->acc, a->x, a->n);
}
static int gt_run_sumsq(gt_backend *be, const void *p)
{
  const gt_sum_args *a = p;
  return GT_KERNELS(be)->sumsq_add(be, a->acc, a->x, a->n);
}
static int cpu_sum_add(gt_backend *be, double *acc, const float *x, size_t n)
{
  gt_sum_args a = {be, acc, x, n};
  gt_cmd c;
  GT_PACK(c, gt_run_sum, a);
  return gt_submit(be, NULL, &c);
}
static int cpu_sumsq_add(gt_backend *be, double *acc, const float *x, size_t n)
{
  gt_sum_args a = {be, acc, x, n};
  gt_cmd c;
  GT_PACK(c, gt_run_sumsq, a);
  return gt_submit(be, NULL, &c);
}

typedef struct {
  gt_backend *be;
  float *y;
  float a;
  const float *x;
  float b;
  size_t n;
} gt_axpby_args;
static int gt_run_axpby(gt_backend *be, const void *p)
{
  const gt_axpby_args *a = p;
  return GT_KERNELS(be)->axpby(be, a->y, a->a, a->x, a->b, a->n);
}
static int cpu_axpby(gt_backend *be, float *y, float a, const float *x, float b, size_t n)
{
  gt_axpby_args args = {be, y, a, x, b, n};
  gt_cmd c;
  GT_PACK(c, gt_run_axpby, args);
  return gt_submit(be, NULL, &c);
}

// ---- the table ------------------------------------------------------------------------------

static const gt_backend_ops gt_cpu_stream_ops = {
  .alloc = cpu_alloc,
  .free = cpu_free,
  .alloc_host = cpu_alloc_host,
  .free_host = cpu_free_host,
  .stream_create = cpu_stream_create,
  .stream_destroy = cpu_stream_destroy,
  .event_create = cpu_event_create,
  .event_destroy = cpu_event_destroy,
  .event_record = cpu_event_record,
  .event_query = cpu_event_query,
  .event_wait = cpu_event_wait,
  .stream_wait = cpu_stream_wait,
  .event_elapsed = cpu_event_elapsed,
  .sync = cpu_sync,
  .upload = cpu_copy,
  .download = cpu_copy,
  .copy = cpu_copy,
  .zero = cpu_zero,
  .cast = cpu_cast,
  .linear_forward = cpu_linear_forward,
  .linear_backward = cpu_linear_backward,
  .layernorm_forward = cpu_layernorm_forward,
  .layernorm_backward = cpu_layernorm_backward,
  .gelu_forward = cpu_gelu_forward,
  .gelu_backward = cpu_gelu_backward,
  .rmsnorm_forward = cpu_rmsnorm_forward,
  .rmsnorm_backward = cpu_rmsnorm_backward,
  .rope_forward = cpu_rope_forward,
  .rope_backward = cpu_rope_backward,
  .swiglu_forward = cpu_swiglu_forward,
  .swiglu_backward = cpu_swiglu_backward,
  .moe_route = cpu_moe_route,
  .moe_assign = cpu_moe_assign,
  .moe_permute = cpu_moe_permute,
  .moe_permute_backward = cpu_moe_permute_backward,
  .moe_combine = cpu_moe_combine,
  .moe_combine_backward = cpu_moe_combine_backward,
  .moe_route_backward = cpu_moe_route_backward,
  .attention_forward = cpu_attention_forward,
  .attention_backward = cpu_attention_backward,
  .attention_decode = cpu_attention_decode,
  .embedding_forward = cpu_embedding_forward,
  .embedding_backward = cpu_embedding_backward,
  .xent_partial = cpu_xent_partial,
  .xent_finish = cpu_xent_finish,
  .adamw = cpu_adamw,
  .sum_add = cpu_sum_add,
  .sumsq_add = cpu_sumsq_add,
  .axpby = cpu_axpby,
};

int gt_cpu_backend_init(gt_backend *be, const gt_backend_ops *kernels, gt_cpu_mode mode,
                        double delay_us)
{
  gt_cpu_state *st = calloc(1, sizeof *st);
  GT_CHECK_ALLOC(st, sizeof *st);
  st->kernels = kernels;
  st->mode = mode;
  st->delay = delay_us * 1e-6;
  st->table = gt_cpu_stream_ops;
  be->impl = st;
  be->ops = &st->table;
  be->device = GT_HOST;
  be->host_visible = mode != GT_CPU_GUARD;
  int status = gt_cpu_setup(be);
  if (status == GT_SUCCESS)
    status = gt_stream_new(be, &be->compute);
  if (status != GT_SUCCESS) {
    free(st);
    be->impl = NULL;
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  return GT_SUCCESS;
}

int gt_cpu_backend_fini(gt_backend *be)
{
  gt_cpu_state *st = gt_state(be);
  if (!st)
    return GT_SUCCESS;
  int status = cpu_sync(be);
  for (int i = 0; i < st->nstreams; i++)
    gt_stream_free(st->streams[i]);
  free(st);
  be->impl = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}
