/*
 * gridtrain/path.h - questions about files that several commands ask before
 * they write (is this output one of the run's inputs?), making the
 * directories an output goes into, and replacing a file atomically.
 *
 * Paths are compared by what they name (device and inode, through symbolic
 * links), not by their spelling: "x", "./x", "../d/x", a symbolic link to x
 * and a hard link to x all name the same file.
 */
#ifndef GRIDTRAIN_PATH_H
#define GRIDTRAIN_PATH_H

#include <stdbool.h>
#include <stddef.h>

/* *same: a and b both exist and are the same file (stat: st_dev and st_ino
 * equal). A path that does not exist (or cannot be stat'ed: a dangling link)
 * names no file and is the same as nothing. Not collective. Returns
 * GT_SUCCESS; GT_ERR_INTERNAL for NULL arguments. */
int gt_path_same_file(const char *a, const char *b, bool *same);

/* Refuse an output that would clobber an input: GT_ERR_INPUT when out (what
 * it is: "[run] metrics") is the same file as inputs[i] for some i < n, with
 * the message "OUT_WHAT 'out' is the same file as IN_WHAT 'in'; ...".
 * NULL or empty entries of inputs are skipped. Call it before any output is
 * opened for writing. Not collective. */
int gt_path_refuse_clobber(const char *out, const char *out_what, int n,
                           const char *const inputs[], const char *const in_what[]);

/* Writes a file's content into the open descriptor fd of the temporary file
 * `tmp` (for messages); returns GT_SUCCESS or an error. */
typedef int (*gt_path_writer)(void *ctx, int fd, const char *tmp);

/* Replace the file `path` atomically: write(ctx, ...) fills PATH.tmp, which is
 * synced and renamed to path, and the directory is synced. On any failure
 * PATH.tmp is removed and path is as it was. A directory that cannot be
 * written to (permission, read-only, missing) is GT_ERR_INPUT ("cannot write
 * PATH.tmp: REASON"); other failures GT_ERR_SYSTEM. Not collective. */
int gt_path_replace(const char *path, gt_path_writer write, void *ctx);

/* gt_path_replace with the content `bytes` bytes at data. */
int gt_path_replace_bytes(const char *path, const void *data, size_t bytes);

/* Write all `bytes` at data to fd (retrying short writes and EINTR);
 * GT_ERR_SYSTEM naming `what` ("cannot write WHAT: REASON"). */
int gt_path_write_all(int fd, const void *data, size_t bytes, const char *what);

/* mkdir -p: make dir and whichever of its parents are missing (mode 0777
 * less the umask). Returns 0, or the errno of the first mkdir that failed,
 * with that directory's path in failed (size bytes; a dir longer than
 * that is ENAMETOOLONG). Existing directories are no error; whether dir is
 * a directory afterwards is the caller's question. Not collective. */
int gt_path_mkdirs(const char *dir, char *failed, size_t size);

/* Expand $VAR and ${VAR} of in from the environment, %h to this host's
 * name (gethostname: a node's own directory where nodes share a file
 * system, such as /dev/shm of network-namespace nodes) and %% to %, into
 * out (size bytes).
 * Returns 0; or -1 with *why (msize bytes) saying what is wrong ("$X is not
 * set", "the path is too long", "an unterminated ${"). Not collective. */
int gt_path_expand_env(const char *in, char *out, size_t size, char *why, size_t msize);

#endif /* GRIDTRAIN_PATH_H */
