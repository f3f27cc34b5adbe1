/*
 * watchdog.c - the hang watchdog's thread, its out-of-band messages and the
 * diagnosis (watchdog.h).
 */
#include "gridtrain/watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/flight.h"

#define GT_WD_CHANNELS 160
#define GT_WD_TAG_ALERT 1
#define GT_WD_TAG_DUMP 2
#define GT_WD_TAG_SUMMARY 3
#define GT_WD_BACKUP_S 2.0  /* rank 1 takes over when rank 0 has not acted */
#define GT_WD_COLLECT_S 4.0 /* the diagnoser waits this long for summaries */
#define GT_WD_SELF_EXIT_S 15.0

typedef struct gt_wd_place {
  char host[48];
  char where[40];
  long pid;
} gt_wd_place;

typedef struct gt_wd_summary {
  int rank, stuck, nch;
  double idle;
  long step;
  gt_flight_channel ch[GT_WD_CHANNELS];
} gt_wd_summary;

static struct {
  bool running, mpi;
  pthread_t thread;
  atomic_int stop;
  MPI_Comm comm;
  int rank, size;
  double timeout;
  char dir[1024];
  gt_wd_place *places; /* every rank's, gathered at start */
  /* thread state */
  MPI_Request alert_req, dump_req;
  int alert_buf, dump_buf;
  bool dumped, diagnosing;
  double dumped_at, alerted_at;
  gt_wd_summary mine;
  /* the other ranks of this host: a pidfd each (-1: none), and whether
   * their death has been seen */
  int *pidfd;
  double *dead;   /* when its end was seen (0: alive) */
  bool *told;     /* ... and said */
  int ndead;
  int first_dead; /* the first seen to end, -1: none */
} gt_wd;

static void gt_wd_sleep(double s)
{
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* "0-2, 5" into buf from n sorted ranks. */
static void gt_wd_ranks(const int *r, int n, char *buf, size_t size)
{
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < size;) {
    int j = i;
    while (j + 1 < n && r[j + 1] == r[j] + 1)
      j++;
    used += (size_t)snprintf(buf + used, size - used, "%s%d", i ? ", " : "", r[i]);
    if (j > i && used < size)
      used += (size_t)snprintf(buf + used, size - used, "%s%d", j > i + 1 ? "-" : ", ", r[j]);
    i = j + 1;
  }
}

static const char *gt_wd_bytes(double b, char *buf, size_t size)
{
  if (b >= 1 << 20)
    snprintf(buf, size, "%.1f MiB", b / (1 << 20));
  else if (b >= 1024)
    snprintf(buf, size, "%.1f KiB", b / 1024);
  else
    snprintf(buf, size, "%.0f B", b);
  return buf;
}

/* Dump this rank's records and fill its summary. */
static void gt_wd_dump(void)
{
  if (gt_wd.dumped)
    return;
  gt_wd.dumped = true;
  gt_wd.dumped_at = gt_flight_wall();
  char path[1100];
  snprintf(path, sizeof path, "%s/flight-rank%d.txt", gt_wd.dir, gt_wd.rank);
  FILE *f = fopen(path, "w");
  if (f) {
    if (gt_flight_dump(f, gt_wd.rank, gt_wd.places[gt_wd.rank].where) != GT_SUCCESS)
      gt_error_clear();
    fclose(f);
  } else {
    fprintf(stderr, "gridtrain: rank %d: watchdog: cannot write %s: %s\n", gt_wd.rank, path,
            strerror(errno));
  }
  gt_wd_summary *s = &gt_wd.mine;
  memset(s, 0, sizeof *s);
  s->rank = gt_wd.rank;
  s->idle = gt_flight_wall() - gt_flight_last_activity();
  s->stuck = gt_flight_open() > 0 && s->idle > gt_wd.timeout;
  gt_flight_channels(s->ch, GT_WD_CHANNELS, &s->nch);
}

/* Non-blocking sends that this thread never waits for beyond a deadline (a
 * frozen peer cannot hold it up). It tests them on every pass: a summary is
 * large enough to need the receiver's answer (rendezvous), and the main
 * thread, stuck or asleep, makes no progress for it. */
#define GT_WD_SENDS 8
static MPI_Request gt_wd_sends[GT_WD_SENDS] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                                               MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                                               MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                                               MPI_REQUEST_NULL, MPI_REQUEST_NULL};

static void gt_wd_progress(void)
{
  for (int i = 0; gt_wd.mpi && i < GT_WD_SENDS; i++)
    if (gt_wd_sends[i] != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Test(&gt_wd_sends[i], &flag, MPI_STATUS_IGNORE);
    }
}

static void gt_wd_send(const void *buf, int bytes, int dest, int tag)
{
  if (!gt_wd.mpi || dest < 0 || dest >= gt_wd.size || dest == gt_wd.rank)
    return;
  MPI_Request r;
  if (MPI_Isend(buf, bytes, MPI_BYTE, dest, tag, gt_wd.comm, &r) != MPI_SUCCESS)
    return;
  for (int i = 0; i < GT_WD_SENDS; i++)
    if (gt_wd_sends[i] == MPI_REQUEST_NULL) {
      gt_wd_sends[i] = r;
      return;
    }
  MPI_Request_free(&r); /* small ones (alerts, dump requests) go out eagerly */
}

// ---- the diagnosis ------------------------------------------------------------------------

static const gt_flight_channel *gt_wd_find(const gt_wd_summary *s, const char *comm,
                                           int instance, int peer_world, int dir, int tag)
{
  for (int i = 0; i < s->nch; i++)
    if (s->ch[i].instance == instance && s->ch[i].peer_world == peer_world &&
        s->ch[i].dir == dir && s->ch[i].tag == tag && strcmp(s->ch[i].comm, comm) == 0)
      return &s->ch[i];
  return NULL;
}

static void gt_wd_who(int r, char *buf, size_t size)
{
  const gt_wd_place *p = &gt_wd.places[r];
  snprintf(buf, size, "rank %d (host %s, %s)", r, p->host, p->where);
}

/* What rank r waits for: the operation its main thread waits in, else
 * its oldest open one. */
typedef struct gt_wd_wait {
  const gt_flight_channel *ch;
  long seq, step;
  int op;
  double bytes, t0;
  const char *what; /* a file operation's file */
} gt_wd_wait;

static bool gt_wd_wait_of(const gt_wd_summary *s, gt_wd_wait *w)
{
  memset(w, 0, sizeof *w);
  if (!s)
    return false;
  for (int i = 0; i < s->nch; i++)
    if (s->ch[i].waited >= 0) {
      const gt_flight_channel *c = &s->ch[i];
      *w = (gt_wd_wait){c, c->waited, c->wstep, c->wop, c->wbytes, c->wt0, c->wwhat};
      return true;
    }
  for (int i = 0; i < s->nch; i++) {
    const gt_flight_channel *c = &s->ch[i];
    if (c->oldest >= 0 && (!w->ch || c->t0 < w->t0))
      *w = (gt_wd_wait){c, c->oldest, c->step, c->op, c->bytes, c->t0, c->what};
  }
  return w->ch != NULL;
}

/* The members of r's wait that hold it up: those that never entered it or
 * did not answer (or, when every member entered it, those still in it while
 * another finished). Returns the count into out; *verb says which. */
static int gt_wd_culprits(gt_wd_summary **S, int r, const gt_wd_wait *w, int *out,
                          const char **verb)
{
  const gt_flight_channel *pc = w->ch;
  int members[GT_FLIGHT_MEMBERS], nm = 0;
  if (pc->dir == 0) {
    nm = pc->size < GT_FLIGHT_MEMBERS ? pc->size : GT_FLIGHT_MEMBERS;
    memcpy(members, pc->members, sizeof(int) * (size_t)nm);
  } else {
    members[nm++] = pc->peer_world;
  }
  int never = 0, silent = 0, inside = 0, finished = 0, busy = 0;
  int nv[GT_FLIGHT_MEMBERS], sl[GT_FLIGHT_MEMBERS], fin[GT_FLIGHT_MEMBERS];
  int bz[GT_FLIGHT_MEMBERS];
  for (int i = 0; i < nm; i++) {
    const int m = members[i];
    if (m < 0 || m >= gt_wd.size || m == r)
      continue;
    if (!S[m]) {
      sl[silent++] = m;
      continue;
    }
    const gt_flight_channel *c =
        pc->dir == 0 ? gt_wd_find(S[m], pc->comm, pc->instance, -1, 0, pc->tag)
                     : gt_wd_find(S[m], pc->comm, pc->instance, r, pc->dir == 1 ? 2 : 1, pc->tag);
    if (!c || c->entered <= w->seq)
      nv[never++] = m;
    else if (c->oldest >= 0 && c->oldest <= w->seq && !S[m]->stuck)
      bz[busy++] = m; /* inside, and active: a long write of its own */
    else if (c->oldest >= 0 && c->oldest <= w->seq)
      inside++;
    else
      fin[finished++] = m;
  }
  int n = 0;
  /* A member that finished what r still waits in matched another operation
   * there: one of them skipped or added one. */
  const int *from = never ? nv : silent ? sl : finished ? fin : busy ? bz : NULL;
  const int count = never ? never : silent ? silent : finished ? finished : busy;
  *verb = never      ? "never entered"
          : silent   ? "did not answer (dead or frozen) in"
          : finished ? "finished"
                     : "was still working (not stuck) in";
  for (int i = 0; from && i < count; i++)
    out[n++] = from[i];
  return n;
}

/* The operation of w in words, as the culprits see it (the other side of a
 * send is a receive). */
static void gt_wd_what(int r, const gt_wd_wait *w, char *buf, size_t size)
{
  char b[32];
  const gt_flight_channel *c = w->ch;
  if (c->dir == 0 && w->what && w->what[0]) /* a file operation */
    snprintf(buf, size, "%s %s %s #%ld (step %ld)", c->comm,
             gt_flight_op_name((gt_flight_op)w->op), w->what, w->seq, w->step);
  else if (c->dir == 0)
    snprintf(buf, size, "%s %s #%ld (step %ld, %s)", c->comm,
             gt_flight_op_name((gt_flight_op)w->op), w->seq, w->step,
             gt_wd_bytes(w->bytes, b, sizeof b));
  else
    snprintf(buf, size, "%s %s #%ld %s rank %d, tag %d (step %ld, %s)", c->comm,
             c->dir == 1 ? "recv" : "send", w->seq, c->dir == 1 ? "from" : "to", r, c->tag,
             w->step, gt_wd_bytes(w->bytes, b, sizeof b));
}

/* The one line for the edge "rank r waits in w for culprits". */
static void gt_wd_line(gt_wd_summary **S, int r, const gt_wd_wait *w, const int *cul, int nc,
                       const char *verb, char *line, size_t size)
{
  char what[200], who[600] = "", wl[256];
  gt_wd_what(r, w, what, sizeof what);
  size_t used = 0;
  for (int i = 0; i < nc && i < 4 && used < sizeof who; i++) {
    char one[160];
    gt_wd_who(cul[i], one, sizeof one);
    used += (size_t)snprintf(who + used, sizeof who - used, "%s%s", i ? ", " : "", one);
  }
  if (nc > 4 && used < sizeof who)
    snprintf(who + used, sizeof who - used, " and %d more", nc - 4);
  /* everyone who waits in the same operation */
  int waiters[GT_FLIGHT_MEMBERS + 1], nw = 0;
  for (int m = 0; m < gt_wd.size && nw < GT_FLIGHT_MEMBERS; m++) {
    gt_wd_wait o;
    if (m == r || (gt_wd_wait_of(S[m], &o) && o.ch->dir == 0 && w->ch->dir == 0 &&
                   o.seq == w->seq && o.ch->instance == w->ch->instance &&
                   o.ch->tag == w->ch->tag && strcmp(o.ch->comm, w->ch->comm) == 0))
      waiters[nw++] = m;
  }
  gt_wd_ranks(waiters, nw, wl, sizeof wl);
  const double waited = gt_flight_wall() - w->t0;
  const bool mismatch = nc > 0 && strcmp(verb, "finished") == 0;
  if (nc > 0)
    snprintf(line, size, "%s %s %s; rank%s %s waited %.1f s in it%s; flight records in "
             "%s/flight-rank*.txt", who, verb, what, nw > 1 ? "s" : "", wl, waited,
             mismatch ? ": the members' operations do not match (a rank skipped or added one)"
                      : "", gt_wd.dir);
  else
    snprintf(line, size, "rank%s %s waited %.1f s in %s, which every member has entered (a "
             "deadlock inside MPI or the network); flight records in %s/flight-rank*.txt",
             nw > 1 ? "s" : "", wl, waited, what, gt_wd.dir);
}

/* The one line, from the summaries S (NULL: no answer) of every rank. From
 * the longest-waiting stuck rank, follow "waits for" to a rank that waits
 * for nothing (in compute, asleep) or did not answer: that edge is the
 * cause. A cycle of waits (a rank skipped an operation and went on to wait
 * in another) is reported by its oldest wait. */
static void gt_wd_diagnose(gt_wd_summary **S, char *line, size_t size)
{
  /* The start: a stuck rank whose wait has culprits (a rank inside a file
   * operation's write scope waits in it as long as the rank that never
   * entered the next file operation does), else any stuck rank, else any. */
  int start = -1;
  gt_wd_wait w0;
  int *probe = malloc(sizeof(int) * GT_FLIGHT_MEMBERS);
  for (int pass = 0; pass < 3 && start < 0; pass++)
    for (int r = 0; r < gt_wd.size; r++) {
      gt_wd_wait w;
      const char *v;
      if (S[r] && (pass == 2 || S[r]->stuck) && gt_wd_wait_of(S[r], &w) &&
          (start < 0 || w.t0 < w0.t0) &&
          (pass > 0 || (probe && gt_wd_culprits(S, r, &w, probe, &v) > 0))) {
        start = r;
        w0 = w;
      }
    }
  free(probe);
  if (start < 0) {
    int nans = 0;
    for (int r = 0; r < gt_wd.size; r++)
      nans += S[r] != NULL;
    snprintf(line, size, "a rank found no progress for %.0f s, but no rank that answered "
             "(%d of %d) has an operation open; flight records in %s/flight-rank*.txt",
             gt_wd.timeout, nans, gt_wd.size, gt_wd.dir);
    return;
  }
  int *path = malloc(sizeof(int) * (size_t)gt_wd.size);
  int *cul = malloc(sizeof(int) * GT_FLIGHT_MEMBERS);
  if (!path || !cul) {
    free(path);
    free(cul);
    snprintf(line, size, "out of memory for the diagnosis");
    return;
  }
  int len = 0, cur = start;
  for (;;) {
    gt_wd_wait w;
    gt_wd_wait_of(S[cur], &w);
    path[len++] = cur;
    const char *verb;
    const int nc = gt_wd_culprits(S, cur, &w, cul, &verb);
    if (nc == 0 && len > 1) {
      /* cur waits in an operation that every member entered (a write scope)
       * while the previous rank waits for cur in a later one: that edge */
      cur = path[len - 2];
      gt_wd_wait_of(S[cur], &w);
      const int n2 = gt_wd_culprits(S, cur, &w, cul, &verb);
      gt_wd_line(S, cur, &w, cul, n2, verb, line, size);
      break;
    }
    int next = -1, seen = -1;
    bool terminal = nc == 0;
    for (int i = 0; i < nc && !terminal; i++) {
      gt_wd_wait o;
      if (!S[cul[i]] || !gt_wd_wait_of(S[cul[i]], &o))
        terminal = true;
      for (int j = 0; j < len; j++) /* close the shortest cycle */
        if (path[j] == cul[i] && j > seen)
          seen = j;
      if (next < 0)
        next = cul[i];
    }
    if (seen >= 0)
      next = path[seen];
    if (terminal) {
      gt_wd_line(S, cur, &w, cul, nc, verb, line, size);
      break;
    }
    if (seen >= 0 || len == gt_wd.size) {
      seen = seen >= 0 ? seen : 0; /* a cycle path[seen..len-1]: its oldest wait */
      int best = path[seen];
      gt_wd_wait bw;
      gt_wd_wait_of(S[best], &bw);
      for (int i = seen + 1; i < len; i++) {
        gt_wd_wait o;
        gt_wd_wait_of(S[path[i]], &o);
        if (o.t0 < bw.t0) {
          best = path[i];
          bw = o;
        }
      }
      const int n2 = gt_wd_culprits(S, best, &bw, cul, &verb);
      gt_wd_line(S, best, &bw, cul, n2, verb, line, size);
      break;
    }
    cur = next;
  }
  free(path);
  free(cul);
}

/* The diagnoser: ask every rank for its dump and summary, wait for them
 * (with a deadline), say what hangs, and end the job. */
static void gt_wd_diagnoser(void)
{
  gt_wd.diagnosing = true;
  int me = gt_wd.rank;
  for (int r = 0; r < gt_wd.size; r++)
    gt_wd_send(&me, sizeof me, r, GT_WD_TAG_DUMP);
  gt_wd_dump();
  gt_wd_summary **S = calloc((size_t)gt_wd.size, sizeof *S);
  gt_wd_summary *got = malloc(sizeof *got * (size_t)gt_wd.size);
  if (!S || !got) {
    fprintf(stderr, "gridtrain: hang: out of memory for the diagnosis\n");
    _exit(4);
  }
  S[me] = &gt_wd.mine;
  int have = 1;
  const double deadline = gt_flight_wall() + GT_WD_COLLECT_S;
  while (gt_wd.mpi && have < gt_wd.size && gt_flight_wall() < deadline) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, GT_WD_TAG_SUMMARY, gt_wd.comm, &flag, &st) != MPI_SUCCESS)
      break;
    if (!flag) {
      gt_wd_progress();
      gt_wd_sleep(0.01);
      continue;
    }
    const int src = st.MPI_SOURCE;
    gt_wd_summary *slot = &got[src];
    if (MPI_Recv(slot, (int)sizeof *slot, MPI_BYTE, src, GT_WD_TAG_SUMMARY, gt_wd.comm,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS)
      break;
    if (!S[src] && src != me) {
      S[src] = slot;
      have++;
    }
  }
  char line[2048];
  gt_wd_diagnose(S, line, sizeof line);
  fprintf(stderr, "gridtrain: hang: %s\n", line);
  fflush(stderr);
  char path[1100];
  snprintf(path, sizeof path, "%s/flight-diagnosis.txt", gt_wd.dir);
  FILE *f = fopen(path, "w");
  if (f) {
    fprintf(f, "gridtrain: hang: %s\n", line);
    fclose(f);
  }
  gt_wd_sleep(0.3); /* let the launcher forward stderr before the abort */
  if (gt_wd.mpi)
    MPI_Abort(MPI_COMM_WORLD, 4);
  _exit(4);
}

// ---- the thread ---------------------------------------------------------------------------

static void gt_wd_stuck_line(void)
{
  gt_flight_channel ch[GT_WD_CHANNELS];
  int n = 0;
  gt_flight_channels(ch, GT_WD_CHANNELS, &n);
  const gt_flight_channel *old = NULL;
  for (int i = 0; i < n; i++)
    if (ch[i].oldest >= 0 && (!old || ch[i].t0 < old->t0))
      old = &ch[i];
  if (!old) {
    fprintf(stderr, "gridtrain: rank %d: hang: no progress for %.0f s\n", gt_wd.rank,
            gt_wd.timeout);
    return;
  }
  char peer[32] = "", file[48] = "";
  if (old->dir)
    snprintf(peer, sizeof peer, " %s rank %d", old->dir == 1 ? "to" : "from", old->peer_world);
  if (old->what[0])
    snprintf(file, sizeof file, " %s", old->what);
  fprintf(stderr, "gridtrain: rank %d: hang: waiting %.1f s in %s %s%s #%ld%s (step %ld)\n",
          gt_wd.rank, gt_flight_wall() - old->t0, old->comm,
          gt_flight_op_name((gt_flight_op)old->op), file, old->oldest, peer, old->step);
}

static bool gt_wd_arrived(MPI_Request *req)
{
  if (!gt_wd.mpi || *req == MPI_REQUEST_NULL)
    return false;
  int flag = 0;
  if (MPI_Test(req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    return false;
  return flag != 0;
}

static int gt_wd_summary_bytes(const gt_wd_summary *s)
{
  return (int)(offsetof(gt_wd_summary, ch) + sizeof s->ch[0] * (size_t)s->nch);
}

static void gt_wd_send_summary(void)
{
  for (int r = 0; r < 2; r++)
    gt_wd_send(&gt_wd.mine, gt_wd_summary_bytes(&gt_wd.mine), r, GT_WD_TAG_SUMMARY);
}

// ---- dead ranks on this host -------------------------------------------------------------

/* A descriptor that turns readable when process pid ends (Linux >= 5.3);
 * -1 where there is none. */
static int gt_wd_pidfd(long pid)
{
#ifdef SYS_pidfd_open
  return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
#else
  (void)pid;
  return -1;
#endif
}

static void gt_wd_watch_peers(void)
{
  gt_wd.pidfd = malloc(sizeof(int) * (size_t)gt_wd.size);
  gt_wd.dead = calloc((size_t)gt_wd.size, sizeof(double));
  gt_wd.told = calloc((size_t)gt_wd.size, sizeof(bool));
  gt_wd.ndead = 0;
  gt_wd.first_dead = -1;
  if (!gt_wd.pidfd || !gt_wd.dead || !gt_wd.told) {
    free(gt_wd.pidfd);
    gt_wd.pidfd = NULL;
    return;
  }
  for (int r = 0; r < gt_wd.size; r++)
    gt_wd.pidfd[r] = r != gt_wd.rank && strcmp(gt_wd.places[r].host,
                                                gt_wd.places[gt_wd.rank].host) == 0
                         ? gt_wd_pidfd(gt_wd.places[r].pid)
                         : -1;
}

static void gt_wd_unwatch_peers(void)
{
  for (int r = 0; gt_wd.pidfd && r < gt_wd.size; r++)
    if (gt_wd.pidfd[r] >= 0)
      close(gt_wd.pidfd[r]);
  free(gt_wd.pidfd);
  free(gt_wd.dead);
  free(gt_wd.told);
  gt_wd.pidfd = NULL;
  gt_wd.dead = NULL;
  gt_wd.told = NULL;
}

/* Wait up to s seconds for a rank of this host to end. A rank that ends
 * while this one runs died (a clean end of the job stops the watchdogs
 * first). The lowest surviving rank of the host names it at once, the
 * others 30 ms later if they are still there: before the launcher ends
 * them (Hydra's "PID n" is often a survivor's, one that UCX ended when it
 * could no longer reach the dead rank). */
static void gt_wd_nap(double s)
{
  struct pollfd fds[64];
  int who[64], n = 0;
  for (int r = 0; gt_wd.pidfd && r < gt_wd.size && n < 64; r++)
    if (gt_wd.pidfd[r] >= 0 && gt_wd.dead[r] == 0) {
      fds[n] = (struct pollfd){.fd = gt_wd.pidfd[r], .events = POLLIN};
      who[n++] = r;
    }
  if (n == 0 && gt_wd.ndead == 0) {
    gt_wd_sleep(s);
    return;
  }
  if (n > 0 && poll(fds, (nfds_t)n, (int)(s * 1000)) < 0)
    return;
  const double now = gt_flight_wall();
  bool lower_alive = false;
  for (int i = 0; i < n; i++)
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      gt_wd.dead[who[i]] = now;
      gt_wd.ndead++;
      if (gt_wd.first_dead < 0)
        gt_wd.first_dead = who[i];
    } else if (who[i] < gt_wd.rank) {
      lower_alive = true;
    }
  bool said = false;
  for (int r = 0; gt_wd.ndead && r < gt_wd.size; r++)
    if (gt_wd.dead[r] > 0 && !gt_wd.told[r] && (!lower_alive || now - gt_wd.dead[r] > 0.03)) {
      const gt_wd_place *p = &gt_wd.places[r];
      char after[48] = "";
      if (r != gt_wd.first_dead)
        snprintf(after, sizeof after, " after rank %d", gt_wd.first_dead);
      fprintf(stderr, "gridtrain: rank %d: rank %d (host %s, %s, pid %ld) died%s: its process "
              "ended while the job ran (killed, out of memory, or crashed); the launcher ends "
              "the job\n", gt_wd.rank, r, p->host, p->where, p->pid, after);
      gt_wd.told[r] = said = true;
    }
  if (said)
    fflush(stderr);
}

static void *gt_wd_main(void *arg)
{
  (void)arg;
  const double period = gt_wd.timeout / 10 < 1.0 ? gt_wd.timeout / 10 : 1.0;
  bool alerted = false, alerted_self = false;
  double next = gt_flight_wall();
  while (!atomic_load(&gt_wd.stop)) {
    gt_wd_nap(0.02); /* short naps: gt_watchdog_stop joins quickly */
    gt_wd_progress();
    const double now = gt_flight_wall();
    if (now < next)
      continue;
    next = now + period;
    if (!gt_wd.dumped && gt_wd_arrived(&gt_wd.dump_req)) { /* the diagnoser asks */
      gt_wd_dump();
      gt_wd_send_summary();
    }
    if (!alerted && gt_wd_arrived(&gt_wd.alert_req)) {
      alerted = true;
      gt_wd.alerted_at = now;
    }
    const bool stuck = gt_flight_open() > 0 && now - gt_flight_last_activity() > gt_wd.timeout;
    if (stuck && !alerted_self) {
      alerted_self = true;
      gt_wd_stuck_line();
      if (!gt_wd.mpi) { /* alone: this rank's records and line, then out */
        gt_wd_dump();
        fprintf(stderr, "gridtrain: hang: rank %d found no progress for %.0f s; flight records "
                "in %s/flight-rank%d.txt\n", gt_wd.rank, gt_wd.timeout, gt_wd.dir, gt_wd.rank);
        _exit(4);
      }
      int me = gt_wd.rank;
      gt_wd_send(&me, sizeof me, 0, GT_WD_TAG_ALERT);
      gt_wd_send(&me, sizeof me, 1, GT_WD_TAG_ALERT);
      if (gt_wd.rank < 2 && !alerted) {
        alerted = true;
        gt_wd.alerted_at = now;
      }
    }
    /* rank 0 diagnoses; rank 1 when rank 0 has not asked for the dumps */
    if (alerted && !gt_wd.diagnosing && gt_wd.rank == 0)
      gt_wd_diagnoser();
    if (alerted && !gt_wd.diagnosing && gt_wd.rank == 1 && !gt_wd.dumped &&
        now - gt_wd.alerted_at > GT_WD_BACKUP_S)
      gt_wd_diagnoser();
    if (gt_wd.size == 1 && alerted_self)
      gt_wd_diagnoser();
    if (gt_wd.dumped && now - gt_wd.dumped_at > GT_WD_SELF_EXIT_S) {
      fprintf(stderr, "gridtrain: rank %d: hang: no diagnosis came; exiting\n", gt_wd.rank);
      _exit(4);
    }
  }
  return NULL;
}

// ---- start and stop -----------------------------------------------------------------------

/* The rank tables kept in a directory: the newest jobs' (a job requeued
 * hundreds of times would otherwise fill it with them). */
#define GT_WD_TABLES_KEPT 20

static int gt_wd_is_table(const struct dirent *e)
{
  const size_t n = strlen(e->d_name);
  return strncmp(e->d_name, "ranks-", 6) == 0 && n > 10 && strcmp(e->d_name + n - 4, ".txt") == 0;
}

/* Remove all but the GT_WD_TABLES_KEPT newest rank tables of the directory
 * (their names sort by start time). Best effort. */
static void gt_wd_prune_tables(void)
{
  struct dirent **names = NULL;
  const int n = scandir(gt_wd.dir, &names, gt_wd_is_table, alphasort);
  for (int i = 0; i < n; i++) {
    if (i < n - GT_WD_TABLES_KEPT) {
      char path[1400];
      snprintf(path, sizeof path, "%s/%s", gt_wd.dir, names[i]->d_name);
      unlink(path);
    }
    free(names[i]);
  }
  free(names);
}

/* Rank 0: the job's rank table, DIR/ranks-<UTC start>-<pid of rank 0>.txt
 * (one per job: a rerun in the same directory keeps the earlier jobs', the
 * newest GT_WD_TABLES_KEPT of them), and DIR/ranks.txt a symbolic link to
 * it (the newest job's). */
static void gt_wd_rank_table(void)
{
  mkdir(gt_wd.dir, 0777); /* it may not exist yet */
  char name[96], path[1200], link[1200], tmp[1220];
  const time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  snprintf(name, sizeof name, "ranks-%s-%ld.txt", stamp, gt_wd.places[0].pid);
  snprintf(path, sizeof path, "%s/%s", gt_wd.dir, name);
  FILE *f = fopen(path, "w");
  if (!f)
    return;
  const char *job = getenv("SLURM_JOB_ID");
  fprintf(f, "# gridtrain rank table of the job started %s (Slurm job %s), %d ranks\n", stamp,
          job && job[0] ? job : "-", gt_wd.size);
  fprintf(f, "# rank host pid place\n");
  for (int r = 0; r < gt_wd.size; r++)
    fprintf(f, "%d %s %ld %s\n", r, gt_wd.places[r].host, gt_wd.places[r].pid,
            gt_wd.places[r].where);
  if (fclose(f) != 0)
    return;
  snprintf(link, sizeof link, "%s/ranks.txt", gt_wd.dir);
  snprintf(tmp, sizeof tmp, "%s/ranks.txt.tmp", gt_wd.dir);
  unlink(tmp);
  if (symlink(name, tmp) == 0 && rename(tmp, link) != 0)
    unlink(tmp);
  gt_wd_prune_tables();
}

int gt_watchdog_start(MPI_Comm world, double timeout, const char *dir, const char *where)
{
  gt_watchdog_stop();
  if (timeout <= 0)
    return GT_SUCCESS;
  GT_CALL_MPI(MPI_Comm_rank(world, &gt_wd.rank));
  GT_CALL_MPI(MPI_Comm_size(world, &gt_wd.size));
  gt_wd.mpi = gt_comm_threads() >= MPI_THREAD_MULTIPLE;
  gt_wd.timeout = timeout;
  snprintf(gt_wd.dir, sizeof gt_wd.dir, "%s", dir && dir[0] ? dir : ".");
  gt_wd.dumped = gt_wd.diagnosing = false;
  GT_CALL_MPI(MPI_Comm_dup(world, &gt_wd.comm));
  gt_wd.places = calloc((size_t)gt_wd.size, sizeof *gt_wd.places);
  GT_CHECK_ALLOC(gt_wd.places, sizeof *gt_wd.places * (size_t)gt_wd.size);
  gt_wd_place mine;
  memset(&mine, 0, sizeof mine);
  gethostname(mine.host, sizeof mine.host - 1);
  snprintf(mine.where, sizeof mine.where, "%s", where ? where : "");
  mine.pid = (long)getpid();
  MPI_Request req;
  GT_CALL_MPI(MPI_Iallgather(&mine, (int)sizeof mine, MPI_BYTE, gt_wd.places, (int)sizeof mine,
                             MPI_BYTE, gt_wd.comm, &req));
  GT_CALL(gt_comm_wait(&req));
  if (gt_wd.rank == 0 && strcmp(gt_wd.dir, ".") != 0) /* a run directory was named */
    gt_wd_rank_table();
  gt_wd.alert_req = gt_wd.dump_req = MPI_REQUEST_NULL;
  if (gt_wd.mpi) {
    if (gt_wd.rank < 2)
      GT_CALL_MPI(MPI_Irecv(&gt_wd.alert_buf, sizeof(int), MPI_BYTE, MPI_ANY_SOURCE,
                            GT_WD_TAG_ALERT, gt_wd.comm, &gt_wd.alert_req));
    GT_CALL_MPI(MPI_Irecv(&gt_wd.dump_buf, sizeof(int), MPI_BYTE, MPI_ANY_SOURCE,
                          GT_WD_TAG_DUMP, gt_wd.comm, &gt_wd.dump_req));
  }
  gt_wd_watch_peers();
  atomic_store(&gt_wd.stop, 0);
  const int rc = pthread_create(&gt_wd.thread, NULL, gt_wd_main, NULL);
  GT_CHECK(rc == 0, GT_ERR_SYSTEM, "cannot start the watchdog thread: %s", strerror(rc));
  gt_wd.running = true;
  return GT_SUCCESS;
}

void gt_watchdog_stop(void)
{
  if (!gt_wd.running)
    return;
  atomic_store(&gt_wd.stop, 1);
  pthread_join(gt_wd.thread, NULL);
  gt_wd.running = false;
  MPI_Request *reqs[] = {&gt_wd.alert_req, &gt_wd.dump_req};
  for (int i = 0; i < 2; i++)
    if (*reqs[i] != MPI_REQUEST_NULL) {
      MPI_Cancel(reqs[i]);
      MPI_Wait(reqs[i], MPI_STATUS_IGNORE);
    }
  MPI_Comm_free(&gt_wd.comm);
  gt_wd_unwatch_peers();
  free(gt_wd.places);
  gt_wd.places = NULL;
}
