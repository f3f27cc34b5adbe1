/*
 * fault.c - GT_FAULT, the test-only fault switches (fault.h).
 */
#include "gridtrain/fault.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gridtrain/error.h"

#define GT_FAULT_MAX 16
#define GT_FAULT_ANY (-1)

/* The faults the code knows; default_rank applies when an entry names no
 * rank (GT_FAULT_ANY: every rank). New faults go here and in fault.h. */
static const struct {
  const char *name;
  int default_rank;
} gt_fault_known[] = {
  {"ckpt_kill", 0},
  {"ckpt_write_fail", GT_FAULT_ANY},
  {"ckpt_local_fail", GT_FAULT_ANY},
  {"ckpt_async_fail", GT_FAULT_ANY},
  {"ckpt_async_slow", GT_FAULT_ANY},
  {"slow_step", 1},
  {"coll_skip", 1},
  {"coll_sleep", 1},
  {"kill", 1},
  {"nan_grad", 1},
};
#define GT_FAULT_NKNOWN ((int)(sizeof gt_fault_known / sizeof gt_fault_known[0]))

static struct {
  int parsed;   /* 0: not yet; 1: done */
  int status;   /* result of the parse */
  char message[1024]; /* its error message */
  int n;
  struct {
    int kind; /* index into gt_fault_known */
    int rank; /* GT_FAULT_ANY: every rank */
    long step; /* GT_FAULT_ANY: every step */
    char comm[16], op[16]; /* "": any */
    int spent; /* a one-shot fault (gt_fault_hit_op) that has struck */
  } armed[GT_FAULT_MAX];
  int rank;  /* this process's world rank (gt_fault_set_rank) */
  long step; /* the training step (gt_fault_set_step) */
} gt_faults;

// ----------------------------------------------------------------------------

static void gt_fault_known_list(char *buf, size_t size)
{
  size_t used = 0;
  buf[0] = '\0';
  for (int k = 0; k < GT_FAULT_NKNOWN && used < size; k++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s", k ? ", " : "",
                             gt_fault_known[k].name);
}

static int gt_fault_bad(const char *entry, const char *why)
{
  char known[256];
  gt_fault_known_list(known, sizeof known);
  return gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                      "GT_FAULT: %s in '%s'; the form is NAME[:rank=R][:step=S][:comm=C]"
                      "[:op=O] with NAME one of %s",
                      why, entry, known);
}

static int gt_fault_number(const char *entry, const char *text, long *value)
{
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end != '\0' || v < 0)
    return gt_fault_bad(entry, "a rank or step that is not a non-negative integer");
  *value = v;
  return GT_SUCCESS;
}

/* One entry NAME[:rank=R][:step=S] (modified in place). */
static int gt_fault_parse_entry(char *entry)
{
  char copy[256];
  snprintf(copy, sizeof copy, "%s", entry); /* for messages */
  char *save = NULL;
  const char *name = strtok_r(entry, ":", &save);
  int kind = -1;
  for (int k = 0; name && k < GT_FAULT_NKNOWN; k++)
    if (strcmp(name, gt_fault_known[k].name) == 0)
      kind = k;
  if (kind < 0)
    return gt_fault_bad(copy, "unknown fault");
  if (gt_faults.n == GT_FAULT_MAX)
    return gt_fault_bad(copy, "more than 16 faults");
  long rank = gt_fault_known[kind].default_rank, step = GT_FAULT_ANY;
  memset(&gt_faults.armed[gt_faults.n], 0, sizeof gt_faults.armed[0]);
  for (char *field = strtok_r(NULL, ":", &save); field; field = strtok_r(NULL, ":", &save)) {
    if (strncmp(field, "rank=", 5) == 0)
      GT_CALL(gt_fault_number(copy, field + 5, &rank));
    else if (strncmp(field, "step=", 5) == 0)
      GT_CALL(gt_fault_number(copy, field + 5, &step));
    else if (strncmp(field, "comm=", 5) == 0 && strlen(field + 5) < 16)
      snprintf(gt_faults.armed[gt_faults.n].comm, 16, "%s", field + 5);
    else if (strncmp(field, "op=", 3) == 0 && strlen(field + 3) < 16)
      snprintf(gt_faults.armed[gt_faults.n].op, 16, "%s", field + 3);
    else
      return gt_fault_bad(copy, "a field that is not rank=R, step=S, comm=C or op=O");
  }
  gt_faults.armed[gt_faults.n].kind = kind;
  gt_faults.armed[gt_faults.n].rank = (int)rank;
  gt_faults.armed[gt_faults.n].step = step;
  gt_faults.n++;
  return GT_SUCCESS;
}

static int gt_fault_parse(const char *text)
{
  char *list = strdup(text);
  GT_CHECK_ALLOC(list, strlen(text) + 1);
  int status = GT_SUCCESS;
  char *save = NULL;
  for (char *e = strtok_r(list, ",", &save); e && status == GT_SUCCESS;
       e = strtok_r(NULL, ",", &save))
    status = gt_fault_parse_entry(e);
  free(list);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_fault_init(void)
{
  if (!gt_faults.parsed) {
    gt_faults.parsed = 1;
    const char *text = getenv("GT_FAULT");
    gt_faults.status = text && text[0] ? gt_fault_parse(text) : GT_SUCCESS;
    if (gt_faults.status != GT_SUCCESS) {
      gt_faults.n = 0; /* a list that does not parse arms nothing */
      snprintf(gt_faults.message, sizeof gt_faults.message, "%s", gt_error_message());
    }
    return gt_faults.status;
  }
  if (gt_faults.status != GT_SUCCESS)
    return gt_error_set(gt_faults.status, __FILE__, __LINE__, __func__, "%s", gt_faults.message);
  return GT_SUCCESS;
}

bool gt_fault_hit(const char *name, int rank, long step)
{
  if (!gt_faults.parsed && gt_fault_init() != GT_SUCCESS)
    gt_error_clear(); /* reported at start by whoever calls gt_fault_init */
  for (int i = 0; i < gt_faults.n; i++) {
    const int kind = gt_faults.armed[i].kind;
    if (strcmp(gt_fault_known[kind].name, name) == 0 &&
        (gt_faults.armed[i].rank == GT_FAULT_ANY || gt_faults.armed[i].rank == rank) &&
        (gt_faults.armed[i].step == GT_FAULT_ANY || gt_faults.armed[i].step == step))
      return true;
  }
  return false;
}

bool gt_fault_hit_op(const char *name, int rank, long step, const char *comm, const char *op)
{
  if (!gt_faults.parsed && gt_fault_init() != GT_SUCCESS)
    gt_error_clear();
  for (int i = 0; i < gt_faults.n; i++) {
    const int kind = gt_faults.armed[i].kind;
    if (gt_faults.armed[i].spent || strcmp(gt_fault_known[kind].name, name) != 0)
      continue;
    if ((gt_faults.armed[i].rank == GT_FAULT_ANY || gt_faults.armed[i].rank == rank) &&
        (gt_faults.armed[i].step == GT_FAULT_ANY || gt_faults.armed[i].step == step) &&
        (!gt_faults.armed[i].comm[0] || (comm && strcmp(gt_faults.armed[i].comm, comm) == 0)) &&
        (!gt_faults.armed[i].op[0] || (op && strcmp(gt_faults.armed[i].op, op) == 0))) {
      gt_faults.armed[i].spent = 1;
      return true;
    }
  }
  return false;
}

void gt_fault_set_rank(int rank) { gt_faults.rank = rank; }

int gt_fault_rank(void) { return gt_faults.rank; }

void gt_fault_kill_at(const char *phase)
{
  if (!gt_fault_hit_op("kill", gt_faults.rank, gt_faults.step, NULL, phase))
    return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  fprintf(stderr, "gridtrain: GT_FAULT=kill: killing rank %d in %s at step %ld (t=%.3f)\n",
          gt_faults.rank, phase, gt_faults.step, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
  fflush(stderr);
  raise(SIGKILL);
}

void gt_fault_set_step(long step) { gt_faults.step = step; }
