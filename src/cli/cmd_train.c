/*
 * cmd_train.c - `gridtrain train DECK [section.key=value ...]`.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gridtrain/config.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"
#include "gridtrain/signals.h"
#include "gridtrain/trainer.h"

static void gt_train_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: gridtrain train DECK [section.key=value ...]\n"
         "       mpiexec -n N gridtrain train DECK [section.key=value ...]\n"
         "\n"
         "Train the model described by the input deck DECK (an INI file) on all MPI\n"
         "ranks of the job. Values given as section.key=value on the command line\n"
         "override the deck, which overrides the defaults below. Rank 0 prints the\n"
         "resolved configuration, one log line every [run] log_every steps, and a\n"
         "summary; [run] metrics names a JSON-lines file with one record per step.\n"
         "\n"
         "With [checkpoint] dir set, checkpoints go there every [checkpoint] every\n"
         "steps and at the end, and a new run resumes from the newest one\n"
         "([checkpoint] resume = auto), in any layout. SIGUSR1 or SIGTERM makes every\n"
         "rank stop at the next step boundary after writing a checkpoint.\n"
         "\n"
         "Exit status: 0 done, 2 bad input (deck, command line, layout, data,\n"
         "checkpoint), 3 stopped by SIGUSR1/SIGTERM after writing a checkpoint\n"
         "(requeue the job to continue), 4 a hang found by the watchdog ([run]\n"
         "hang_timeout; the launcher may report another status, docs/reliability.md),\n"
         "130 stopped by SIGINT after writing a checkpoint, 1 any other error.\n"
         "\n"
         "Deck keys:\n");
  gt_config_print_keys(stdout);
  printf("\nExample: mpiexec -n 8 gridtrain train inputs/default.in run.steps=50 "
         "optim.lr=6e-4\n");
}

/* A run that ends in MPI_Abort (an error of one rank) keeps its trainer as it
 * is, the other ranks may still be in its collectives; it stays reachable
 * from here, so that LeakSanitizer does not count it at the abort's exit. */
static gt_trainer *volatile gt_train_aborting;

int gt_cmd_train(int argc, char **argv, MPI_Comm world)
{
  if (gt_cli_wants_help(argc, argv)) {
    gt_train_usage();
    return GT_SUCCESS;
  }
  if (argc < 2 || argv[1][0] == '-') {
    gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                 argc < 2 ? "train: missing input deck; usage: gridtrain train DECK "
                            "[section.key=value ...] (see 'gridtrain train --help')"
                          : "train: unknown option '%s'; see 'gridtrain train --help'",
                 argc < 2 ? "" : argv[1]);
    gt_error_set_collective(true);
    return GT_ERR_INPUT;
  }
  /* main installed the signal handlers before MPI_Init (signals.h); take
   * them back from any library that replaced them since. */
  GT_CALL(gt_signals_reclaim(NULL));
  gt_config cfg;
  GT_CALL(gt_config_load(&cfg, argv[1], argc - 2, argv + 2, world));
  gt_trainer *tr = NULL;
  int status = gt_trainer_create(&cfg, world, false, &tr);
  status = gt_config_locate_error(&cfg, status); /* a check after parsing: name the line */
  if (status == GT_SUCCESS)
    status = gt_trainer_run(tr);
  /* An error every rank knows (a failed checkpoint, a requeue) ends in
   * MPI_Finalize: close the data files here, so that HDF5's close callbacks
   * there have nothing collective left to do. An error of this rank alone
   * ends in MPI_Abort, and the other ranks may be inside a collective. */
  if (status != GT_SUCCESS && !gt_error_is_collective()) {
    gt_train_aborting = tr;
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  const int closed = gt_trainer_destroy(&tr);
  GT_CALL(status);
  GT_CALL(closed);
  return GT_SUCCESS;
}
