/*
 * gridtrain/error.h - error codes, the per-rank error stack and the call macros.
 *
 * Every function in gridtrain returns an int status: GT_SUCCESS (0) or one of
 * the gt_err codes below. Errors travel up through GT_CALL, which records
 * file:line:function on a small per-rank stack; only main() turns an error
 * into a message and an exit code (see gt_error_report). Deep code never
 * calls exit() or MPI_Abort() itself.
 *
 *   GT_CALL(f(x));                         propagate an error from our code
 *   GT_CHECK(n > 0, GT_ERR_INPUT, "...");  a user mistake: says what to change
 *   GT_ASSERT(p != NULL);                  an internal invariant
 *   GT_CALL_MPI(MPI_Bcast(...));           foreign calls, translated where
 *   GT_CALL_HDF5(H5Dread(...));            they enter (message names the call)
 *
 * Foreign-library macros for CUDA, cuBLAS and cuDNN live in the CUDA backend,
 * which keeps its headers free of mpi.h.
 */
#ifndef GRIDTRAIN_ERROR_H
#define GRIDTRAIN_ERROR_H

#include <stdbool.h>
#include <stddef.h>

/* Status codes. The exit code of the program follows from the code of the
 * first error (gt_error_exit_code). */
typedef enum {
  GT_SUCCESS = 0,
  GT_ERR_INPUT = 2,    /* bad user input: deck, command line, layout, data file */
  GT_ERR_REQUEUE = 3,  /* stopped by a signal after writing a checkpoint: requeue */
  GT_ERR_INTERRUPT = 4, /* stopped by SIGINT (Ctrl-C) after writing a checkpoint */
  GT_ERR_HANG = 5,     /* the watchdog found a rank that hangs (watchdog.h) */
  GT_ERR_SYSTEM = 10,  /* operating system: files, memory, processes */
  GT_ERR_MPI = 11,     /* an MPI call failed */
  GT_ERR_HDF5 = 12,    /* an HDF5 call failed */
  GT_ERR_BLAS = 13,    /* the BLAS library misbehaved */
  GT_ERR_DEVICE = 14,  /* CUDA, cuBLAS or cuDNN failed */
  GT_ERR_NUMERIC = 15, /* non-finite loss or gradient */
  GT_ERR_INTERNAL = 16 /* a broken invariant: a bug in gridtrain */
} gt_err;

/* Exit status of the program for an error code: 0 for success, 2 for bad
 * input (GT_ERR_INPUT), 3 for GT_ERR_REQUEUE, 4 for GT_ERR_HANG, 130 for
 * GT_ERR_INTERRUPT (the shell's code of a SIGINT), 1 for everything else. */
int gt_error_exit_code(int code);

/* Short name of a code ("input", "mpi", ...). */
const char *gt_error_name(int code);

/* Record a new error (clears the stack) with a printf-style message and
 * return code. The message is kept on one line (newlines become spaces).
 * Not collective. */
int gt_error_set(int code, const char *file, int line, const char *func,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Record a new error whose message is the printf-style context, ": ", and
 * the current error's message (the cause), and return code. */
int gt_error_wrap(int code, const char *file, int line, const char *func,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Add a frame to the current error's trace and return code. */
int gt_error_push(int code, const char *file, int line, const char *func);

/* The current error's message (empty string when none) and its origin
 * ("src/x.c:12 (func)"). */
const char *gt_error_message(void);
const char *gt_error_origin(void);

/* Replace the origin of the current error (used when an error is copied
 * from another rank: "rank 3, src/x.c:12 (f)"). */
void gt_error_set_origin(const char *origin);

/* Mark the current error as known identically to every rank (so rank 0 alone
 * reports it and every rank exits cleanly) or query that mark. */
void gt_error_set_collective(bool collective);
bool gt_error_is_collective(void);

/* Print the current error as one line to stderr:
 *   "gridtrain: error: MESSAGE"                       (GT_ERR_INPUT)
 *   "gridtrain: requeue: MESSAGE"                     (GT_ERR_REQUEUE)
 *   "gridtrain: error: MESSAGE [at src/x.c:12 (f)]"   (other codes)
 * rank < 0 omits the rank prefix; otherwise "gridtrain: rank R: error: ...".
 * With GT_TRACE=1 in the environment, the GT_CALL trace follows. */
void gt_error_print(int rank);

/* Forget the current error. */
void gt_error_clear(void);

/* ---- macros ----------------------------------------------------------- */

#define GT_CALL(expr)                                                       \
  do {                                                                      \
    int gt_call_status_ = (expr);                                           \
    if (gt_call_status_ != GT_SUCCESS)                                      \
      return gt_error_push(gt_call_status_, __FILE__, __LINE__, __func__);  \
  } while (0)

#define GT_CHECK(cond, code, ...)                                           \
  do {                                                                      \
    if (!(cond))                                                            \
      return gt_error_set((code), __FILE__, __LINE__, __func__, __VA_ARGS__); \
  } while (0)

#define GT_ERROR(code, ...)                                                 \
  gt_error_set((code), __FILE__, __LINE__, __func__, __VA_ARGS__)

#define GT_ASSERT(cond)                                                     \
  do {                                                                      \
    if (!(cond))                                                            \
      return gt_error_set(GT_ERR_INTERNAL, __FILE__, __LINE__, __func__,    \
                          "internal error: assertion '%s' failed", #cond);  \
  } while (0)

/* malloc-style allocation that fails with GT_ERR_SYSTEM naming the size. */
#define GT_CHECK_ALLOC(ptr, bytes)                                          \
  GT_CHECK((ptr) != NULL, GT_ERR_SYSTEM,                                    \
           "out of memory allocating %zu bytes", (size_t)(bytes))

/* One line describing an MPI error code into buf. MPICH's "error stack"
 * strings ("Other I/O error , error stack:\nADIOI_GEN_WRITECONTIG(80): Other
 * I/O error No space left on device") come down to their innermost cause
 * ("No space left on device"). Not collective. */
void gt_error_mpi_text(int mpi_code, char *buf, size_t size);

/* Translate an MPI return code (communicators use MPI_ERRORS_RETURN). */
int gt_error_mpi(int mpi_code, const char *call, const char *file, int line,
                 const char *func);
#define GT_CALL_MPI(expr)                                                   \
  do {                                                                      \
    int gt_mpi_status_ = (expr);                                            \
    if (gt_mpi_status_ != 0)                                                \
      return gt_error_mpi(gt_mpi_status_, #expr, __FILE__, __LINE__, __func__); \
  } while (0)

/* HDF5 returns a negative herr_t / hid_t on failure. The message carries the
 * innermost description from HDF5's own error stack. */
int gt_error_hdf5(const char *call, const char *file, int line, const char *func);
#define GT_CALL_HDF5(expr)                                                  \
  do {                                                                      \
    if ((long long)(expr) < 0)                                              \
      return gt_error_hdf5(#expr, __FILE__, __LINE__, __func__);            \
  } while (0)

/* Evaluate an HDF5 call returning a hid_t and store it, failing like
 * GT_CALL_HDF5. */
#define GT_H5_ID(var, expr)                                                 \
  do {                                                                      \
    (var) = (expr);                                                         \
    if ((long long)(var) < 0)                                               \
      return gt_error_hdf5(#expr, __FILE__, __LINE__, __func__);            \
  } while (0)

#endif /* GRIDTRAIN_ERROR_H */
