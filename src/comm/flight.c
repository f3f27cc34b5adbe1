/*
 * flight.c - the per-rank ring of communication records (flight.h).
 */
#include "gridtrain/flight.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gridtrain/error.h"
#include "gridtrain/fault.h"

#define GT_FLIGHT_COMMS 32

typedef struct gt_flight_rec {
  long id; /* the record's id; the ring slot is id % GT_FLIGHT_RECORDS */
  double t0, t1;
  long step, seq;
  double bytes;
  short comm; /* index into the communicator table */
  short op;
  int peer; /* comm rank, -1 collective */
  int tag;
  char slot;
  int mb;
  char what[40]; /* a file operation's file */
} gt_flight_rec;

/* The point-to-point channel to or from one peer with one tag: MPI matches
 * its sends and receives in order. */
typedef struct gt_flight_p2p {
  int peer, tag, dir; /* dir 1 send, 2 receive */
  long count;         /* begun */
} gt_flight_p2p;

typedef struct gt_flight_comm {
  MPI_Comm comm;
  char name[16];
  int size, instance;
  int *world;          /* world rank of each member */
  long coll;           /* collectives begun */
  gt_flight_p2p *p2p;  /* the channels used so far */
  int np2p, cap;
  bool file;           /* a "file" channel (no communicator; members in world) */
  int hash;            /* ... and a hash of its members, its channel tag */
} gt_flight_comm;

static struct {
  gt_flight_rec ring[GT_FLIGHT_RECORDS];
  long next; /* id of the next record */
  gt_flight_comm comms[GT_FLIGHT_COMMS];
  int ncomms;
  long step;
  char slot;
  int mb;
  atomic_int open;
  _Atomic double last;
  atomic_long waiting; /* the record the main thread waits for, -1: none */
  _Atomic double wait_since; /* ... since when */
} gt_fl = {.waiting = -1};

static const char *const gt_fl_names[GT_FL_NOPS] = {
  "allreduce", "reduce_scatter", "allgather", "gather", "bcast",  "reduce",   "barrier",
  "send",      "recv",           "create",    "open",   "close",  "write",    "checksums"};

const char *gt_flight_op_name(gt_flight_op op)
{
  return op >= 0 && op < GT_FL_NOPS ? gt_fl_names[op] : "?";
}

double gt_flight_wall(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static gt_flight_comm *gt_fl_find(MPI_Comm comm)
{
  for (int i = 0; i < gt_fl.ncomms; i++)
    if (!gt_fl.comms[i].file && gt_fl.comms[i].comm == comm)
      return &gt_fl.comms[i];
  return NULL;
}

/* The world ranks of comm's members into a new array (*size of them). */
static int gt_fl_members(MPI_Comm comm, int **out, int *size)
{
  GT_CALL_MPI(MPI_Comm_size(comm, size));
  int *ranks = malloc(sizeof(int) * (size_t)*size * 2);
  GT_CHECK_ALLOC(ranks, sizeof(int) * (size_t)*size * 2);
  MPI_Group mine, world;
  GT_CALL_MPI(MPI_Comm_group(comm, &mine));
  GT_CALL_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
  for (int r = 0; r < *size; r++)
    ranks[*size + r] = r;
  GT_CALL_MPI(MPI_Group_translate_ranks(mine, *size, ranks + *size, world, ranks));
  GT_CALL_MPI(MPI_Group_free(&mine));
  GT_CALL_MPI(MPI_Group_free(&world));
  *out = ranks;
  return GT_SUCCESS;
}

/* The lowest world rank of a member list: the instance that names a
 * channel in messages. */
static int gt_fl_lowest(const int *ranks, int size)
{
  int lowest = ranks[0];
  for (int r = 1; r < size; r++)
    if (ranks[r] < lowest)
      lowest = ranks[r];
  return lowest;
}

int gt_flight_name(MPI_Comm comm, const char *name)
{
  if (comm == MPI_COMM_NULL)
    return GT_SUCCESS;
  gt_flight_comm *c = gt_fl_find(comm);
  if (c) {
    snprintf(c->name, sizeof c->name, "%s", name);
    return GT_SUCCESS;
  }
  if (gt_fl.ncomms == GT_FLIGHT_COMMS)
    return GT_SUCCESS; /* full: later communicators go unrecorded */
  int size, *ranks;
  GT_CALL(gt_fl_members(comm, &ranks, &size));
  c = &gt_fl.comms[gt_fl.ncomms++];
  memset(c, 0, sizeof *c);
  c->comm = comm;
  snprintf(c->name, sizeof c->name, "%s", name);
  c->size = size;
  c->world = ranks;
  c->instance = gt_fl_lowest(ranks, size);
  return GT_SUCCESS;
}

int gt_flight_file_channel(MPI_Comm comm)
{
  if (comm == MPI_COMM_NULL)
    return -1;
  int size, *ranks;
  if (gt_fl_members(comm, &ranks, &size) != GT_SUCCESS) {
    gt_error_clear(); /* not recorded, the file operation itself goes on */
    return -1;
  }
  unsigned hash = 2166136261u; /* FNV-1a of the member list */
  for (int r = 0; r < size; r++)
    hash = (hash ^ (unsigned)ranks[r]) * 16777619u;
  for (int i = 0; i < gt_fl.ncomms; i++) {
    const gt_flight_comm *c = &gt_fl.comms[i];
    if (c->file && c->size == size && memcmp(c->world, ranks, sizeof(int) * (size_t)size) == 0) {
      free(ranks);
      return i;
    }
  }
  if (size < 2 || gt_fl.ncomms == GT_FLIGHT_COMMS) {
    free(ranks);
    return -1;
  }
  gt_flight_comm *c = &gt_fl.comms[gt_fl.ncomms];
  memset(c, 0, sizeof *c);
  c->comm = MPI_COMM_NULL;
  snprintf(c->name, sizeof c->name, "file");
  c->file = true;
  c->hash = (int)(hash & 0x3fffffff);
  c->size = size;
  c->world = ranks;
  c->instance = gt_fl_lowest(ranks, size);
  return gt_fl.ncomms++;
}

void gt_flight_forget(MPI_Comm comm)
{
  gt_flight_comm *c = gt_fl_find(comm);
  if (c)
    c->comm = MPI_COMM_NULL; /* the counters stay for the records that name it */
}

void gt_flight_step(long step) { gt_fl.step = step; }

void gt_flight_slot(char slot, int mb)
{
  gt_fl.slot = slot;
  gt_fl.mb = mb;
}

/* The channel (peer, tag, dir) of c, made on first use; NULL when out of
 * memory (the operation is then counted as a collective would not be). */
static gt_flight_p2p *gt_fl_p2p(gt_flight_comm *c, int peer, int tag, int dir)
{
  for (int i = 0; i < c->np2p; i++)
    if (c->p2p[i].peer == peer && c->p2p[i].tag == tag && c->p2p[i].dir == dir)
      return &c->p2p[i];
  if (c->np2p == c->cap) {
    const int cap = c->cap ? 2 * c->cap : 16;
    gt_flight_p2p *more = realloc(c->p2p, sizeof *more * (size_t)cap);
    if (!more)
      return NULL;
    c->p2p = more;
    c->cap = cap;
  }
  c->p2p[c->np2p] = (gt_flight_p2p){peer, tag, dir, 0};
  return &c->p2p[c->np2p++];
}

long gt_flight_begin(MPI_Comm comm, gt_flight_op op, size_t bytes)
{
  const long id = gt_flight_begin_p2p(comm, op, bytes, -1, 0);
  if (id >= 0) /* a blocking operation: waited for at once */
    gt_flight_wait_on(id);
  return id;
}

long gt_flight_wait_on(long id)
{
  atomic_store(&gt_fl.wait_since, gt_flight_wall());
  return atomic_exchange(&gt_fl.waiting, id);
}

/* Begin op on c (a file operation of file `what`: not skipped). */
static long gt_fl_begin(gt_flight_comm *c, gt_flight_op op, size_t bytes, int peer, int tag,
                        const char *what)
{
  /* Test-only faults (fault.h): this rank sleeps before, or skips, the
   * operation (world rank from the table: the recorder has no grid). */
  const int me = gt_fault_rank();
  if (gt_fault_hit_op("coll_sleep", me, gt_fl.step, c->name, gt_fl_names[op])) {
    fprintf(stderr, "gridtrain: GT_FAULT=coll_sleep: rank %d sleeps before %s %s%s%s #%ld\n",
            me, c->name, gt_fl_names[op], what ? " " : "", what ? what : "",
            peer < 0 ? c->coll : 0L);
    for (int i = 0; i < 3600; i++)
      sleep(1);
  }
  if (gt_fault_hit_op("kill", me, gt_fl.step, c->name, gt_fl_names[op])) {
    fprintf(stderr, "gridtrain: GT_FAULT=kill: killing rank %d at %s %s (t=%.3f)\n", me,
            c->name, gt_fl_names[op], gt_flight_wall());
    fflush(stderr);
    raise(SIGKILL);
  }
  if (!c->file && gt_fault_hit_op("coll_skip", me, gt_fl.step, c->name, gt_fl_names[op])) {
    fprintf(stderr, "gridtrain: GT_FAULT=coll_skip: rank %d skips %s %s\n", me, c->name,
            gt_fl_names[op]);
    return GT_FLIGHT_SKIP;
  }
  const long id = gt_fl.next++;
  gt_flight_rec *r = &gt_fl.ring[id % GT_FLIGHT_RECORDS];
  if (r->t1 == 0 && r->t0 != 0)
    atomic_fetch_sub(&gt_fl.open, 1); /* an open record overwritten: no longer counted */
  r->id = id;
  r->t0 = gt_flight_wall();
  r->t1 = 0;
  r->step = gt_fl.step;
  r->bytes = (double)bytes;
  r->comm = (short)(c - gt_fl.comms);
  r->op = (short)op;
  r->peer = peer;
  r->tag = tag;
  r->slot = gt_fl.slot;
  r->mb = gt_fl.mb;
  snprintf(r->what, sizeof r->what, "%s", what ? what : "");
  gt_flight_p2p *ch = peer >= 0 && peer < c->size
                          ? gt_fl_p2p(c, peer, tag, op == GT_FL_SEND ? 1 : 2)
                          : NULL;
  if (ch)
    r->seq = ch->count++;
  else
    r->seq = c->coll++;
  atomic_fetch_add(&gt_fl.open, 1);
  atomic_store(&gt_fl.last, r->t0);
  return id;
}

long gt_flight_begin_p2p(MPI_Comm comm, gt_flight_op op, size_t bytes, int peer, int tag)
{
  gt_flight_comm *c = gt_fl_find(comm);
  if (!c)
    return -1;
  return gt_fl_begin(c, op, bytes, peer, tag, NULL);
}

long gt_flight_begin_file(int channel, gt_flight_op op, const char *what)
{
  if (channel < 0 || channel >= gt_fl.ncomms || !gt_fl.comms[channel].file)
    return -1;
  const long id = gt_fl_begin(&gt_fl.comms[channel], op, 0, -1, 0, what ? what : "");
  if (id >= 0)
    gt_flight_wait_on(id);
  return id;
}

void gt_flight_end(long id)
{
  if (id < 0)
    return;
  gt_flight_rec *r = &gt_fl.ring[id % GT_FLIGHT_RECORDS];
  if (r->id != id || r->t1 != 0)
    return; /* overwritten by newer records, or ended already */
  r->t1 = gt_flight_wall();
  long w = id;
  atomic_compare_exchange_strong(&gt_fl.waiting, &w, -1L);
  atomic_fetch_sub(&gt_fl.open, 1);
  atomic_store(&gt_fl.last, r->t1);
}

void gt_flight_progress(void) { atomic_store(&gt_fl.last, gt_flight_wall()); }

int gt_flight_open(void) { return atomic_load(&gt_fl.open); }

double gt_flight_last_activity(void) { return atomic_load(&gt_fl.last); }

// ---- channels and dumps -------------------------------------------------------------------

/* Add (or find) the channel of comm c, peer p (-1) and direction dir. */
static gt_flight_channel *gt_fl_channel(gt_flight_channel *out, int max, int *n,
                                        const gt_flight_comm *c, const gt_flight_p2p *pc)
{
  const int peer_world = pc ? c->world[pc->peer] : -1, dir = pc ? pc->dir : 0;
  const int tag = pc ? pc->tag : c->hash;
  for (int i = 0; i < *n; i++)
    if (out[i].instance == c->instance && strcmp(out[i].comm, c->name) == 0 &&
        out[i].peer_world == peer_world && out[i].dir == dir && out[i].tag == tag)
      return &out[i];
  if (*n == max)
    return NULL;
  gt_flight_channel *ch = &out[(*n)++];
  memset(ch, 0, sizeof *ch);
  snprintf(ch->comm, sizeof ch->comm, "%s", c->name);
  ch->instance = c->instance;
  ch->peer_world = peer_world;
  ch->dir = dir;
  ch->tag = tag;
  ch->entered = pc ? pc->count : c->coll;
  ch->oldest = ch->waited = -1;
  ch->size = c->size;
  for (int m = 0; m < c->size && m < GT_FLIGHT_MEMBERS; m++)
    ch->members[m] = c->world[m];
  return ch;
}

void gt_flight_channels(gt_flight_channel *out, int max, int *n)
{
  *n = 0;
  for (int i = 0; i < gt_fl.ncomms; i++) {
    const gt_flight_comm *c = &gt_fl.comms[i];
    if (c->comm == MPI_COMM_NULL && !c->file)
      continue; /* forgotten */
    if (c->size > 1)
      gt_fl_channel(out, max, n, c, NULL);
    for (int k = 0; k < c->np2p; k++)
      gt_fl_channel(out, max, n, c, &c->p2p[k]);
  }
  /* the oldest open operation of each channel */
  const long first = gt_fl.next > GT_FLIGHT_RECORDS ? gt_fl.next - GT_FLIGHT_RECORDS : 0;
  for (long id = first; id < gt_fl.next; id++) {
    const gt_flight_rec *r = &gt_fl.ring[id % GT_FLIGHT_RECORDS];
    if (r->id != id || r->t1 != 0)
      continue;
    gt_flight_comm *c = &gt_fl.comms[r->comm];
    if (c->comm == MPI_COMM_NULL && !c->file)
      continue;
    const gt_flight_p2p *pc = r->peer >= 0 && r->peer < c->size
                                  ? gt_fl_p2p(c, r->peer, r->tag, r->op == GT_FL_SEND ? 1 : 2)
                                  : NULL;
    gt_flight_channel *ch = gt_fl_channel(out, max, n, c, pc);
    if (ch && ch->oldest < 0) {
      ch->oldest = r->seq;
      ch->op = r->op;
      ch->step = r->step;
      ch->bytes = r->bytes;
      ch->t0 = r->t0;
      snprintf(ch->what, sizeof ch->what, "%s", r->what);
    }
    if (ch && id == atomic_load(&gt_fl.waiting)) {
      ch->waited = r->seq;
      ch->wt0 = atomic_load(&gt_fl.wait_since);
      ch->wop = r->op;
      ch->wstep = r->step;
      ch->wbytes = r->bytes;
      snprintf(ch->wwhat, sizeof ch->wwhat, "%s", r->what);
    }
  }
}

int gt_flight_dump(FILE *f, int world_rank, const char *where)
{
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  fprintf(f, "# gridtrain flight records of rank %d (%s; host %s, pid %ld), %ld operations "
             "recorded, the last %ld below, oldest first\n",
          world_rank, where, host, (long)getpid(), gt_fl.next,
          gt_fl.next < GT_FLIGHT_RECORDS ? gt_fl.next : (long)GT_FLIGHT_RECORDS);
  fprintf(f, "# rank t_begin t_end comm op seq peer tag bytes step slot\n");
  const long first = gt_fl.next > GT_FLIGHT_RECORDS ? gt_fl.next - GT_FLIGHT_RECORDS : 0;
  for (long id = first; id < gt_fl.next; id++) {
    const gt_flight_rec *r = &gt_fl.ring[id % GT_FLIGHT_RECORDS];
    if (r->id != id)
      continue;
    const gt_flight_comm *c = &gt_fl.comms[r->comm];
    const int peer = r->peer >= 0 && r->peer < c->size ? c->world[r->peer] : -1;
    char slot[16] = "-";
    if (r->slot)
      snprintf(slot, sizeof slot, "%c%d", r->slot, r->mb);
    fprintf(f, "%d %.6f %.6f %s %s %ld %d %d %.0f %ld %s%s%s\n", world_rank, r->t0, r->t1,
            c->name, gt_fl_names[r->op], r->seq, peer, peer < 0 ? -1 : r->tag, r->bytes, r->step,
            slot, r->what[0] ? " " : "", r->what);
  }
  GT_CHECK(fflush(f) == 0 && !ferror(f), GT_ERR_SYSTEM, "cannot write the flight records");
  return GT_SUCCESS;
}

bool gt_flight_parse(const char *line, gt_flight_line *rec)
{
  if (line[0] == '#' || line[0] == '\n' || line[0] == '\0')
    return false;
  memset(rec, 0, sizeof *rec);
  const int n = sscanf(line, "%d %lf %lf %15s %15s %ld %d %d %lf %ld %15s %39s", &rec->rank,
                       &rec->t0, &rec->t1, rec->comm, rec->op, &rec->seq, &rec->peer, &rec->tag,
                       &rec->bytes, &rec->step, rec->slot, rec->what);
  return n == 11 || n == 12;
}
