/*
 * gridtrain/ckpt_local.h - the node-local tier of the training state: one
 * file per rank and state ("part"), in a directory of the rank's node
 * (/dev/shm, a local SSD), written often, read back at memory speed, for
 * recovery. The global HDF5 checkpoint (checkpoint.h) stays the durable one.
 * docs/checkpoints.md, "Node-local and partner copies".
 *
 * Directory ([checkpoint] local_dir):
 *   DIR/step_NNNNNNNN/own_RRRRR.gtl      rank RRRRR's own part of step N
 *   DIR/step_NNNNNNNN/partner_RRRRR.gtl  a partner copy of rank RRRRR's part,
 *                                        kept by a rank of another node
 *   DIR/step_NNNNNNNN/done_RRRRR         rank RRRRR saw every part of step N
 *                                        written (after the agreement)
 * A part file is written as NAME.tmp, fsync'ed and renamed, so a file with
 * its final name is whole; a state is complete when a done_ marker of its
 * step exists on some node.
 *
 * Part file (format GT_LOCAL_FORMAT, native byte order: the tier never
 * leaves the machine kind that wrote it):
 *   gt_local_header                 fixed size, its own Fletcher-32
 *   gt_local_param table[nparams]   each tensor of the flat buffer: name,
 *                                   logical shape, split, offset (its own
 *                                   Fletcher-32 in the header)
 *   uint32 sums[nblocks]            Fletcher-32 of each GT_LOCAL_BLOCK_BYTES
 *                                   block of the payload (the checkpoint's
 *                                   helper, ckpt_internal.h)
 *   float payload[payload]          values [vlo, vhi), m and v [mlo, mhi)
 *                                   of the flat parameter buffer, then
 *                                   rank_n floats of rank state
 * No function here is collective; none uses MPI or HDF5.
 */
#ifndef GRIDTRAIN_CKPT_LOCAL_H
#define GRIDTRAIN_CKPT_LOCAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GT_LOCAL_FORMAT 1
#define GT_LOCAL_MAGIC "GTLOCAL"
#define GT_LOCAL_BLOCK_BYTES ((size_t)1 << 20)
#define GT_LOCAL_SHAPE_BYTES 256 /* room for the model shape (gpt.h) */
#define GT_LOCAL_TAG_BYTES 256

typedef enum { GT_LOCAL_OWN = 0, GT_LOCAL_PARTNER = 1 } gt_local_kind;

/* What a part says about itself and the run. Plain data: sent as bytes. */
typedef struct gt_local_header {
  char magic[8];           /* GT_LOCAL_MAGIC */
  uint32_t version;        /* GT_LOCAL_FORMAT */
  uint32_t header_bytes;   /* sizeof(gt_local_header) */
  int64_t step;            /* the next step to run */
  int64_t samples;         /* data-stream position */
  int64_t scale_good, skipped; /* loss-scaler state */
  int64_t batch;           /* global batch */
  uint64_t seed;
  double loss_scale, loss;
  int32_t owner, world;    /* world rank whose part this is, and world size */
  int32_t dp, pp, tp;      /* layout that wrote it */
  int32_t dp_rank, pp_rank, tp_rank;
  int32_t zero, shape_bytes;
  char precision[8];
  char code_version[64];
  unsigned char shape[GT_LOCAL_SHAPE_BYTES]; /* the model shape, as stored */
  uint64_t layout_hash;    /* names, shapes, splits and offsets of the flat buffer */
  uint64_t numel, data_end; /* flat buffer length, end of its last tensor */
  uint64_t vlo, vhi, mlo, mhi; /* flat ranges of values and moments held */
  uint64_t rank_n;         /* floats of rank state */
  char rank_tag[GT_LOCAL_TAG_BYTES];
  uint64_t nparams;        /* entries of the parameter table */
  uint32_t table_sum;      /* Fletcher-32 of the parameter table */
  uint32_t pad_;
  uint64_t payload;        /* floats after the sums */
  uint64_t nblocks;        /* checksum blocks of the payload */
  uint32_t sums_sum;       /* Fletcher-32 of the sums table */
  uint32_t header_sum;     /* Fletcher-32 of this header with header_sum 0 */
} gt_local_header;

/* One tensor of a part's flat buffer (params.h's gt_param, as data). */
typedef struct gt_local_param {
  char name[64];
  int32_t ndim, axis, blocks, parts, index;
  int32_t units[4];
  int32_t pad_;
  int64_t full_shape[4];
  uint64_t offset, numel;
} gt_local_param;

/* Floats of payload a header describes: (vhi - vlo) + 2 (mhi - mlo) + rank_n. */
uint64_t gt_local_payload_len(const gt_local_header *h);

/* "DIR/step_NNNNNNNN" and the file of a part or marker in it:
 * kind own/partner -> own_RRRRR.gtl / partner_RRRRR.gtl. */
int gt_local_step_dir(const char *dir, long step, char *out, size_t size);
int gt_local_part_path(const char *dir, long step, gt_local_kind kind, int owner, char *out,
                       size_t size);

/* Write a part: fill h's payload, nblocks and checksums from payload, then
 * PATH.tmp, fsync, rename to path, fsync the directory (gt_path_replace).
 * The step directory must exist. GT_ERR_SYSTEM naming the file on failure
 * (PATH.tmp removed). */
int gt_local_part_write(const char *path, gt_local_header *h, const gt_local_param *table,
                        const float *payload);

/* Read and check a part's header (magic, version, size, its checksum).
 * GT_ERR_INPUT naming the file for one that is short or damaged. */
int gt_local_part_header(const char *path, gt_local_header *h);

/* Read and check a part's parameter table (h->nparams entries, the
 * caller's memory). GT_ERR_INPUT naming the file when it is damaged. */
int gt_local_part_table(const char *path, const gt_local_header *h, gt_local_param *table);

/* Map the whole part at path, whose header is h (read before), and verify
 * the sums table and every block of its payload: *payload points to
 * gt_local_payload_len(h) floats, read-only, until gt_local_part_unmap(map).
 * No copy is made (a file in /dev/shm is read at memory speed). GT_ERR_INPUT
 * naming the file and the block that fails; *bytes gets the file's bytes. */
typedef struct gt_local_map {
  void *addr;
  size_t len;
} gt_local_map;
int gt_local_part_map(const char *path, const gt_local_header *h, const float **payload,
                      gt_local_map *map, double *bytes);
void gt_local_part_unmap(gt_local_map *map);

/* Mark step complete for rank (DIR/step_N/done_RRRRR, synced). */
int gt_local_mark(const char *dir, long step, int rank);

/* The steps of dir with at least one done_ marker, newest first (*steps
 * malloc'ed, free it; *n 0 when none or no dir). */
int gt_local_steps(const char *dir, long **steps, int *n);

/* Every step_N directory of dir, marked or not, newest first (as above). */
int gt_local_all_steps(const char *dir, long **steps, int *n);

/* In DIR/step_N, the parts present: *owners and *kinds (malloc'ed, *n). */
int gt_local_parts(const char *dir, long step, int **owners, gt_local_kind **kinds, int *n);

/* Delete the step directory DIR/step_N and everything in it (node-wide:
 * one rank of a node calls it). A missing directory is no error; others
 * are GT_ERR_SYSTEM naming the entry. */
int gt_local_remove(const char *dir, long step);

#endif /* GRIDTRAIN_CKPT_LOCAL_H */
