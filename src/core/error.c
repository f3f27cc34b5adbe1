/*
 * error.c - the per-rank error stack behind GT_CALL / GT_CHECK, and the
 * translation of MPI and HDF5 errors into it.
 */
#include "gridtrain/error.h"

#include <hdf5.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GT_ERROR_MSG_MAX 1024
#define GT_ERROR_FRAMES 32

typedef struct {
  const char *file;
  const char *func;
  int line;
} gt_frame;

static _Thread_local struct { /* per thread: cpu-async workers keep their own */
  int code;
  bool collective;
  char message[GT_ERROR_MSG_MAX];
  char origin[256];
  int nframes;
  gt_frame frames[GT_ERROR_FRAMES];
} gt_err_state;

// ----------------------------------------------------------------------------

int gt_error_exit_code(int code)
{
  switch (code) {
  case GT_SUCCESS: return 0;
  case GT_ERR_INPUT: return 2;
  case GT_ERR_REQUEUE: return 3;
  case GT_ERR_HANG: return 4;
  case GT_ERR_INTERRUPT: return 130;
  default: return 1;
  }
}

const char *gt_error_name(int code)
{
  switch (code) {
  case GT_SUCCESS: return "success";
  case GT_ERR_INPUT: return "input";
  case GT_ERR_REQUEUE: return "requeue";
  case GT_ERR_INTERRUPT: return "interrupt";
  case GT_ERR_HANG: return "hang";
  case GT_ERR_SYSTEM: return "system";
  case GT_ERR_MPI: return "mpi";
  case GT_ERR_HDF5: return "hdf5";
  case GT_ERR_BLAS: return "blas";
  case GT_ERR_DEVICE: return "device";
  case GT_ERR_NUMERIC: return "numeric";
  case GT_ERR_INTERNAL: return "internal";
  default: return "unknown";
  }
}

static void gt_add_frame(const char *file, int line, const char *func)
{
  if (gt_err_state.nframes < GT_ERROR_FRAMES) {
    gt_frame *f = &gt_err_state.frames[gt_err_state.nframes++];
    f->file = file;
    f->line = line;
    f->func = func;
  }
}

static int gt_error_vset(int code, const char *file, int line, const char *func,
                         const char *fmt, va_list ap)
{
  gt_err_state.code = code;
  gt_err_state.collective = false;
  gt_err_state.nframes = 0;
  vsnprintf(gt_err_state.message, sizeof gt_err_state.message, fmt, ap);
  /* One error, one line: foreign messages (MPICH error stacks inside HDF5's
   * descriptions) can carry newlines. */
  for (char *c = gt_err_state.message; *c; c++)
    if (*c == '\n' || *c == '\r')
      *c = ' ';
  snprintf(gt_err_state.origin, sizeof gt_err_state.origin, "%s:%d (%s)", file,
           line, func);
  gt_add_frame(file, line, func);
  return code;
}

int gt_error_set(int code, const char *file, int line, const char *func,
                 const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  gt_error_vset(code, file, line, func, fmt, ap);
  va_end(ap);
  return code;
}

int gt_error_push(int code, const char *file, int line, const char *func)
{
  if (gt_err_state.code == GT_SUCCESS) {
    /* A failure that did not go through gt_error_set (a bug): keep a trace. */
    gt_error_set(code, file, line, func, "%s error with no message",
                 gt_error_name(code));
    return code;
  }
  gt_add_frame(file, line, func);
  return code;
}

int gt_error_wrap(int code, const char *file, int line, const char *func, const char *fmt, ...)
{
  char cause[sizeof gt_err_state.message];
  snprintf(cause, sizeof cause, "%s", gt_err_state.message);
  char context[sizeof gt_err_state.message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(context, sizeof context, fmt, ap);
  va_end(ap);
  if (cause[0])
    return gt_error_set(code, file, line, func, "%s: %s", context, cause);
  return gt_error_set(code, file, line, func, "%s", context);
}

const char *gt_error_message(void) { return gt_err_state.message; }
const char *gt_error_origin(void) { return gt_err_state.origin; }
void gt_error_set_origin(const char *origin)
{
  snprintf(gt_err_state.origin, sizeof gt_err_state.origin, "%s", origin);
}

void gt_error_set_collective(bool collective) { gt_err_state.collective = collective; }
bool gt_error_is_collective(void) { return gt_err_state.collective; }

void gt_error_clear(void)
{
  gt_err_state.code = GT_SUCCESS;
  gt_err_state.collective = false;
  gt_err_state.message[0] = '\0';
  gt_err_state.origin[0] = '\0';
  gt_err_state.nframes = 0;
}

void gt_error_print(int rank)
{
  char prefix[64];
  /* A requeue request is how a signalled run ends well, not an error. */
  const int code = gt_err_state.code;
  const char *kind = code == GT_ERR_REQUEUE     ? "requeue"
                     : code == GT_ERR_INTERRUPT ? "interrupted"
                     : code == GT_ERR_HANG      ? "hang"
                                                : "error";
  if (rank < 0)
    snprintf(prefix, sizeof prefix, "gridtrain: %s: ", kind);
  else
    snprintf(prefix, sizeof prefix, "gridtrain: rank %d: %s: ", rank, kind);
  if (code == GT_ERR_INPUT || code == GT_ERR_REQUEUE || code == GT_ERR_INTERRUPT ||
      code == GT_ERR_HANG || gt_err_state.origin[0] == '\0')
    fprintf(stderr, "%s%s\n", prefix, gt_err_state.message);
  else
    fprintf(stderr, "%s%s [at %s]\n", prefix, gt_err_state.message,
            gt_err_state.origin);
  const char *trace = getenv("GT_TRACE");
  if (trace && trace[0] == '1')
    for (int i = 0; i < gt_err_state.nframes; i++)
      fprintf(stderr, "  #%d %s:%d (%s)\n", i, gt_err_state.frames[i].file,
              gt_err_state.frames[i].line, gt_err_state.frames[i].func);
  fflush(stderr);
}

// ---- foreign errors ---------------------------------------------------------

void gt_error_mpi_text(int mpi_code, char *buf, size_t size)
{
  char text[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(mpi_code, text, &len) != MPI_SUCCESS || len <= 0) {
    snprintf(buf, size, "MPI error code %d", mpi_code);
    return;
  }
  text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING] = '\0';
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
    text[--len] = '\0';
  const char *line = text;
  char *stack = strstr(text, ", error stack:");
  if (stack) {
    /* The last line of the stack holds the cause: "FUNC(LINE): CLASS CAUSE". */
    const char *last = strrchr(text, '\n');
    if (last && last[1]) {
      line = last + 1;
      const char *frame = strstr(line, "): ");
      if (frame)
        line = frame + 3;
      int cls = 0, clen = 0;
      char ctext[MPI_MAX_ERROR_STRING + 1];
      if (MPI_Error_class(mpi_code, &cls) == MPI_SUCCESS &&
          MPI_Error_string(cls, ctext, &clen) == MPI_SUCCESS && clen > 0) {
        ctext[clen < MPI_MAX_ERROR_STRING ? clen : MPI_MAX_ERROR_STRING] = '\0';
        size_t n = strlen(ctext);
        while (n > 0 && ctext[n - 1] == ' ') /* MPICH's class texts end in a space */
          ctext[--n] = '\0';
        if (strncmp(line, ctext, n) == 0 && line[n] == ' ' && line[n + 1])
          line += n + 1;
      }
    } else {
      *stack = '\0'; /* just the first line's class */
    }
  }
  snprintf(buf, size, "%s", line);
  for (char *c = buf; *c; c++)
    if (*c == '\n')
      *c = ' ';
}

int gt_error_mpi(int mpi_code, const char *call, const char *file, int line,
                 const char *func)
{
  char text[MPI_MAX_ERROR_STRING + 1];
  gt_error_mpi_text(mpi_code, text, sizeof text);
  return gt_error_set(GT_ERR_MPI, file, line, func, "%s failed: %s", call, text);
}

typedef struct {
  char desc[512];
  char major[128];
  char minor[128];
} gt_h5_walk_data;

static herr_t gt_h5_walk(unsigned n, const H5E_error2_t *err, void *data)
{
  gt_h5_walk_data *w = data;
  /* The walk goes from the innermost frame outward; keep the innermost one
   * that has a description. */
  if (n == 0 || w->desc[0] == '\0') {
    if (err->desc)
      snprintf(w->desc, sizeof w->desc, "%s", err->desc);
    H5Eget_msg(err->maj_num, NULL, w->major, sizeof w->major);
    H5Eget_msg(err->min_num, NULL, w->minor, sizeof w->minor);
  }
  return 0;
}

int gt_error_hdf5(const char *call, const char *file, int line, const char *func)
{
  gt_h5_walk_data w = {{0}, {0}, {0}};
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, gt_h5_walk, &w);
  H5Eclear2(H5E_DEFAULT);
  if (w.desc[0] || w.minor[0])
    return gt_error_set(GT_ERR_HDF5, file, line, func, "%s failed: %s (%s)",
                        call, w.desc[0] ? w.desc : w.major, w.minor);
  return gt_error_set(GT_ERR_HDF5, file, line, func, "%s failed", call);
}
