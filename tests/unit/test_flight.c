/*
 * test_flight.c - the flight recorder (flight.h) on one rank: sequence
 * numbers per communicator and per (peer, direction, tag), open counts and
 * the operation waited for, the channels a summary holds, a ring that
 * wraps, a dump that gridtrain flight parses back, and the one-shot
 * coll_skip fault.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test_util.h"
#include "gridtrain/fault.h"
#include "gridtrain/flight.h"

static const gt_flight_channel *find(const gt_flight_channel *ch, int n, const char *comm,
                                     int dir, int tag)
{
  for (int i = 0; i < n; i++)
    if (strcmp(ch[i].comm, comm) == 0 && ch[i].dir == dir && ch[i].tag == tag)
      return &ch[i];
  return NULL;
}

int main(int argc, char **argv)
{
  /* armed before anything parses GT_FAULT: skip a tp all-reduce of step 7 */
  setenv("GT_FAULT", "coll_skip:rank=0:step=7:comm=tp:op=allreduce", 1);
  tu_mpi_init(&argc, &argv);
  MPI_Comm tp, pp;
  MPI_Comm_dup(MPI_COMM_WORLD, &tp);
  MPI_Comm_dup(MPI_COMM_SELF, &pp);
  tap_ok(gt_flight_name(tp, "tp") == GT_SUCCESS && gt_flight_name(pp, "pp") == GT_SUCCESS,
         "name two communicators");
  tap_ok(gt_flight_begin(MPI_COMM_SELF, GT_FL_ALLREDUCE, 8) == -1,
         "a communicator without a name is not recorded");

  // ---- collectives: one sequence per communicator; blocking ones are waited for
  gt_flight_step(3);
  long a = gt_flight_begin(tp, GT_FL_ALLREDUCE, 4096);
  gt_flight_end(a);
  long b = gt_flight_begin(tp, GT_FL_ALLGATHER, 100);
  tap_ok(a >= 0 && b == a + 1 && gt_flight_open() == 1, "two records, one still open");
  gt_flight_channel ch[32];
  int n = 0;
  gt_flight_channels(ch, 32, &n);
  const gt_flight_channel *c = find(ch, n, "tp", 0, 0);
  /* tp is a dup of a world of one: size 1 has no collective channel, so
   * the open one comes from the ring */
  tap_ok(c && c->entered == 2 && c->oldest == 1 && c->op == GT_FL_ALLGATHER && c->step == 3,
         "tp: 2 entered, #1 (the all-gather of step 3) open (entered %ld, oldest %ld)",
         c ? c->entered : -1, c ? c->oldest : -1);
  tap_ok(c && c->waited == 1, "a blocking operation is the one waited for");
  gt_flight_end(b);
  gt_flight_end(b); /* twice: ignored */
  tap_ok(gt_flight_open() == 0, "ending it twice counts once");

  // ---- point to point: per peer, direction and tag
  long s0 = gt_flight_begin_p2p(pp, GT_FL_SEND, 10, 0, 5);
  long s1 = gt_flight_begin_p2p(pp, GT_FL_SEND, 10, 0, 6);
  long s2 = gt_flight_begin_p2p(pp, GT_FL_SEND, 10, 0, 5);
  long r0 = gt_flight_begin_p2p(pp, GT_FL_RECV, 10, 0, 5);
  gt_flight_end(s0);
  gt_flight_end(s1);
  long before = gt_flight_wait_on(r0);
  gt_flight_channels(ch, 32, &n);
  const gt_flight_channel *send5 = find(ch, n, "pp", 1, 5), *send6 = find(ch, n, "pp", 1, 6);
  const gt_flight_channel *recv5 = find(ch, n, "pp", 2, 5);
  tap_ok(send5 && send5->entered == 2 && send5->oldest == 1, "sends with tag 5: 2, #1 open");
  tap_ok(send6 && send6->entered == 1 && send6->oldest == -1, "sends with tag 6: 1, none open");
  tap_ok(recv5 && recv5->entered == 1 && recv5->oldest == 0 && recv5->waited == 0 &&
             recv5->peer_world == 0,
         "receives with tag 5: #0 open and waited for, from world rank 0");
  gt_flight_wait_on(before);
  gt_flight_end(s2);
  gt_flight_end(r0);

  // ---- the fault: the first tp all-reduce of step 7 is skipped, the next ones are not
  gt_flight_step(7);
  long k1 = gt_flight_begin(tp, GT_FL_ALLREDUCE, 8); /* the first that matches */
  long k2 = gt_flight_begin(tp, GT_FL_ALLREDUCE, 8);
  gt_flight_end(k2);
  long k3 = gt_flight_begin(tp, GT_FL_ALLREDUCE, 8);
  gt_flight_end(k3);
  tap_ok(k1 == GT_FLIGHT_SKIP && k2 >= 0 && k3 >= 0, "coll_skip skips one operation, once");
  long hold = gt_flight_begin(tp, GT_FL_REDUCE, 1);
  gt_flight_channels(ch, 32, &n);
  c = find(ch, n, "tp", 0, 0);
  tap_ok(c && c->entered == 5 && c->oldest == 4,
         "a skipped operation is not entered (tp entered %ld)", c ? c->entered : -1);
  gt_flight_end(hold);

  // ---- the ring wraps: the last GT_FLIGHT_RECORDS stay, in order
  for (int i = 0; i < GT_FLIGHT_RECORDS + 100; i++)
    gt_flight_end(gt_flight_begin(tp, GT_FL_BARRIER, 0));
  long open_one = gt_flight_begin(tp, GT_FL_BCAST, 77);
  char path[256];
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(path, sizeof path, "%s/flight-test-%ld.txt", tmp, (long)getpid());
  FILE *f = fopen(path, "w+");
  tap_ok(f && gt_flight_dump(f, 0, "dp 0 pp 0 tp 0") == GT_SUCCESS, "dump the records");
  long lines = 0, last_seq = -1, in_order = 1, open_seen = 0;
  char line[512];
  rewind(f);
  while (f && fgets(line, sizeof line, f)) {
    gt_flight_line r;
    if (!gt_flight_parse(line, &r))
      continue;
    lines++;
    if (strcmp(r.comm, "tp") == 0) {
      in_order &= r.seq > last_seq;
      last_seq = r.seq;
    }
    open_seen += r.t1 <= 0 && strcmp(r.op, "bcast") == 0 && r.bytes == 77;
  }
  if (f)
    fclose(f);
  remove(path);
  tap_ok(lines == GT_FLIGHT_RECORDS, "the dump holds the last %d records (%ld)",
         GT_FLIGHT_RECORDS, lines);
  tap_ok(in_order && open_seen == 1, "oldest first, the open broadcast at the end");
  gt_flight_end(open_one);
  tap_ok(!gt_flight_parse("# a comment\n", &(gt_flight_line){0}) &&
             !gt_flight_parse("1 2 3\n", &(gt_flight_line){0}),
         "comments and short lines are not records");

  gt_flight_forget(tp);
  tap_ok(gt_flight_begin(tp, GT_FL_ALLREDUCE, 8) == -1,
         "a forgotten communicator is not recorded");
  MPI_Comm_free(&tp);
  MPI_Comm_free(&pp);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
