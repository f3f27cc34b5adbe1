/*
 * config.c - input deck parsing (inih) and the table of every key.
 */
#include "gridtrain/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <float.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/path.h"

#define GT_INI_LINE_MAX 200 /* inih's default INI_MAX_LINE */

typedef enum {
  GT_KEY_INT,      /* long in [min, max] */
  GT_KEY_INT_AUTO, /* long in [min, max] or "auto" (stored as 0) */
  GT_KEY_U64,      /* unsigned long long */
  GT_KEY_REAL,     /* finite double in [min, max] */
  GT_KEY_STRING,   /* char[size] */
  GT_KEY_ENUM,     /* an enum (int-sized): the index of its word in names */
  GT_KEY_SWITCH    /* bool: "on" or "off" */
} gt_key_type;

typedef struct {
  const char *section;
  const char *name;
  gt_key_type type;
  size_t offset;
  size_t size;
  double min, max;
  const char *const *names; /* GT_KEY_ENUM: the words, NULL-terminated */
  const char *defval; /* NULL: required */
  const char *help;
  bool min_open, max_open; /* GT_KEY_REAL: exclude the bound itself */
} gt_key;

/* The least [run] hang_timeout (0 still turns the watchdog off): the watchdog
 * takes a rank with an operation open and no begin or end for that long for a
 * stuck one. Healthy waits reach tens to hundreds of milliseconds here (a
 * rank descheduled on oversubscribed cores, the first collective of a
 * communicator setting up its connections, a 64 MiB all-reduce of 28-223 ms
 * on 2 ranks, a checkpoint's metadata); 0.001 s killed a healthy run. */
#define GT_HANG_TIMEOUT_MIN 1.0

/* A GT_KEY_REAL whose values are 0 (off) or at least this (> 0); 0: none. */
static double gt_key_floor(const gt_key *k)
{
  return k->type == GT_KEY_REAL && k->offset == offsetof(gt_config, run.hang_timeout)
             ? GT_HANG_TIMEOUT_MIN
             : 0;
}

#define GT_OFF(member) offsetof(gt_config, member), sizeof(((gt_config *)0)->member)

const char *const gt_model_type_names[] = {"gpt", "llama", NULL};
const char *const gt_rope_scaling_names[] = {"none", "linear", "llama3", NULL};
const char *const gt_recompute_names[] = {"none", "attention", "block", NULL};
const char *const gt_device_kind_names[] = {"cpu", "cpu-async", "cpu-guard", "cuda", NULL};
const char *const gt_precision_names[] = {"fp32", "bf16", "fp16", NULL};
const char *const gt_tristate_names[] = {"auto", "on", "off", NULL};
const char *const gt_attention_kind_names[] = {"cudnn", "cudnn-fast", "own", NULL};
const char *const gt_wait_setting_names[] = {"auto", "busy", "yield", NULL};
const char *const gt_collectives_kind_names[] = {"mpi", "nccl", NULL};
const char *const gt_allreduce_algo_names[] = {"mpi", "ring", "tree", "halving", "auto", NULL};
const char *const gt_on_error_names[] = {"stop", "warn", NULL};

_Static_assert(GT_F32 == 0 && GT_BF16 == 1 && GT_F16 == 2, "gt_precision_names is by gt_dtype");
_Static_assert(sizeof(gt_dtype) == sizeof(int) && sizeof(gt_recompute) == sizeof(int) &&
                   sizeof(gt_attention_kind) == sizeof(int),
               "an enum key is stored as an int");

static const gt_key gt_keys[] = {
  {"run", "steps", GT_KEY_INT, GT_OFF(run.steps), 0, 1e12, NULL, "100",
   "optimizer steps to run (0: set up, print the tables and stop)", false, false},
  {"run", "seed", GT_KEY_U64, GT_OFF(run.seed), 0, 0, NULL, "1337",
   "seed of the initial weights and of the data order", false, false},
  {"run", "log_every", GT_KEY_INT, GT_OFF(run.log_every), 1, 1e12, NULL, "10",
   "print a log line every N steps (and at the first and last step)", false, false},
  {"run", "metrics", GT_KEY_STRING, GT_OFF(run.metrics), 0, 0, NULL, "",
   "JSON-lines file written by rank 0, one record per step; empty for none", false, false},
  {"run", "eval_every", GT_KEY_INT, GT_OFF(run.eval_every), 0, 1e12, NULL, "0",
   "validation loss every N steps and at the end; 0 turns it off", false, false},
  {"run", "eval_batches", GT_KEY_INT, GT_OFF(run.eval_batches), 1, 1e6, NULL, "4",
   "global batches of the validation set per evaluation", false, false},
  {"run", "hang_timeout", GT_KEY_REAL, GT_OFF(run.hang_timeout), 0, 1e6, NULL, "600",
   "seconds without progress in communication before the watchdog names the hanging rank "
   "and ends the job (exit 4); 0 turns it off; at least 1 s, longer than any healthy wait "
   "(a slow rank's checkpoint write, a collective on oversubscribed cores)", false, false},
  {"run", "sample_every", GT_KEY_INT, GT_OFF(run.sample_every), 0, 1e12, NULL, "0",
   "print a text sample every N steps: 64 tokens (fewer past seq_len) greedily decoded "
   "after a newline with the tokenizer of [data] train; needs pp = 1 (docs/generation.md); "
   "0 turns it off", false, false},
  {"run", "peak_tflops", GT_KEY_REAL, GT_OFF(run.peak_tflops), 0, 1e6, NULL, "0",
   "peak TFLOP/s of one rank that MFU is measured against; 0: the GPU's dense peak from "
   "gridtrain's table, or on the CPU an sgemm calibration (cached per machine)", false,
   false},
  {"run", "straggler_margin", GT_KEY_REAL, GT_OFF(run.straggler_margin), 0, 1e6, NULL, "0.2",
   "a rank whose own time a step (the step less its waits for other ranks) is above the median "
   "of the other ranks of its pipeline stage by more than this fraction of the step time, "
   "straggler_reports reports in a row, is named in the log; 0 turns it off", false, false},
  {"run", "straggler_reports", GT_KEY_INT, GT_OFF(run.straggler_reports), 1, 1e6, NULL, "5",
   "log reports ([run] log_every) in a row that a rank must be slow for to be named as a "
   "straggler", false, false},

  {"grid", "dp", GT_KEY_INT_AUTO, GT_OFF(grid.dp), 1, 1e6, NULL, "auto",
   "data-parallel size; auto takes what the world size leaves", false, false},
  {"grid", "pp", GT_KEY_INT_AUTO, GT_OFF(grid.pp), 1, 1e6, NULL, "1",
   "pipeline-parallel size (stages)", false, false},
  {"grid", "tp", GT_KEY_INT_AUTO, GT_OFF(grid.tp), 1, 1e6, NULL, "1",
   "tensor-parallel size", false, false},

  {"model", "type", GT_KEY_ENUM, GT_OFF(model.type), 0, 0, gt_model_type_names, "gpt",
   "architecture: gpt (GPT-2: LayerNorm, learned positions, GELU MLP, biases) or llama "
   "(RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases)",
   false, false},
  {"model", "layers", GT_KEY_INT, GT_OFF(model.layers), 1, 1024, NULL, "4",
   "transformer blocks", false, false},
  {"model", "heads", GT_KEY_INT, GT_OFF(model.heads), 1, 1024, NULL, "4",
   "attention heads (must divide dim)", false, false},
  {"model", "dim", GT_KEY_INT, GT_OFF(model.dim), 1, 65536, NULL, "128",
   "embedding width", false, false},
  {"model", "seq_len", GT_KEY_INT, GT_OFF(model.seq_len), 1, 1048576, NULL, "128",
   "tokens per sequence (context length)", false, false},
  {"model", "vocab", GT_KEY_INT, GT_OFF(model.vocab), 2, 16777216, NULL, "256",
   "vocabulary size (256 for byte-level data)", false, false},
  {"model", "kv_heads", GT_KEY_INT_AUTO, GT_OFF(model.kv_heads), 1, 1024, NULL, "auto",
   "key/value heads (llama: grouped-query attention, a divisor of heads; 1 is multi-query); "
   "auto = heads", false, false},
  {"model", "ffn_dim", GT_KEY_INT_AUTO, GT_OFF(model.ffn_dim), 1, 1048576, NULL, "auto",
   "MLP width; auto = 4 dim for gpt (the only width it takes), for llama 2/3 of 4 dim "
   "rounded up to a multiple of 256 (Meta's rule)", false, false},
  {"model", "experts", GT_KEY_INT, GT_OFF(model.experts), 0, 4096, NULL, "0",
   "routed experts of a mixture-of-experts block (0: every block dense; docs/models.md)",
   false, false},
  {"model", "top_k", GT_KEY_INT, GT_OFF(model.top_k), 1, 64, NULL, "2",
   "experts each token goes to (at most experts); their gates are renormalised to sum to "
   "1 (Mixtral)", false, false},
  {"model", "moe_every", GT_KEY_INT, GT_OFF(model.moe_every), 1, 1024, NULL, "1",
   "block l has experts when l is a multiple of moe_every (1: every block; 2: blocks 0, "
   "2, 4, ... as Megatron's moe_layer_freq)", false, false},
  {"model", "expert_ffn_dim", GT_KEY_INT_AUTO, GT_OFF(model.expert_ffn_dim), 1, 1048576,
   NULL, "auto", "MLP width of one expert; auto = ffn_dim", false, false},
  {"model", "shared_experts", GT_KEY_INT, GT_OFF(model.shared_experts), 0, 64, NULL, "0",
   "always-on experts of a mixture-of-experts block (DeepSeek): one dense MLP of "
   "shared_experts * expert_ffn_dim units beside the routed ones", false, false},
  {"model", "capacity_factor", GT_KEY_REAL, GT_OFF(model.capacity_factor), 0, 1024, NULL,
   "0", "tokens an expert takes per micro-batch, as a multiple of its fair share N top_k "
   "/ experts (rounded up); the later tokens past it are dropped (the residual carries "
   "them); 0: dropless", false, false},
  {"model", "aux_loss", GT_KEY_REAL, GT_OFF(model.aux_loss), 0, 1e3, NULL, "0.01",
   "coefficient of the load-balancing loss (Switch, Megatron's form: experts * sum over "
   "experts of token fraction times mean router probability, 1 when balanced), per "
   "mixture-of-experts block", false, false},
  {"model", "z_loss", GT_KEY_REAL, GT_OFF(model.z_loss), 0, 1e3, NULL, "0",
   "coefficient of the router z-loss (ST-MoE: mean squared log-sum-exp of the router "
   "logits), per mixture-of-experts block", false, false},
  {"model", "tie_embeddings", GT_KEY_ENUM, GT_OFF(model.tie_embeddings), 0, 0,
   gt_tristate_names, "auto",
   "the LM head is the token embedding (on) or its own matrix lm_head (off); auto: on for "
   "gpt, off for llama", false, false},
  {"model", "norm_eps", GT_KEY_REAL, GT_OFF(model.norm_eps), 0, 1, NULL, "1e-5",
   "llama: the RMSNorm epsilon (gpt's LayerNorm uses 1e-5)", true, false},
  {"model", "rope_theta", GT_KEY_REAL, GT_OFF(model.rope_theta), 0, 1e12, NULL, "10000",
   "llama: the rotary embedding's base (500000 in Llama 3)", true, false},
  {"model", "rope_scaling", GT_KEY_ENUM, GT_OFF(model.rope_scaling), 0, 0,
   gt_rope_scaling_names, "none",
   "llama: rotary position scaling as transformers' rope_scaling: none, linear (positions "
   "divided by rope_factor) or llama3 (Llama 3.1's per-frequency scaling)", false, false},
  {"model", "rope_factor", GT_KEY_REAL, GT_OFF(model.rope_factor), 0, 1e6, NULL, "8",
   "llama: rope_scaling's factor", true, false},
  {"model", "rope_low_freq_factor", GT_KEY_REAL, GT_OFF(model.rope_low_freq_factor), 0, 1e6,
   NULL, "1", "llama3 rope_scaling: low_freq_factor", true, false},
  {"model", "rope_high_freq_factor", GT_KEY_REAL, GT_OFF(model.rope_high_freq_factor), 0,
   1e6, NULL, "4", "llama3 rope_scaling: high_freq_factor (above low_freq_factor)", true,
   false},
  {"model", "rope_original_seq_len", GT_KEY_INT, GT_OFF(model.rope_original_seq_len), 1,
   1 << 24, NULL, "8192",
   "llama3 rope_scaling: original_max_position_embeddings", false, false},
  {"model", "recompute", GT_KEY_ENUM, GT_OFF(model.recompute), 0, 0, gt_recompute_names,
   "none", "activation recomputation: none keeps every activation for backward; attention "
   "recomputes each block's attention core from its q, k, v; block keeps only each block's "
   "input and reruns its forward before its backward (same results, bit for bit)",
   false, false},

  {"data", "train", GT_KEY_STRING, GT_OFF(data.train), 0, 0, NULL, NULL,
   "training data: FILE.h5 or FILE.h5:/dataset (default dataset /train/tokens, "
   "else /tokens)", false, false},
  {"data", "val", GT_KEY_STRING, GT_OFF(data.val), 0, 0, NULL, "",
   "validation data: FILE.h5 or FILE.h5:/dataset (default /val/tokens); empty "
   "for none", false, false},
  {"data", "batch", GT_KEY_INT, GT_OFF(data.batch), 1, 1e9, NULL, "16",
   "global batch in sequences (split over dp ranks and micro-batches)", false, false},
  {"data", "microbatches", GT_KEY_INT, GT_OFF(data.microbatches), 1, 1e6, NULL, "1",
   "micro-batches per step on each dp rank (gradient accumulation)", false, false},
  {"data", "prefetch", GT_KEY_SWITCH, GT_OFF(data.prefetch), 0, 0, NULL, "on",
   "read the next batch's sequences on a reader thread while the current batch computes "
   "(on) or when they are needed (off); the same tokens either way", false, false},

  {"optim", "lr", GT_KEY_REAL, GT_OFF(optim.lr), 0, 10, NULL, "1e-3",
   "peak learning rate", false, false},
  {"optim", "min_lr", GT_KEY_REAL, GT_OFF(optim.min_lr), 0, 10, NULL, "1e-4",
   "learning rate at the end of the cosine decay", false, false},
  {"optim", "warmup", GT_KEY_INT, GT_OFF(optim.warmup), 0, 1e12, NULL, "10",
   "steps of linear warm-up", false, false},
  {"optim", "weight_decay", GT_KEY_REAL, GT_OFF(optim.weight_decay), 0, 10, NULL,
   "0.1", "decoupled weight decay (matrices and embeddings only)", false, false},
  {"optim", "beta1", GT_KEY_REAL, GT_OFF(optim.beta1), 0, 1, NULL, "0.9",
   "AdamW first-moment decay", false, true},
  {"optim", "beta2", GT_KEY_REAL, GT_OFF(optim.beta2), 0, 1, NULL, "0.95",
   "AdamW second-moment decay", false, true},
  {"optim", "eps", GT_KEY_REAL, GT_OFF(optim.eps), 0, 1, NULL, "1e-8",
   "AdamW epsilon", true, false},
  {"optim", "grad_clip", GT_KEY_REAL, GT_OFF(optim.grad_clip), 0, 1e9, NULL, "1.0",
   "clip the global gradient norm to this value; 0 turns clipping off", false, false},

  {"backend", "device", GT_KEY_ENUM, GT_OFF(backend.device), 0, 0, gt_device_kind_names, "cpu",
   "compute backend; cpu-async and cpu-guard are test modes of cpu (ops run later on a "
   "worker thread / device memory is unreachable from the host outside ops); cuda runs on "
   "the GPU that the node-local rank picks (docs/cuda.md)", false, false},
  {"backend", "threads", GT_KEY_INT_AUTO, GT_OFF(backend.threads), 1, 4096, NULL,
   "auto", "OpenMP/BLAS threads per rank; auto: OMP_NUM_THREADS, else cores "
   "per node / ranks per node", false, false},
  {"backend", "precision", GT_KEY_ENUM, GT_OFF(backend.precision), 0, 0, gt_precision_names,
   "fp32", "type of the compute weights and activations; master weights, gradients and "
   "AdamW moments stay fp32 (docs/precision.md)", false, false},
  {"backend", "mpi_device", GT_KEY_ENUM, GT_OFF(backend.mpi_device), 0, 0, gt_tristate_names,
   "auto", "whether MPI takes device buffers (auto: when the memory is host-visible or MPI "
   "is CUDA-aware) or they are staged through pinned host buffers (off)", false, false},
  {"backend", "attention", GT_KEY_ENUM, GT_OFF(backend.attention), 0, 0, gt_attention_kind_names,
   "cudnn", "cuda: causal attention through cuDNN's graph API with its deterministic backward "
   "(our own kernels where cuDNN takes no plan for a shape, and in fp32), the same with "
   "cuDNN's faster backward that sums dQ with atomics (not bit for bit the same from run to "
   "run), or always gridtrain's own flash-attention kernels; the cpu backends have one kind",
   false, false},
  {"backend", "loss_scale", GT_KEY_REAL, GT_OFF(backend.loss_scale), 0, 1e30, NULL, "65536",
   "fp16: initial dynamic loss scale", true, false},
  {"backend", "loss_scale_interval", GT_KEY_INT, GT_OFF(backend.loss_scale_interval), 1,
   1e12, NULL, "1000", "fp16: good steps in a row before the loss scale grows", false,
   false},
  {"backend", "loss_scale_factor", GT_KEY_REAL, GT_OFF(backend.loss_scale_factor), 1, 1e6,
   NULL, "2", "fp16: the loss scale grows and backs off by this factor", true, false},
  {"backend", "loss_scale_min", GT_KEY_REAL, GT_OFF(backend.loss_scale_min), 0, 1e30, NULL,
   "1", "fp16: a loss scale below this is an error (the gradients overflow at any scale)",
   true, false},

  {"parallel", "wait", GT_KEY_ENUM, GT_OFF(parallel.wait), 0, 0, gt_wait_setting_names, "auto",
   "how ranks wait for MPI: yield sleeps between tests (for more ranks than "
   "cores), busy spins in MPI, auto picks yield when oversubscribed", false, false},
  {"parallel", "schedule", GT_KEY_STRING, GT_OFF(parallel.schedule), 0, 0, NULL, "1f1b",
   "pipeline schedule: gpipe (all forwards, then all backwards), 1f1b (one forward, one "
   "backward; activations of at most pp micro-batches), interleaved:V (V model chunks "
   "per rank: the bubble shrinks V times for V times the pipeline messages), zb-h1 "
   "(the backward split into its input and weight gradients, the latter filling the "
   "bubble: a third of 1f1b's at equal costs; zero 0-1, no sequence parallelism or "
   "recomputation yet) or pipedream-2bw (no flush between steps: each batch computes "
   "with the weights one update behind, two weight versions kept, at zero 0 each "
   "update run inside the next step; microbatches >= pp, zero 0-1, sync = every_step)",
   false, false},
  {"parallel", "stages", GT_KEY_STRING, GT_OFF(parallel.stages), 0, 0, NULL, "",
   "blocks per pipeline stage, e.g. 3,5; empty balances the cost (the last stage "
   "also runs the LM head)", false, false},
  {"parallel", "bucket_mb", GT_KEY_REAL, GT_OFF(parallel.bucket_mb), 0, 1e6, NULL, "4",
   "data-parallel gradient bucket size in MiB (MPI moves a bucket only inside MPI "
   "calls: small buckets overlap backward better); 0 puts every gradient in one bucket",
   false, false},
  {"parallel", "dp_overlap", GT_KEY_SWITCH, GT_OFF(parallel.dp_overlap), 0, 0, NULL, "on",
   "start each bucket's all-reduce during the last micro-batch's backward (on) or "
   "all of them after backward (off)", false, false},
  {"parallel", "zero", GT_KEY_INT, GT_OFF(parallel.zero), 0, 3, NULL, "0",
   "ZeRO stage over the data-parallel ranks: 0 replicates the optimizer state, 1 splits "
   "the fp32 master weights and AdamW moments into dp pieces (gradients reduce-"
   "scattered, weights all-gathered after the update), 2 also the gradients (each unit "
   "reduce-scattered per micro-batch into the rank's piece), 3 also the compute weights "
   "(each block, embedding and head all-gathered just before its forward and backward, "
   "the next one prefetched)",
   false, false},
  {"parallel", "sequence_parallel", GT_KEY_SWITCH, GT_OFF(parallel.sequence_parallel), 0,
   0, NULL, "off",
   "Megatron's sequence parallelism inside each tensor-parallel group: the residual "
   "stream, LayerNorms and embedding output keep 1/tp of the micro-batch's token rows, "
   "and each TP all-reduce becomes a reduce-scatter and an all-gather (needs "
   "seq_len x micro-batch a multiple of tp; nothing changes with tp = 1)",
   false, false},
  {"parallel", "collectives", GT_KEY_ENUM, GT_OFF(parallel.collectives), 0, 0,
   gt_collectives_kind_names, "mpi",
   "who carries the tensor- and data-parallel collectives: MPI (device buffers "
   "direct or staged, see backend.mpi_device) or NCCL on the GPU's streams (device = cuda, "
   "a GPU per rank of a group); pipeline sends and receives are always MPI", false, false},

  {"parallel", "allreduce", GT_KEY_ENUM, GT_OFF(parallel.allreduce), 0, 0,
   gt_allreduce_algo_names, "mpi",
   "algorithm of the data-parallel all-reduces, reduce-scatters and all-gathers: MPI's "
   "own, or gridtrain's ring, binomial tree or recursive halving on MPI point to point "
   "(docs/communication.md); auto picks per operation and size from coll_table", false,
   false},
  {"parallel", "compress", GT_KEY_STRING, GT_OFF(parallel.compress), 0, 0, NULL, "none",
   "compression of the data-parallel gradient all-reduce (zero = 0): none, bf16 or fp16 "
   "payloads (fp32 sums), topk:R (the fraction R of largest entries, error feedback) or "
   "powersgd:K (rank-K PowerSGD of every matrix, error feedback); docs/communication.md",
   false, false},
  {"parallel", "sync", GT_KEY_STRING, GT_OFF(parallel.sync), 0, 0, NULL, "every_step",
   "how often the data-parallel replicas synchronise (zero = 0): every_step, local:K "
   "(local SGD, every K-th step synchronous), diloco:K (DiLoCo outer Nesterov step every "
   "K), easgd:K,ALPHA (elastic averaging every K) or stale:S (gradients applied S steps "
   "late, non-blocking); docs/communication.md", false, false},
  {"parallel", "outer_lr", GT_KEY_REAL, GT_OFF(parallel.outer_lr), 0, 100, NULL, "0.7",
   "sync = diloco: learning rate of the outer Nesterov step", true, false},
  {"parallel", "outer_momentum", GT_KEY_REAL, GT_OFF(parallel.outer_momentum), 0, 1, NULL,
   "0.9", "sync = diloco: momentum of the outer Nesterov step", false, true},
  {"parallel", "coll_table", GT_KEY_STRING, GT_OFF(parallel.coll_table), 0, 0, NULL, "",
   "allreduce = auto: the table of fitted latency and bandwidth per algorithm that "
   "benchmarks/run_coll.sh writes (benchmarks/results/coll-table.txt)", false, false},
  {"parallel", "coll_segment_kb", GT_KEY_INT, GT_OFF(parallel.coll_segment_kb), 1, 1 << 20,
   NULL, "1024", "gridtrain's algorithms: a message is cut into segments of this many KiB, "
   "which move through the algorithm's steps one after another", false, false},
  {"parallel", "coll_window", GT_KEY_INT, GT_OFF(parallel.coll_window), 1, 8, NULL, "4",
   "gridtrain's algorithms: segments in flight at once", false, false},

  {"checkpoint", "dir", GT_KEY_STRING, GT_OFF(checkpoint.dir), 0, 0, NULL, "",
   "directory of checkpoints (step_NNNNNNNN.h5 and latest); empty: no checkpoints",
   false, false},
  {"checkpoint", "every", GT_KEY_INT, GT_OFF(checkpoint.every), 0, 1e12, NULL, "0",
   "write a checkpoint every N steps; 0: only on SIGUSR1/SIGTERM and at the end",
   false, false},
  {"checkpoint", "keep", GT_KEY_INT, GT_OFF(checkpoint.keep), 0, 1e6, NULL, "3",
   "checkpoints kept in dir (older ones are deleted); 0 keeps all", false, false},
  {"checkpoint", "resume", GT_KEY_STRING, GT_OFF(checkpoint.resume), 0, 0, NULL, "auto",
   "auto: continue from dir's newest valid checkpoint if there is one; never: start "
   "fresh; or the path of a checkpoint file to start from (any layout)", false, false},
  {"checkpoint", "init", GT_KEY_STRING, GT_OFF(checkpoint.init), 0, 0, NULL, "",
   "a checkpoint file whose weights a run starts from when it does not resume (step 0, "
   "a fresh optimizer and data order, any layout and precision: fine-tuning); empty: "
   "the seed's random weights", false, false},
  {"checkpoint", "direct_io", GT_KEY_ENUM, GT_OFF(checkpoint.direct_io), 0, 0, gt_tristate_names,
   "auto",
   "how the tensor data reaches the file: written and read with O_DIRECT (past the page "
   "cache) where the file system takes it, reads from the page cache where it holds the "
   "bytes (auto); the same, but an error where a write cannot use O_DIRECT (on); or "
   "both through the page cache (off)",
   false, false},
  {"checkpoint", "on_error", GT_KEY_ENUM, GT_OFF(checkpoint.on_error), 0, 0,
   gt_on_error_names, "stop",
   "a periodic checkpoint that cannot be written (full disk, read-only directory, I/O "
   "error) stops the run (stop) or is reported and training goes on (warn); the last "
   "checkpoint and a signal's always stop", false, false},
  {"checkpoint", "local_dir", GT_KEY_STRING, GT_OFF(checkpoint.local_dir), 0, 0, NULL, "",
   "node-local directory of each rank's part of the training state (/dev/shm/run-$SLURM_JOB_ID, "
   "a local SSD; $VAR and ${VAR} come from the environment, %h is the host name); empty: no "
   "node-local tier",
   false, false},
  {"checkpoint", "local_every", GT_KEY_INT, GT_OFF(checkpoint.local_every), 0, 1e12, NULL, "0",
   "write every rank's part of the state to local_dir every N steps; 0: never", false, false},
  {"checkpoint", "local_keep", GT_KEY_INT, GT_OFF(checkpoint.local_keep), 1, 1e6, NULL, "2",
   "complete node-local states kept (older ones are deleted)", false, false},
  {"checkpoint", "partner", GT_KEY_SWITCH, GT_OFF(checkpoint.partner), 0, 0, NULL, "off",
   "on: each rank also sends its node-local part to a rank of another node, which keeps it "
   "(survives the loss of a node)", false, false},
  {"checkpoint", "async", GT_KEY_SWITCH, GT_OFF(checkpoint.async), 0, 0, NULL, "on",
   "on: the step waits only while the state is copied to host memory and the file is "
   "written in the background (one write in flight; host memory for this rank's part of "
   "the state); off: the step waits for the whole write", false, false},
};

#define GT_NKEYS ((int)(sizeof gt_keys / sizeof gt_keys[0]))
_Static_assert(sizeof gt_keys / sizeof gt_keys[0] <= GT_CONFIG_MAX_KEYS,
               "raise GT_CONFIG_MAX_KEYS");

// ---- key lookup and value parsing -------------------------------------------

static bool gt_section_exists(const char *section)
{
  for (int i = 0; i < GT_NKEYS; i++)
    if (strcmp(gt_keys[i].section, section) == 0)
      return true;
  return false;
}

static int gt_find_key(const char *section, const char *name)
{
  for (int i = 0; i < GT_NKEYS; i++)
    if (strcmp(gt_keys[i].section, section) == 0 && strcmp(gt_keys[i].name, name) == 0)
      return i;
  return -1;
}

/* "run, grid, model, ..." (each section once, in table order). */
static void gt_list_sections(char *buf, size_t size)
{
  buf[0] = '\0';
  for (int i = 0; i < GT_NKEYS; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++)
      if (strcmp(gt_keys[i].section, gt_keys[j].section) == 0)
        seen = true;
    if (seen)
      continue;
    size_t len = strlen(buf);
    snprintf(buf + len, size - len, "%s%s", len ? ", " : "", gt_keys[i].section);
  }
}

static void gt_list_keys(const char *section, char *buf, size_t size)
{
  buf[0] = '\0';
  for (int i = 0; i < GT_NKEYS; i++) {
    if (strcmp(gt_keys[i].section, section) != 0)
      continue;
    size_t len = strlen(buf);
    snprintf(buf + len, size - len, "%s%s", len ? ", " : "", gt_keys[i].name);
  }
}

/* Description of what a key accepts, for messages and --help. */
static void gt_key_accepts(const gt_key *k, char *buf, size_t size)
{
  switch (k->type) {
  case GT_KEY_INT:
    snprintf(buf, size, "an integer in [%.0f, %.0f]", k->min, k->max);
    break;
  case GT_KEY_INT_AUTO:
    snprintf(buf, size, "'auto' or an integer in [%.0f, %.0f]", k->min, k->max);
    break;
  case GT_KEY_U64:
    snprintf(buf, size, "an integer in [0, %llu]", (unsigned long long)UINT64_MAX);
    break;
  case GT_KEY_REAL:
    if (gt_key_floor(k) > 0)
      snprintf(buf, size, "0 (off) or a number in [%g, %g] (below %g s a healthy wait is taken "
               "for a hang)", gt_key_floor(k), k->max, gt_key_floor(k));
    else
      snprintf(buf, size, "a number in %c%g, %g%c", k->min_open ? '(' : '[', k->min, k->max,
               k->max_open ? ')' : ']');
    break;
  case GT_KEY_STRING:
    snprintf(buf, size, "a string of at most %zu characters", k->size - 1);
    break;
  case GT_KEY_ENUM:
  case GT_KEY_SWITCH: {
    static const char *const on_off[] = {"on", "off", NULL};
    const char *const *names = k->type == GT_KEY_SWITCH ? on_off : k->names;
    size_t len = (size_t)snprintf(buf, size, "one of ");
    for (int i = 0; names[i] && len < size; i++)
      len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", names[i]);
    break;
  }
  }
}

static bool gt_parse_long(const char *s, long *out)
{
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0')
    return false;
  *out = v;
  return true;
}

/* Store value into cfg for key k; false if it is not acceptable. */
static bool gt_key_store(const gt_key *k, gt_config *cfg, const char *value)
{
  char *dst = (char *)cfg + k->offset;
  switch (k->type) {
  case GT_KEY_INT:
  case GT_KEY_INT_AUTO: {
    long v;
    if (k->type == GT_KEY_INT_AUTO && strcmp(value, "auto") == 0) {
      *(long *)dst = 0;
      return true;
    }
    if (!gt_parse_long(value, &v) || v < (long)k->min || v > (long)k->max)
      return false;
    *(long *)dst = v;
    return true;
  }
  case GT_KEY_U64: {
    char *end;
    errno = 0;
    if (value[0] == '-' || value[0] == '\0')
      return false;
    unsigned long long v = strtoull(value, &end, 10);
    if (errno || *end != '\0')
      return false;
    *(unsigned long long *)dst = v;
    return true;
  }
  case GT_KEY_REAL: {
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || end == value || *end != '\0' || !isfinite(v) || v < k->min ||
        v > k->max || (k->min_open && v == k->min) || (k->max_open && v == k->max) ||
        (v != 0 && v < gt_key_floor(k)))
      return false;
    *(double *)dst = v;
    return true;
  }
  case GT_KEY_STRING:
    if (strlen(value) >= k->size)
      return false;
    memcpy(dst, value, strlen(value) + 1);
    return true;
  case GT_KEY_ENUM:
    for (int i = 0; k->names[i]; i++)
      if (strcmp(value, k->names[i]) == 0) {
        *(int *)dst = i;
        return true;
      }
    return false;
  case GT_KEY_SWITCH:
    if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0)
      return false;
    *(bool *)dst = strcmp(value, "on") == 0;
    return true;
  }
  return false;
}

static void gt_key_format(const gt_key *k, const gt_config *cfg, char *buf, size_t size)
{
  const char *src = (const char *)cfg + k->offset;
  switch (k->type) {
  case GT_KEY_INT: snprintf(buf, size, "%ld", *(const long *)src); break;
  case GT_KEY_INT_AUTO:
    if (*(const long *)src == 0)
      snprintf(buf, size, "auto");
    else
      snprintf(buf, size, "%ld", *(const long *)src);
    break;
  case GT_KEY_U64: snprintf(buf, size, "%llu", *(const unsigned long long *)src); break;
  case GT_KEY_REAL: {
    /* the shortest text that reads back as the same double: the printed
     * deck (every checkpoint stores it) must parse to this configuration,
     * and a fixed "%.9g" turned 0.9999999999 into "1", outside [0, 1) */
    const double v = *(const double *)src;
    for (int digits = 1; digits <= 17; digits++) {
      snprintf(buf, size, "%.*g", digits, v);
      if (strtod(buf, NULL) == v)
        break;
    }
    break;
  }
  case GT_KEY_STRING: snprintf(buf, size, "%s", src); break;
  case GT_KEY_ENUM: snprintf(buf, size, "%s", k->names[*(const int *)src]); break;
  case GT_KEY_SWITCH: snprintf(buf, size, "%s", *(const bool *)src ? "on" : "off"); break;
  }
}

// ---- parsing ----------------------------------------------------------------

typedef struct {
  gt_config *cfg;
  const char *source;     /* file name or "command line" */
  const char *text;       /* deck text being read */
  size_t pos;             /* reader position in text */
  int line;               /* line number of the last line handed to inih */
  int set_line[GT_NKEYS]; /* line where each key was set in this text, 0 if not */
  char cli_set[GT_NKEYS]; /* set on the command line */
  int status;             /* first error */
  int error_line;         /* line of that error */
  gt_config_origin origin;
} gt_parse_ctx;

static int gt_apply(gt_parse_ctx *ctx, const char *section, const char *name,
                    const char *value, const char *where)
{
  char list[512], accepts[256];
  if (section[0] == '\0')
    return GT_ERROR(GT_ERR_INPUT, "%s: key '%s' is outside any section; put it under one of [%s]",
                    where, name, (gt_list_sections(list, sizeof list), list));
  if (!gt_section_exists(section)) {
    gt_list_sections(list, sizeof list);
    return GT_ERROR(GT_ERR_INPUT, "%s: unknown section [%s]; valid sections: %s", where,
                    section, list);
  }
  int i = gt_find_key(section, name);
  if (i < 0) {
    gt_list_keys(section, list, sizeof list);
    return GT_ERROR(GT_ERR_INPUT, "%s: unknown key '%s' in [%s]; valid keys: %s", where,
                    name, section, list);
  }
  /* a value must come back the same from the deck text that checkpoints
   * store (gt_config_to_ini): no line breaks, no edge blanks, no comment */
  const size_t vlen = strlen(value);
  bool comment = value[0] == ';' || value[0] == '#';
  for (size_t c = 1; c < vlen && !comment; c++) /* inih: any isspace() before it */
    comment = (value[c] == ';' || value[c] == '#') && isspace((unsigned char)value[c - 1]);
  if (strpbrk(value, "\r\n") || (vlen && (isspace((unsigned char)value[0]) ||
                                           isspace((unsigned char)value[vlen - 1]))) ||
      comment)
    return GT_ERROR(GT_ERR_INPUT, "%s: [%s] %s: the value '%.40s' has a line break, blanks at "
                    "its ends or a ';'/'#' comment after a blank; a deck cannot hold it",
                    where, section, name, value);
  /* nor a line longer than inih reads (the printed deck "name = value") */
  const size_t line = strlen(name) + 3 + vlen;
  if (line > GT_INI_LINE_MAX - 2)
    return GT_ERROR(GT_ERR_INPUT, "%s: [%s] %s: the value of %zu characters makes a deck "
                    "line of %zu, and a deck line holds at most %d; use a shorter value (a "
                    "relative path, or a link)", where, section, name, vlen, line,
                    GT_INI_LINE_MAX - 2);
  if (ctx->origin == GT_FROM_CLI) { /* the last one winning hides typos in job scripts */
    if (ctx->cli_set[i])
      return GT_ERROR(GT_ERR_INPUT, "%s: %s.%s is given twice; give each key once", where,
                      section, name);
    ctx->cli_set[i] = 1;
  }
  if (ctx->origin == GT_FROM_DECK) {
    if (ctx->set_line[i])
      return GT_ERROR(GT_ERR_INPUT, "%s: [%s] %s is set twice (first on line %d)", where,
                      section, name, ctx->set_line[i]);
    ctx->set_line[i] = ctx->line;
  }
  ctx->cfg->line[i] = ctx->origin == GT_FROM_DECK ? ctx->line : 0;
  if (!gt_key_store(&gt_keys[i], ctx->cfg, value)) {
    gt_key_accepts(&gt_keys[i], accepts, sizeof accepts);
    return GT_ERROR(GT_ERR_INPUT, "%s: [%s] %s = '%s' is not valid; expected %s", where,
                    section, name, value, accepts);
  }
  ctx->cfg->origin[i] = (unsigned char)ctx->origin;
  return GT_SUCCESS;
}

static int gt_ini_handler(void *user, const char *section, const char *name,
                          const char *value)
{
  gt_parse_ctx *ctx = user;
  if (ctx->status != GT_SUCCESS)
    return 0;
  char where[GT_PATH_MAX + 32];
  snprintf(where, sizeof where, "%s:%d", ctx->source, ctx->line);
  ctx->status = gt_apply(ctx, section, name, value, where);
  if (ctx->status != GT_SUCCESS)
    ctx->error_line = ctx->line;
  return ctx->status == GT_SUCCESS;
}

/* inih reader over a string that counts lines and rejects over-long ones. */
static char *gt_ini_reader(char *str, int num, void *stream)
{
  gt_parse_ctx *ctx = stream;
  const char *text = ctx->text + ctx->pos;
  if (*text == '\0' || ctx->status != GT_SUCCESS)
    return NULL;
  const char *nl = strchr(text, '\n');
  size_t len = nl ? (size_t)(nl - text) + 1 : strlen(text);
  ctx->line++;
  if (len >= (size_t)num) {
    char where[GT_PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%d", ctx->source, ctx->line);
    ctx->status = GT_ERROR(GT_ERR_INPUT, "%s: line is longer than %d characters", where,
                           num - 2);
    ctx->error_line = ctx->line;
    return NULL;
  }
  memcpy(str, text, len);
  str[len] = '\0';
  ctx->pos += len;
  /* inih drops what follows a section header ("[checkpoint] dir = x" set
   * nothing): an error here */
  const char *p = str + strspn(str, " \t");
  const char *close = *p == '[' ? strchr(p, ']') : NULL;
  if (close) {
    const char *rest = close + 1 + strspn(close + 1, " \t\r\n");
    if (*rest && *rest != ';' && *rest != '#') {
      char where[GT_PATH_MAX + 32];
      snprintf(where, sizeof where, "%s:%d", ctx->source, ctx->line);
      ctx->status = GT_ERROR(GT_ERR_INPUT,
                             "%s: text after the section header %.*s ('%.40s'); put each "
                             "key = value on a line of its own",
                             where, (int)(close - p + 1), p, rest);
      ctx->error_line = ctx->line;
      return NULL;
    }
  }
  return str;
}

void gt_config_defaults(gt_config *cfg)
{
  memset(cfg, 0, sizeof *cfg);
  for (int i = 0; i < GT_NKEYS; i++) {
    if (gt_keys[i].defval && !gt_key_store(&gt_keys[i], cfg, gt_keys[i].defval)) {
      fprintf(stderr, "gridtrain: internal error: bad default for [%s] %s\n",
              gt_keys[i].section, gt_keys[i].name);
      abort();
    }
    cfg->origin[i] = GT_FROM_DEFAULT;
  }
}

int gt_config_parse(gt_config *cfg, const char *text, const char *source,
                    int noverrides, char *const overrides[])
{
  gt_parse_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.cfg = cfg;
  if (text) {
    ctx.source = source ? source : "deck";
    ctx.text = text;
    ctx.origin = GT_FROM_DECK;
    int rc = ini_parse_stream(gt_ini_reader, &ctx, gt_ini_handler, &ctx);
    /* inih reports the first bad line; ours may come later (a key after a
     * broken section header): the earlier problem is the real one. */
    if (ctx.status != GT_SUCCESS && !(rc > 0 && rc < ctx.error_line))
      return ctx.status;
    if (rc != 0)
      return GT_ERROR(GT_ERR_INPUT,
                      "%s:%d: cannot parse this line; expected '[section]', "
                      "'key = value' or a comment starting with ';' or '#'",
                      ctx.source, rc > 0 ? rc : ctx.line);
  }
  ctx.origin = GT_FROM_CLI;
  for (int i = 0; i < noverrides; i++) {
    const char *arg = overrides[i];
    const char *dot = strchr(arg, '.');
    const char *eq = strchr(arg, '=');
    if (!dot || !eq || dot > eq || dot == arg || eq == dot + 1)
      return GT_ERROR(GT_ERR_INPUT,
                      "command line: '%s' is not of the form section.key=value "
                      "(for example model.layers=6)",
                      arg);
    char section[64], name[64];
    size_t ns = (size_t)(dot - arg), nk = (size_t)(eq - dot - 1);
    if (ns >= sizeof section || nk >= sizeof name)
      return GT_ERROR(GT_ERR_INPUT, "command line: '%s': section or key too long", arg);
    memcpy(section, arg, ns);
    section[ns] = '\0';
    memcpy(name, dot + 1, nk);
    name[nk] = '\0';
    char where[96];
    snprintf(where, sizeof where, "command line");
    GT_CALL(gt_apply(&ctx, section, name, eq + 1, where));
  }
  return GT_SUCCESS;
}

int gt_config_set(gt_config *cfg, const char *fmt, ...)
{
  char assignment[GT_INI_LINE_MAX + 64];
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(assignment, sizeof assignment, fmt, ap);
  va_end(ap);
  GT_CHECK(n >= 0 && (size_t)n < sizeof assignment, GT_ERR_INPUT,
           "gt_config_set: '%.60s...' is longer than a deck line", assignment);
  char *const overrides[] = {assignment};
  GT_CALL(gt_config_parse(cfg, NULL, NULL, 1, overrides));
  return GT_SUCCESS;
}

/* Where key section.name was set, for a message: "DECK:LINE", "command
 * line", or the deck (or "configuration") for a default. */
static const char *gt_key_where(const gt_config *cfg, const char *section, const char *name,
                                char *buf, size_t size)
{
  const int i = gt_find_key(section, name);
  if (i >= 0 && cfg->origin[i] == GT_FROM_CLI)
    snprintf(buf, size, "command line");
  else if (i >= 0 && cfg->origin[i] == GT_FROM_DECK && cfg->deck_path[0])
    snprintf(buf, size, "%s:%d", cfg->deck_path, cfg->line[i]);
  else
    snprintf(buf, size, "%s", cfg->deck_path[0] ? cfg->deck_path : "configuration");
  return buf;
}

int gt_config_check_values(const gt_config *cfg)
{
  char src[GT_PATH_MAX + 32];
  /* the optimizer keeps its moments in fp32: a decay that rounds to 1 there
   * never forgets (0.99999999 trained to a loss of 1e8) */
  const double betas[2] = {cfg->optim.beta1, cfg->optim.beta2};
  for (int b = 0; b < 2; b++)
    GT_CHECK((float)betas[b] < 1.0f, GT_ERR_INPUT,
             "%s: [optim] beta%d = %.10g rounds to 1 in fp32 (the optimizer's precision); "
             "use at most %.8g",
             gt_key_where(cfg, "optim", b ? "beta2" : "beta1", src, sizeof src), b + 1,
             betas[b], (double)nextafterf(1.0f, 0.0f));
  GT_CHECK((float)cfg->optim.eps > 0.0f, GT_ERR_INPUT,
           "%s: [optim] eps = %g rounds to 0 in fp32; use at least %g",
           gt_key_where(cfg, "optim", "eps", src, sizeof src), cfg->optim.eps, (double)FLT_MIN);
  GT_CHECK(cfg->optim.min_lr <= cfg->optim.lr, GT_ERR_INPUT,
           "%s: [optim] min_lr = %g is above lr = %g; the cosine decay goes from lr down to "
           "min_lr",
           gt_key_where(cfg, "optim", "min_lr", src, sizeof src), cfg->optim.min_lr,
           cfg->optim.lr);
  char local[GT_PATH_MAX], missing[128];
  GT_CHECK(gt_path_expand_env(cfg->checkpoint.local_dir, local, sizeof local, missing,
                              sizeof missing) == 0,
           GT_ERR_INPUT,
           "%s: [checkpoint] local_dir = %s: %s; set it in the environment of every rank, or "
           "write the path out",
           gt_key_where(cfg, "checkpoint", "local_dir", src, sizeof src),
           cfg->checkpoint.local_dir, missing);
  GT_CHECK(!cfg->checkpoint.local_every || local[0], GT_ERR_INPUT,
           "%s: [checkpoint] local_every = %ld needs [checkpoint] local_dir",
           gt_key_where(cfg, "checkpoint", "local_every", src, sizeof src),
           cfg->checkpoint.local_every);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  GT_CHECK(cfg->backend.threads <= 0 || cpus <= 0 || cfg->backend.threads <= 2 * cpus,
           GT_ERR_INPUT,
           "%s: [backend] threads = %ld is more than twice the %ld CPUs of this node (OpenBLAS "
           "spins in its allocator with that many); use at most %ld, or auto",
           gt_key_where(cfg, "backend", "threads", src, sizeof src), cfg->backend.threads, cpus, 2 * cpus);
  return GT_SUCCESS;
}

int gt_config_locate_error(const gt_config *cfg, int status)
{
  const char *msg = gt_error_message();
  const size_t dlen = strlen(cfg->deck_path);
  if (status != GT_ERR_INPUT || !msg[0] || (dlen && strncmp(msg, cfg->deck_path, dlen) == 0) ||
      strncmp(msg, "command line", 12) == 0)
    return status;
  for (const char *p = strchr(msg, '['); p; p = strchr(p + 1, '[')) {
    const char *close = strchr(p, ']');
    if (!close || close[1] != ' ' || close - p - 1 >= 32)
      continue;
    char section[32], name[64];
    snprintf(section, sizeof section, "%.*s", (int)(close - p - 1), p + 1);
    size_t n = strspn(close + 2, "abcdefghijklmnopqrstuvwxyz0123456789_");
    const char *after = close + 2 + n;
    if (n == 0 || n >= sizeof name || (after[0] != '=' && strncmp(after, " =", 2) != 0))
      continue; /* a key with its value ("[x] y = v"), not one named as advice */
    snprintf(name, sizeof name, "%.*s", (int)n, close + 2);
    const int i = gt_find_key(section, name);
    if (i < 0)
      continue;
    const bool collective = gt_error_is_collective();
    if (cfg->origin[i] == GT_FROM_DECK && dlen)
      gt_error_wrap(status, __FILE__, __LINE__, __func__, "%s:%d", cfg->deck_path,
                    cfg->line[i]);
    else if (cfg->origin[i] == GT_FROM_CLI)
      gt_error_wrap(status, __FILE__, __LINE__, __func__, "command line");
    gt_error_set_collective(collective);
    return status;
  }
  return status;
}

int gt_config_check_required(const gt_config *cfg)
{
  for (int i = 0; i < GT_NKEYS; i++) {
    const gt_key *k = &gt_keys[i];
    if (k->defval == NULL && ((const char *)cfg + k->offset)[0] == '\0')
      return GT_ERROR(GT_ERR_INPUT, "%s: [%s] %s is required (%s)",
                      cfg->deck_path[0] ? cfg->deck_path : "configuration",
                      k->section, k->name, k->help);
  }
  return GT_SUCCESS;
}

// ---- collective load --------------------------------------------------------

#define GT_DECK_MAX (1 << 20) /* bytes; decks are a few KiB */

static int gt_read_text_file(const char *path, char **text_out)
{
  FILE *f = fopen(path, "rb");
  GT_CHECK(f != NULL, GT_ERR_INPUT, "cannot open input deck '%s': %s", path,
           strerror(errno));
  size_t cap = 4096, len = 0;
  char *text = malloc(cap);
  if (!text) {
    fclose(f);
    GT_CHECK_ALLOC(text, cap);
  }
  for (;;) {
    if (len > GT_DECK_MAX) { /* /dev/zero, a dataset given as the deck, ... */
      free(text);
      fclose(f);
      return GT_ERROR(GT_ERR_INPUT, "input deck '%s' is larger than %d KiB; is it an input "
                      "deck?", path, GT_DECK_MAX / 1024);
    }
    if (len + 1 >= cap) {
      char *grown = realloc(text, cap * 2);
      if (!grown) {
        free(text);
        fclose(f);
        GT_CHECK_ALLOC(grown, cap * 2);
      }
      text = grown;
      cap *= 2;
    }
    size_t n = fread(text + len, 1, cap - 1 - len, f);
    len += n;
    if (n == 0)
      break;
  }
  int failed = ferror(f);
  fclose(f);
  text[len] = '\0';
  if (failed || strlen(text) != len) {
    free(text);
    GT_CHECK(!failed, GT_ERR_INPUT, "cannot read input deck '%s'", path);
    return GT_ERROR(GT_ERR_INPUT, "input deck '%s' contains a NUL byte; is it a text file?",
                    path);
  }
  *text_out = text;
  return GT_SUCCESS;
}

int gt_config_load(gt_config *cfg, const char *deck_path, int noverrides,
                   char *const overrides[], MPI_Comm comm)
{
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  gt_config_defaults(cfg);
  char *text = NULL;
  int status = GT_SUCCESS;
  if (deck_path) {
    /* rank 0 reads; its verdict (and the deck's length) goes to every rank */
    struct {
      long long len;
      int status;
      char message[1024];
    } head = {0, GT_SUCCESS, ""};
    if (rank == 0) {
      head.status = gt_read_text_file(deck_path, &text);
      if (head.status == GT_SUCCESS)
        head.len = (long long)strlen(text);
      else
        snprintf(head.message, sizeof head.message, "%s", gt_error_message());
    }
    GT_CALL_MPI(MPI_Bcast(&head, (int)sizeof head, MPI_BYTE, 0, comm));
    if (head.status != GT_SUCCESS) {
      if (rank != 0)
        gt_error_set(head.status, __FILE__, __LINE__, __func__, "%s", head.message);
      gt_error_set_collective(true);
      return head.status;
    }
    if (rank != 0) {
      text = malloc((size_t)head.len + 1);
      GT_CHECK_ALLOC(text, head.len + 1);
    }
    GT_CALL_MPI(MPI_Bcast(text, (int)head.len + 1, MPI_CHAR, 0, comm));
    snprintf(cfg->deck_path, sizeof cfg->deck_path, "%s", deck_path);
  }
  /* Every rank parses the same bytes, so every rank reaches the same verdict. */
  status = gt_config_parse(cfg, text, deck_path, noverrides, overrides);
  if (status == GT_SUCCESS)
    status = gt_config_check_required(cfg);
  if (status == GT_SUCCESS)
    status = gt_config_check_values(cfg);
  free(text);
  if (status != GT_SUCCESS)
    gt_error_set_collective(true);
  return status;
}

// ---- output -----------------------------------------------------------------

int gt_config_to_ini(const gt_config *cfg, char *buf, size_t size)
{
  size_t len = 0;
  const char *section = "";
  char value[GT_PATH_MAX];
  if (size > 0)
    buf[0] = '\0';
  for (int i = 0; i < GT_NKEYS; i++) {
    const gt_key *k = &gt_keys[i];
    gt_key_format(k, cfg, value, sizeof value);
    int n;
    if (strcmp(section, k->section) != 0) {
      n = snprintf(len < size ? buf + len : NULL, len < size ? size - len : 0, "%s[%s]\n",
                   i ? "\n" : "", k->section);
      len += (size_t)n;
      section = k->section;
    }
    n = snprintf(len < size ? buf + len : NULL, len < size ? size - len : 0, "%s = %s\n",
                 k->name, value);
    len += (size_t)n;
  }
  return (int)len;
}

void gt_config_print_row(FILE *out, const char *key, const char *value, const char *origin)
{
  fprintf(out, "  %-24s %-32s %s\n", key, value[0] ? value : "(none)", origin);
}

void gt_config_print_table(const gt_config *cfg, FILE *out)
{
  static const char *origin_name[] = {"default", "deck", "command line"};
  char key[80], value[GT_PATH_MAX];
  gt_config_print_row(out, "key", "value", "from");
  for (int i = 0; i < GT_NKEYS; i++) {
    const gt_key *k = &gt_keys[i];
    snprintf(key, sizeof key, "%s.%s", k->section, k->name);
    gt_key_format(k, cfg, value, sizeof value);
    gt_config_print_row(out, key, value,
                        origin_name[cfg->origin[i] <= GT_FROM_CLI ? cfg->origin[i] : 0]);
  }
}

void gt_config_print_keys(FILE *out)
{
  const char *section = "";
  char accepts[256], key[80];
  for (int i = 0; i < GT_NKEYS; i++) {
    const gt_key *k = &gt_keys[i];
    if (strcmp(section, k->section) != 0) {
      fprintf(out, "\n  [%s]\n", k->section);
      section = k->section;
    }
    gt_key_accepts(k, accepts, sizeof accepts);
    snprintf(key, sizeof key, "%s.%s", k->section, k->name);
    fprintf(out, "    %-22s %s\n", key, k->help);
    fprintf(out, "    %-22s   accepts %s; default: %s\n", "", accepts,
            k->defval ? (k->defval[0] ? k->defval : "(empty)") : "(required)");
  }
}
