/*
 * gridtrain/config.h - the input deck: an INI file parsed with inih, plus
 * "section.key=value" overrides from the command line.
 *
 * Precedence: command line over deck over built-in defaults. Every key is
 * described once in a table (name, type, range or choices, default, help);
 * parsing, validation, the resolved-configuration table, the deck text stored
 * in checkpoints and `gridtrain train --help` all come from that table.
 * Unknown sections and keys, malformed lines, values out of range and
 * duplicate keys are GT_ERR_INPUT errors naming the key and what is accepted.
 */
#ifndef GRIDTRAIN_CONFIG_H
#define GRIDTRAIN_CONFIG_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "gridtrain/config_enums.h"

#define GT_PATH_MAX 1024
#define GT_NAME_MAX 32
#define GT_CONFIG_MAX_KEYS 96

/* Where a value came from. */
typedef enum { GT_FROM_DEFAULT = 0, GT_FROM_DECK, GT_FROM_CLI } gt_config_origin;

typedef struct gt_config {
  struct {
    long steps;                  /* optimizer steps to run */
    unsigned long long seed;     /* initial weights and data order */
    long log_every;              /* console line every N steps */
    char metrics[GT_PATH_MAX];   /* JSON-lines file, "" for none */
    long eval_every;             /* validation loss every N steps, 0 = off */
    long eval_batches;           /* global batches per validation */
    double hang_timeout;         /* watchdog: seconds without progress, 0 = off */
    long sample_every;           /* a greedy text sample every N steps, 0 = off */
    double peak_tflops;          /* MFU: one rank's peak TFLOP/s, 0 = table or calibration */
    double straggler_margin;     /* a rank this much over its stage's median is slow, 0 = off */
    long straggler_reports;      /* ... for this many reports in a row: named in the log */
  } run;
  struct {
    long dp, pp, tp; /* 0 means auto */
  } grid;
  struct {
    gt_model_type type;
    long layers, heads, dim, seq_len, vocab;
    long kv_heads, ffn_dim;    /* 0: auto (heads; 4 dim or Llama's rule) */
    long experts, top_k, moe_every; /* mixture of experts (0 experts: dense) */
    long expert_ffn_dim;        /* 0: auto (ffn_dim) */
    long shared_experts;
    double capacity_factor;     /* 0: dropless */
    double aux_loss, z_loss;    /* the router's loss coefficients */
    gt_tristate tie_embeddings; /* auto: on for gpt, off for llama */
    double norm_eps;            /* llama: RMSNorm epsilon */
    double rope_theta;          /* llama: RoPE base */
    gt_rope_scaling_kind rope_scaling;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    long rope_original_seq_len;
    gt_recompute recompute;
  } model;
  struct {
    char train[GT_PATH_MAX]; /* FILE.h5 or FILE.h5:/dataset */
    char val[GT_PATH_MAX];   /* "" for none */
    long batch;              /* global batch, sequences */
    long microbatches;       /* per DP rank and step */
    bool prefetch;           /* read the next batch during the step */
  } data;
  struct {
    double lr, min_lr;
    long warmup;
    double weight_decay, beta1, beta2, eps, grad_clip;
  } optim;
  struct {
    gt_device_kind device;
    long threads;                 /* 0 means auto */
    gt_dtype precision;           /* GT_F32 | GT_BF16 | GT_F16 */
    gt_tristate mpi_device;
    gt_attention_kind attention;  /* cuda only */
    double loss_scale;            /* fp16: initial loss scale */
    long loss_scale_interval;     /* fp16: good steps before the scale grows */
    double loss_scale_factor;     /* fp16: growth and back-off factor */
    double loss_scale_min;        /* fp16: smallest scale before it is an error */
  } backend;
  struct {
    gt_wait_setting wait;
    char schedule[GT_NAME_MAX];   /* gpipe | 1f1b | interleaved:V */
    char stages[GT_PATH_MAX];     /* "" or blocks per stage "3,5" */
    double bucket_mb;             /* DP bucket size, MiB (0: one bucket) */
    bool dp_overlap;
    bool sequence_parallel;
    gt_collectives_kind collectives;
    gt_allreduce_algo allreduce;
    char coll_table[GT_PATH_MAX]; /* auto: the fitted table */
    char compress[GT_NAME_MAX];   /* none | bf16 | fp16 | topk:R | powersgd:K */
    char sync[GT_NAME_MAX];       /* every_step | local:K | diloco:K | easgd:K,A | stale:S */
    double outer_lr, outer_momentum; /* diloco */
    long coll_segment_kb;         /* our algorithms: segment KiB */
    long coll_window;             /* our algorithms: segments in flight */
    long zero;                    /* ZeRO stage 0..3 */
  } parallel;
  struct {
    char dir[GT_PATH_MAX];    /* "" for no checkpoints */
    long every;               /* steps between checkpoints, 0: signal and end only */
    long keep;                /* files kept, 0: all */
    char resume[GT_PATH_MAX]; /* auto | never | PATH */
    char init[GT_PATH_MAX];   /* "" | PATH: the weights a run that does not
                                 resume starts from (fine-tuning) */
    gt_tristate direct_io;
    gt_on_error on_error;
    char local_dir[GT_PATH_MAX]; /* "" | node-local directory ($VAR expanded
                                    by gt_path_expand_env) */
    long local_every;         /* steps between node-local states, 0: none */
    long local_keep;          /* complete node-local states kept */
    bool partner;             /* a copy of each part on a rank of another node */
    bool async;               /* write in the background (checkpoints.md) */
  } checkpoint;

  char deck_path[GT_PATH_MAX];                 /* "" when no deck */
  unsigned char origin[GT_CONFIG_MAX_KEYS];    /* gt_config_origin per key */
  int line[GT_CONFIG_MAX_KEYS];                /* its deck line (GT_FROM_DECK) */
} gt_config;

/* Fill every key with its default. Keys without a default (data.train) are
 * left empty and must be set before gt_config_check_required passes. */
void gt_config_defaults(gt_config *cfg);

/* Parse deck text (INI) and then the overrides ("section.key=value"), on top
 * of whatever cfg holds. source names the text in messages ("x.in").
 * Not collective. Returns GT_ERR_INPUT with a one-line message on the first
 * problem. */
int gt_config_parse(gt_config *cfg, const char *text, const char *source,
                    int noverrides, char *const overrides[]);

/* Set one key from the text "section.key=value" (printf format), as
 * gt_config_parse does an override: for tests, benchmarks and tools that
 * build a configuration in code. GT_ERR_INPUT as gt_config_parse. Not
 * collective. */
int gt_config_set(gt_config *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Values that are each in range but wrong: beta1/beta2 that round to 1 and
 * eps that rounds to 0 in fp32, min_lr above lr, more BLAS threads than
 * twice the node's CPUs. GT_ERR_INPUT naming the key. Not collective. */
int gt_config_check_values(const gt_config *cfg);

/* For a bad-input error found after parsing (the layout, the schedule, the
 * data, ...): when the current error's message names a key with its value
 * ("[section] key = v", "[section] key=v") and does not start with the deck's name, it is prefixed with where
 * that key was set, "DECK:LINE: " or "command line: " (nothing for a
 * default). status is the error's code (only GT_ERR_INPUT is touched); it is
 * returned, and the error keeps its collective mark. Not collective. */
int gt_config_locate_error(const gt_config *cfg, int status);

/* Fail with GT_ERR_INPUT if a required key is unset. */
int gt_config_check_required(const gt_config *cfg);

/* Collective on comm: rank 0 reads deck_path (NULL: no deck) and broadcasts
 * its text; every rank applies defaults, the text and the overrides in the
 * same way, so every rank gets the same result or the same error (marked
 * collective). */
int gt_config_load(gt_config *cfg, const char *deck_path, int noverrides,
                   char *const overrides[], MPI_Comm comm);

/* Write the resolved configuration as an INI deck (every key, with its value).
 * Returns the length it needs, like snprintf (buf may be NULL when size is
 * 0). */
int gt_config_to_ini(const gt_config *cfg, char *buf, size_t size);

/* Print the resolved configuration as a table: key, value, origin. */
void gt_config_print_table(const gt_config *cfg, FILE *out);

/* One more row in the format of that table (for values resolved later:
 * layout, threads, sizes). */
void gt_config_print_row(FILE *out, const char *key, const char *value, const char *origin);

/* Print every key with its type, default and help (for --help). */
void gt_config_print_keys(FILE *out);

#endif /* GRIDTRAIN_CONFIG_H */
