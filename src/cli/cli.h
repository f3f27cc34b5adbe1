/*
 * cli.h - the subcommands of the gridtrain program (internal to src/cli).
 *
 * Each subcommand gets argv with argv[0] = its own name ("train", "ingest")
 * and the world communicator (MPI is initialised, errors return). It returns
 * a gt_err status; on failure the message is on the error stack and, when
 * every rank knows the same error, it is marked collective (see
 * gt_error_agree). main() prints and turns the status into the exit code.
 * "--help" prints the subcommand's usage on rank 0 and returns GT_SUCCESS.
 */
#ifndef GT_CLI_H
#define GT_CLI_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

/* The whole command line: argv[0] is the program, argv[1] the subcommand
 * (or -h/--help/help, -V/--version), the rest its arguments. Prints the
 * top-level usage for help or a missing command; an unknown command is
 * GT_ERR_INPUT (collective). Returns the subcommand's status. Collective on
 * world (the subcommands are). */
int gt_cli_dispatch(int argc, char **argv, MPI_Comm world);

/* Whether a command's arguments (argv[1..argc-1]) ask for its help: --help
 * or -h anywhere among them. */
bool gt_cli_wants_help(int argc, char **argv);

int gt_cmd_train(int argc, char **argv, MPI_Comm world);
int gt_cmd_ingest(int argc, char **argv, MPI_Comm world);
int gt_cmd_ckpt(int argc, char **argv, MPI_Comm world);
int gt_cmd_plan(int argc, char **argv, MPI_Comm world);
int gt_cmd_flight(int argc, char **argv, MPI_Comm world);
/* `plot`: rank 0 runs the plot script (cmd_plot.c); the others wait for it. */
int gt_cmd_plot(int argc, char **argv, MPI_Comm world);
/* `sample`: generate text from a checkpoint (cmd_sample.c). Collective on the world. */
int gt_cmd_sample(int argc, char **argv, MPI_Comm world);

/* Rank 0 (reads the file system): the checkpoint file a command's
 * CHECKPOINT argument names into path: arg itself, or for a checkpoint
 * directory ([checkpoint] dir) the file its `latest` names, else its newest
 * step file (checkpoint.h's gt_ckpt_candidates). A directory without such
 * files sets *no_checkpoint (path is arg then): the caller says what else it
 * takes there. Not collective (ckpt_arg.c). */
int gt_cli_checkpoint(const char *arg, char *path, size_t size, bool *no_checkpoint);

/* `score`: the loss of a checkpoint's model on text or token files
 * (cmd_score.c). Collective on the world. */
int gt_cmd_score(int argc, char **argv, MPI_Comm world);

#endif /* GT_CLI_H */
