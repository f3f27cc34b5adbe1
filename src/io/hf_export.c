/*
 * hf_export.c - a checkpoint as a Hugging Face GPT-2 or Llama directory
 * (hf_export.h, docs/checkpoints.md "Hugging Face"): the vocabulary and
 * tokenizer from the dataset, the weights renamed, transposed, cut and
 * rounded into model.safetensors, then the tokenizer's files
 * (tokenizer.model, or tokenizer.json and tokenizer_config.json), README.txt
 * and config.json.
 */
#include "gridtrain/hf_export.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gridtrain/checkpoint.h"
#include "gridtrain/data.h"
#include "gridtrain/error.h"
#include "gridtrain/gpt.h"
#include "gridtrain/half.h"
#include "gridtrain/rope.h"
#include "gridtrain/hf_import.h"
#include "gridtrain/path.h"
#include "gridtrain/safetensors.h"
#include "gridtrain/tokenizer.h"
#include "gridtrain/version.h"
#include "ckpt_internal.h"
#include "h5util.h"
#include "hf_names.h"

#define GT_HF_LN_EPS "1e-05"    /* GT_LN_EPS of the backends */
#define GT_HF_ACTIVATION "gelu_new" /* GPT-2's tanh GELU, the backends' */
#define GT_HF_TOKENIZER_FILE "tokenizer.model"   /* SentencePiece's */
#define GT_HF_TOKENIZER_JSON "tokenizer.json"    /* byte-level BPE's */
#define GT_HF_TOKENIZER_CONFIG "tokenizer_config.json"

/* The added tokens that stand for the start and the end of a text in GPT-2
 * (<|endoftext|> both) and Llama 3, in the order they are looked for. */
static const char *const gt_hf_bos[] = {"<|begin_of_text|>", "<|endoftext|>"};
static const char *const gt_hf_eos[] = {"<|end_of_text|>", "<|endoftext|>"};

// ---- the weights ------------------------------------------------------------------------

/* One tensor of model.safetensors: piece `piece` (rows [row0, row0 + rows))
 * of gridtrain's tensor `logical`, or all of it transposed (hf_names.h). */
typedef struct {
  int logical;
  long row0, rows;
  bool transpose;
} gt_hf_entry;

typedef struct {
  gt_ckpt_weights *reader;
  gt_gpt_shape shape;
  int vocab; /* rows of wte (and lm_head) written */
  gt_dtype dtype;
  int n;     /* entries */
  gt_st_tensor *t;
  gt_hf_entry *e;
  char (*names)[GT_PARAM_NAME_MAX];  /* gridtrain's, per logical tensor */
  char (*hf)[GT_HF_NAME_MAX];        /* HF's, per entry */
  long (*src)[GT_TENSOR_MAX_DIMS];   /* the checkpoint's shapes */
  int *ndim;
  int loaded;                        /* logical tensor in values, or -1 */
  const float *values;
  float *scratch;
  size_t cap;
} gt_hf_weights;

static void gt_hf_weights_free(gt_hf_weights *w)
{
  free(w->t);
  free(w->e);
  free(w->names);
  free(w->hf);
  free(w->src);
  free(w->ndim);
  free(w->scratch);
}

/* The tensors of model.safetensors, in gridtrain's order. */
static int gt_hf_weights_plan(gt_hf_weights *w)
{
  const int n = gt_gpt_logical_count(&w->shape);
  const int groups = w->shape.experts > 0 ? w->shape.experts : 1; /* Mixtral's experts */
  const int most = n * GT_HF_PIECES_MAX * groups;
  w->t = calloc((size_t)most, sizeof *w->t);
  w->e = calloc((size_t)most, sizeof *w->e);
  w->names = calloc((size_t)n, sizeof *w->names);
  w->hf = calloc((size_t)most, sizeof *w->hf);
  w->src = calloc((size_t)n, sizeof *w->src);
  w->ndim = calloc((size_t)n, sizeof *w->ndim);
  GT_CHECK(w->t && w->e && w->names && w->hf && w->src && w->ndim, GT_ERR_SYSTEM,
           "out of memory for the names of %d tensors", n);
  w->loaded = -1;
  for (int i = 0; i < n; i++) {
    gt_gpt_logical_param(&w->shape, i, w->names[i], &w->ndim[i], w->src[i]);
    const bool vocab_rows = strcmp(w->names[i], "wte") == 0 ||
                            strcmp(w->names[i], "lm_head.weight") == 0;
    /* a tensor of more dimensions is rows of its last one */
    const int nd = w->ndim[i];
    const long cols = nd >= 2 ? w->src[i][nd - 1] : 1;
    long row = 0;
    for (int g = 0, ng = 1; g < ng; g++) {
      gt_hf_pieces p;
      GT_CALL(gt_hf_pieces_of(&w->shape, w->names[i], nd, w->src[i], g, &p));
      ng = p.groups;
      for (int k = 0; k < p.n; k++) {
        GT_ASSERT(w->n < most);
        gt_st_tensor *t = &w->t[w->n];
        gt_hf_entry *e = &w->e[w->n];
        snprintf(w->hf[w->n], sizeof w->hf[w->n], "%s", p.name[k]);
        *e = (gt_hf_entry){i, row, vocab_rows ? w->vocab : p.rows[k], p.transpose};
        *t = (gt_st_tensor){.name = w->hf[w->n], .dtype = w->dtype, .ndim = nd >= 2 ? 2 : 1};
        t->dims[0] = e->rows;
        t->dims[1] = cols;
        if (p.transpose) {
          GT_ASSERT(t->ndim == 2);
          t->dims[0] = cols;
          t->dims[1] = e->rows;
        }
        row += p.rows[k];
        w->n++;
      }
    }
  }
  return GT_SUCCESS;
}

/* gt_st_fill_fn: entry j read, cut, transposed and rounded. */
static int gt_hf_fill(void *ctx, int j, void *data, size_t bytes)
{
  gt_hf_weights *w = ctx;
  const gt_hf_entry *e = &w->e[j];
  const int i = e->logical;
  if (w->loaded != i) {
    GT_CALL(gt_ckpt_weights_get(w->reader, w->names[i], w->ndim[i], w->src[i], &w->values));
    w->loaded = i;
  }
  const size_t n = bytes / gt_dtype_size(w->dtype);
  const size_t cols = w->ndim[i] >= 2 ? (size_t)w->src[i][w->ndim[i] - 1] : 1;
  const float *values = w->values + (size_t)e->row0 * cols;
  GT_CALL(gt_ckpt_grow((void **)&w->scratch, &w->cap, n, sizeof(float)));
  if (e->transpose) { /* (rows, cols) -> (cols, rows) */
    const size_t rows = (size_t)e->rows;
    GT_ASSERT(rows * cols == n);
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++)
        w->scratch[c * rows + r] = values[r * cols + c];
  } else { /* its rows as they are (wte and lm_head: the first vocab) */
    memcpy(w->scratch, values, n * sizeof(float));
  }
  gt_from_f32(w->dtype, data, w->scratch, n);
  if (w->dtype == GT_F16 || w->dtype == GT_BF16) {
    const uint16_t *h = data, inf = w->dtype == GT_F16 ? 0x7c00u : 0x7f80u;
    for (size_t k = 0; k < n; k++)
      GT_CHECK((h[k] & inf) != inf, GT_ERR_INPUT,
               "%s (%s) holds %g, which is beyond %s's range; export with --dtype fp32%s",
               w->names[i], w->hf[j], (double)w->scratch[k], gt_dtype_name(w->dtype),
               w->dtype == GT_F16 ? " or bf16" : "");
  }
  return GT_SUCCESS;
}

// ---- the dataset: vocabulary and tokenizer ---------------------------------------------

typedef struct {
  char spec[GT_PATH_MAX]; /* the dataset */
  long vocab;             /* its vocab_size */
  gt_tokenizer *tok;      /* NULL: the data names no tokenizer */
  gt_spm_special special; /* SentencePiece's, BPE's bos and eos; all -1 otherwise */
  bool own;               /* no dataset: the checkpoint's own tokenizer (an import's),
                             every row of wte kept */
} gt_hf_data;

static bool gt_hf_is(const gt_hf_data *d, gt_tokenizer_kind kind)
{
  return d->tok && gt_tokenizer_kind_of(d->tok) == kind;
}

/* The first of names that is an added token of tok, or -1. */
static int gt_hf_added(const gt_tokenizer *tok, const char *const *names, int n)
{
  for (int i = 0; i < n; i++) {
    const int id = gt_tokenizer_added_id(tok, names[i]);
    if (id >= 0)
      return id;
  }
  return -1;
}

/* [data] train of the checkpoint's deck. */
static int gt_hf_deck_data(const gt_ckpt_meta *meta, const char *ckpt, char *spec, size_t size)
{
  gt_config *cfg = malloc(sizeof *cfg);
  GT_CHECK_ALLOC(cfg, sizeof *cfg);
  gt_config_defaults(cfg);
  int status = gt_config_parse(cfg, meta->deck ? meta->deck : "", ckpt, 0, NULL);
  if (status != GT_SUCCESS)
    status = gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                           "cannot read [data] train from the deck of checkpoint %s (give "
                           "--data FILE.h5)", ckpt);
  else if (!cfg->data.train[0])
    status = GT_ERROR(GT_ERR_INPUT, "the deck of checkpoint %s names no [data] train; give "
                      "--data FILE.h5", ckpt);
  else
    snprintf(spec, size, "%s", cfg->data.train);
  free(cfg);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* Does the dataset's file name a tokenizer (root attribute `tokenizer`)? */
static int gt_hf_names_tokenizer(const char *spec, bool *names)
{
  char file[GT_PATH_MAX];
  const char *colon = strstr(spec, ":/");
  const size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
  GT_CHECK(len < sizeof file, GT_ERR_INPUT, "'%s' is too long", spec);
  memcpy(file, spec, len);
  file[len] = '\0';
  hid_t ids[1] = {H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT)};
  GT_CHECK(ids[0] >= 0, GT_ERR_INPUT, "cannot open the dataset '%s'", file);
  const htri_t has = H5Aexists(ids[0], "tokenizer");
  GT_CALL(gt_h5_close_all(has < 0 ? gt_error_hdf5("H5Aexists", __FILE__, __LINE__, __func__)
                                  : GT_SUCCESS,
                          1, ids));
  *names = has > 0;
  return GT_SUCCESS;
}

static int gt_hf_data_open(const char *spec, gt_hf_data *d)
{
  gt_dataset *ds = NULL;
  GT_CALL(gt_dataset_open(spec, "/train/tokens", MPI_COMM_SELF, &ds));
  d->vocab = gt_dataset_vocab(ds);
  GT_CALL(gt_dataset_close(&ds));
  /* bytes when it says so or by its vocabulary of 256 (tokenizer.h); data
   * of other vocabularies without the attribute are token ids as they are */
  bool names = false;
  GT_CALL(gt_hf_names_tokenizer(spec, &names));
  if (names || d->vocab == 256)
    GT_CALL(gt_tokenizer_from_file(spec, &d->tok));
  if (gt_hf_is(d, GT_TOKENIZER_SENTENCEPIECE)) {
    const void *model;
    size_t size;
    gt_tokenizer_model(d->tok, &model, &size);
    GT_CALL(gt_hf_spm_special(model, size, &d->special));
  }
  if (gt_hf_is(d, GT_TOKENIZER_BPE)) {
    d->special.bos = gt_hf_added(d->tok, gt_hf_bos, 2);
    d->special.eos = gt_hf_added(d->tok, gt_hf_eos, 2);
  }
  return GT_SUCCESS;
}

static int gt_hf_data_find(const gt_ckpt_meta *meta, const char *ckpt, const char *data,
                           gt_hf_data *d)
{
  d->special = (gt_spm_special){-1, -1, -1, -1};
  bool names = false;
  if (!data && gt_hf_names_tokenizer(ckpt, &names) == GT_SUCCESS && names) {
    /* an imported checkpoint carries its tokenizer and has no dataset */
    snprintf(d->spec, sizeof d->spec, "%s", ckpt);
    d->own = true;
    d->vocab = meta->vocab;
    GT_CALL(gt_tokenizer_from_file(ckpt, &d->tok));
    if (gt_hf_is(d, GT_TOKENIZER_BPE)) {
      d->special.bos = gt_hf_added(d->tok, gt_hf_bos, 2);
      d->special.eos = gt_hf_added(d->tok, gt_hf_eos, 2);
    }
    return GT_SUCCESS;
  }
  gt_error_clear();
  if (data)
    snprintf(d->spec, sizeof d->spec, "%s", data);
  else if (gt_hf_deck_data(meta, ckpt, d->spec, sizeof d->spec) != GT_SUCCESS) {
    /* no dataset (an import without a tokenizer): the token ids as they are */
    gt_error_clear();
    snprintf(d->spec, sizeof d->spec, "%s", ckpt);
    d->own = true;
    d->vocab = meta->vocab;
    return GT_SUCCESS;
  }
  if (gt_hf_data_open(d->spec, d) != GT_SUCCESS)
    return gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                         "the Hugging Face export takes the vocabulary and tokenizer from the "
                         "training data (%s)",
                         data ? "--data" : "the deck's [data] train; give --data FILE.h5 if "
                                           "it moved");
  return GT_SUCCESS;
}

// ---- the small files --------------------------------------------------------------------

/* "null" or the id. */
static const char *gt_hf_id(int id, char *buf, size_t size)
{
  if (id < 0)
    return "null";
  snprintf(buf, size, "%d", id);
  return buf;
}

static const char *gt_hf_torch_dtype(gt_dtype t)
{
  return t == GT_BF16 ? "bfloat16" : t == GT_F16 ? "float16" : "float32";
}

/* A model with experts exports as Mixtral (MixtralForCausalLM), which has
 * them in every block, all routed, dropless, with the default rotary
 * positions: anything else would not be the same model there. */
static int gt_hf_export_moe_check(const gt_gpt_shape *s, const char *ckpt)
{
  if (s->experts == 0)
    return GT_SUCCESS;
  const char *why = !gt_gpt_shape_llama(s)          ? "type = gpt (Mixtral is a llama)"
                    : s->moe_every > 1              ? "moe_every > 1 (Mixtral: every block)"
                    : s->shared_experts > 0         ? "shared_experts (Mixtral has none)"
                    : s->capacity_factor > 0        ? "a capacity_factor (Mixtral is dropless)"
                    : s->rope.type != GT_ROPE_DEFAULT ? "rope_scaling (Mixtral has none)"
                                                    : NULL;
  GT_CHECK(!why, GT_ERR_INPUT,
           "checkpoint %s: its experts export as Mixtral's, which it cannot be with [model] "
           "%s",
           ckpt, why);
  return GT_SUCCESS;
}

static int gt_hf_config(const char *path, const gt_gpt_shape *s, int vocab, gt_dtype dtype,
                        const gt_spm_special *sp)
{
  char bos[16], eos[16], pad[16], text[4096], rope[512] = "null";
  const char *tie = gt_gpt_shape_tied(s) ? "true" : "false";
  int n;
  if (gt_gpt_shape_llama(s)) {
    if (s->rope.type == GT_ROPE_LINEAR)
      snprintf(rope, sizeof rope, "{\"rope_type\": \"linear\", \"factor\": %.17g}",
               s->rope.factor);
    else if (s->rope.type == GT_ROPE_LLAMA3)
      snprintf(rope, sizeof rope,
               "{\"rope_type\": \"llama3\", \"factor\": %.17g, \"low_freq_factor\": %.17g, "
               "\"high_freq_factor\": %.17g, \"original_max_position_embeddings\": %d}",
               s->rope.factor, s->rope.low_freq_factor, s->rope.high_freq_factor,
               (int)s->rope.original_max_position_embeddings);
    const bool mx = s->experts > 0;
    char moe[512] = "";
    if (mx)
      snprintf(moe, sizeof moe,
               "  \"num_local_experts\": %d,\n"
               "  \"num_experts_per_tok\": %d,\n"
               "  \"router_aux_loss_coef\": %.17g,\n"
               "  \"router_jitter_noise\": 0.0,\n"
               "  \"output_router_logits\": false,\n"
               "  \"sliding_window\": null,\n",
               s->experts, s->top_k, s->aux_loss);
    n = snprintf(
        text, sizeof text,
        "{\n"
        "  \"architectures\": [\"%s\"],\n"
        "  \"model_type\": \"%s\",\n"
        "%s"
        "  \"vocab_size\": %d,\n"
        "  \"hidden_size\": %d,\n"
        "  \"intermediate_size\": %d,\n"
        "  \"num_hidden_layers\": %d,\n"
        "  \"num_attention_heads\": %d,\n"
        "  \"num_key_value_heads\": %d,\n"
        "  \"head_dim\": %d,\n"
        "  \"max_position_embeddings\": %d,\n"
        "  \"hidden_act\": \"silu\",\n"
        "  \"rms_norm_eps\": %.9g,\n"
        "  \"rope_theta\": %.17g,\n"
        "  \"rope_scaling\": %s,\n"
        "  \"attention_bias\": false,\n"
        "  \"attention_dropout\": 0.0,\n"
        "  \"mlp_bias\": false,\n"
        "  \"pretraining_tp\": 1,\n"
        "  \"initializer_range\": 0.02,\n"
        "  \"tie_word_embeddings\": %s,\n"
        "  \"use_cache\": true,\n"
        "  \"bos_token_id\": %s,\n"
        "  \"eos_token_id\": %s,\n"
        "  \"pad_token_id\": %s,\n"
        "  \"torch_dtype\": \"%s\"\n"
        "}\n",
        mx ? "MixtralForCausalLM" : "LlamaForCausalLM", mx ? "mixtral" : "llama", moe, vocab,
        s->dim, mx ? gt_gpt_shape_expert_ffn(s) : gt_gpt_shape_ffn(s), s->layers, s->heads,
        gt_gpt_shape_kv_heads(s),
        gt_gpt_shape_head_size(s), s->max_seq, (double)gt_gpt_shape_norm_eps(s),
        s->rope_theta > 0 ? s->rope_theta : 10000.0, rope, tie,
        gt_hf_id(sp->bos, bos, sizeof bos), gt_hf_id(sp->eos, eos, sizeof eos),
        gt_hf_id(sp->pad, pad, sizeof pad), gt_hf_torch_dtype(dtype));
  } else {
    n = snprintf(
        text, sizeof text,
        "{\n"
        "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
        "  \"model_type\": \"gpt2\",\n"
        "  \"vocab_size\": %d,\n"
        "  \"n_positions\": %d,\n"
        "  \"n_embd\": %d,\n"
        "  \"n_layer\": %d,\n"
        "  \"n_head\": %d,\n"
        "  \"n_inner\": %d,\n"
        "  \"activation_function\": \"%s\",\n"
        "  \"layer_norm_epsilon\": %s,\n"
        "  \"resid_pdrop\": 0.0,\n"
        "  \"embd_pdrop\": 0.0,\n"
        "  \"attn_pdrop\": 0.0,\n"
        "  \"initializer_range\": 0.02,\n"
        "  \"scale_attn_weights\": true,\n"
        "  \"scale_attn_by_inverse_layer_idx\": false,\n"
        "  \"reorder_and_upcast_attn\": false,\n"
        "  \"tie_word_embeddings\": %s,\n"
        "  \"use_cache\": true,\n"
        "  \"bos_token_id\": %s,\n"
        "  \"eos_token_id\": %s,\n"
        "  \"pad_token_id\": %s,\n"
        "  \"torch_dtype\": \"%s\"\n"
        "}\n",
        vocab, s->max_seq, s->dim, s->layers, s->heads, 4 * s->dim, GT_HF_ACTIVATION,
        GT_HF_LN_EPS, tie, gt_hf_id(sp->bos, bos, sizeof bos),
        gt_hf_id(sp->eos, eos, sizeof eos), gt_hf_id(sp->pad, pad, sizeof pad),
        gt_hf_torch_dtype(dtype));
  }
  GT_ASSERT(n > 0 && (size_t)n < sizeof text);
  GT_CALL(gt_path_replace_bytes(path, text, (size_t)n));
  return GT_SUCCESS;
}

typedef struct {
  const char *ckpt;
  const gt_ckpt_meta *meta;
  const gt_hf_data *data;
  const gt_hf_summary *sum;
  gt_dtype dtype;
  const gt_gpt_shape *shape;
} gt_hf_readme;

static int gt_hf_readme_write(void *ctx, int fd, const char *tmp)
{
  const gt_hf_readme *r = ctx;
  const gt_ckpt_meta *m = r->meta;
  const gt_hf_summary *s = r->sum;
  char text[8192], cut[96] = "";
  if (s->vocab < s->model_vocab)
    snprintf(cut, sizeof cut, " (the checkpoint's %d rows of wte cut to %d)", s->model_vocab,
             s->vocab);
  const bool llama = gt_gpt_shape_llama(r->shape), tied = gt_gpt_shape_tied(r->shape);
  const char *arch = llama ? "Llama" : "GPT-2";
  char kv[64] = "";
  if (llama)
    snprintf(kv, sizeof kv, " (%d key/value), MLP %d", gt_gpt_shape_kv_heads(r->shape),
             gt_gpt_shape_ffn(r->shape));
  int n = snprintf(
      text, sizeof text,
      "A Hugging Face %s model exported from a gridtrain checkpoint\n"
      "(gridtrain ckpt convert --format hf; docs/checkpoints.md, \"Hugging Face\").\n\n"
      "checkpoint  %s (step %ld, written by gridtrain %s at %s)\n"
      "exported by gridtrain %s\n"
      "dataset     %s\n"
      "model       %s: %d layers, %d heads%s, dim %d, context %d, vocabulary %d%s\n"
      "weights     model.safetensors, %s (%s), under %s's names; %s\n",
      arch, r->ckpt, m->step, m->code_version, m->created, gt_version(), r->data->spec, arch,
      m->layers, m->heads, kv, m->dim, m->seq_len, s->vocab, cut, gt_dtype_name(r->dtype),
      r->dtype == GT_F32 ? "the fp32 master weights as they are"
                         : "the fp32 master weights rounded to nearest even",
      arch,
      !tied ? "the LM head is\n            its own lm_head.weight"
      : llama ? "the LM head is tied\n            to model.embed_tokens.weight and not stored"
              : "the LM head is tied\n            to transformer.wte.weight and not stored");
  GT_ASSERT(n > 0 && (size_t)n < sizeof text);
  const gt_spm_special *sp = &r->data->special;
  int k;
  if (!r->data->tok)
    k = snprintf(text + n, sizeof text - (size_t)n,
                 "tokenizer   none: the dataset names no tokenizer; its token ids (vocab_size "
                 "%ld) are the\n            model's as they are\n",
                 r->data->vocab);
  else if (gt_tokenizer_kind_of(r->data->tok) == GT_TOKENIZER_BYTES)
    k = snprintf(text + n, sizeof text - (size_t)n,
                 "tokenizer   bytes: each byte of the UTF-8 text is one token, its id the "
                 "byte's value\n"
                 "            (256 ids, no special tokens). Hugging Face has no tokenizer of "
                 "this kind,\n"
                 "            so none is written: ids = list(text.encode(\"utf-8\")), text = "
                 "bytes(ids).decode(\"utf-8\", \"replace\")\n");
  else if (gt_tokenizer_kind_of(r->data->tok) == GT_TOKENIZER_BPE)
    k = snprintf(text + n, sizeof text - (size_t)n,
                 "tokenizer   bpe: " GT_HF_TOKENIZER_JSON ", the dataset's byte-level BPE "
                 "(tokenizers.Tokenizer.from_file,\n"
                 "            or transformers.AutoTokenizer.from_pretrained(THIS_DIRECTORY) "
                 "with\n"
                 "            " GT_HF_TOKENIZER_CONFIG "); bos %d, eos %d (-1: none)\n",
                 sp->bos, sp->eos);
  else
    k = snprintf(text + n, sizeof text - (size_t)n,
                 "tokenizer   sentencepiece: " GT_HF_TOKENIZER_FILE
                 ", the dataset's SentencePiece model\n"
                 "            (sentencepiece.SentencePieceProcessor(model_file=\"" GT_HF_TOKENIZER_FILE
                 "\")); special ids:\n"
                 "            unk %d, bos %d, eos %d, pad %d (-1: none)\n",
                 sp->unk, sp->bos, sp->eos, sp->pad);
  GT_ASSERT(k > 0 && (size_t)(n + k) < sizeof text);
  n += k;
  k = snprintf(text + n, sizeof text - (size_t)n,
               "load        from transformers import GPT2LMHeadModel\n"
               "            model = GPT2LMHeadModel.from_pretrained(THIS_DIRECTORY)\n");
  GT_ASSERT(k > 0 && (size_t)(n + k) < sizeof text);
  GT_CALL(gt_path_write_all(fd, text, (size_t)(n + k), tmp));
  return GT_SUCCESS;
}

// ---- the directory ----------------------------------------------------------------------

/* out_dir made if missing; refused when not a directory, not writable, or
 * holding files without force. */
static int gt_hf_prepare_dir(const char *dir, bool force)
{
  struct stat sb;
  if (stat(dir, &sb) != 0) {
    GT_CHECK(errno == ENOENT, GT_ERR_INPUT, "cannot use the output directory %s: %s", dir,
             strerror(errno));
    GT_CHECK(mkdir(dir, 0777) == 0, GT_ERR_INPUT, "cannot create the output directory %s: %s",
             dir, strerror(errno));
    return GT_SUCCESS;
  }
  GT_CHECK(S_ISDIR(sb.st_mode), GT_ERR_INPUT,
           "the output %s exists and is not a directory; --format hf writes a directory", dir);
  GT_CHECK(access(dir, W_OK | X_OK) == 0, GT_ERR_INPUT,
           "cannot write to the output directory %s: %s", dir, strerror(errno));
  DIR *d = opendir(dir);
  GT_CHECK(d, GT_ERR_INPUT, "cannot read the output directory %s: %s", dir, strerror(errno));
  int entries = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    entries += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  GT_CHECK(force || entries == 0, GT_ERR_INPUT,
           "the output directory %s is not empty; choose a new one or add --force to "
           "overwrite the files of an export in it",
           dir);
  return GT_SUCCESS;
}

static int gt_hf_join(const char *dir, const char *name, char *path, size_t size)
{
  const int n = snprintf(path, size, "%s/%s", dir, name);
  GT_CHECK(n > 0 && (size_t)n < size, GT_ERR_INPUT, "the output directory %s is too long",
           dir);
  return GT_SUCCESS;
}

/* The file dir/name with data (size bytes) when want, else none there
 * (--force over an export of another tokenizer: its file would mislead). */
static int gt_hf_file_or_none(const char *dir, const char *name, bool want, const void *data,
                              size_t size)
{
  char path[GT_PATH_MAX];
  GT_CALL(gt_hf_join(dir, name, path, sizeof path));
  if (want)
    GT_CALL(gt_path_replace_bytes(path, data, size));
  else
    GT_CHECK(unlink(path) == 0 || errno == ENOENT, GT_ERR_INPUT, "cannot remove %s: %s", path,
             strerror(errno));
  return GT_SUCCESS;
}

/* A JSON string of an added token's text (plain ASCII without quotes or
 * backslashes, as the names of gt_hf_bos and gt_hf_eos), or null. */
static const char *gt_hf_token_json(const gt_tokenizer *tok, int id, const char *const *names,
                                    char *buf, size_t size)
{
  for (int i = 0; id >= 0 && i < 2; i++)
    if (gt_tokenizer_added_id(tok, names[i]) == id) {
      snprintf(buf, size, "\"%s\"", names[i]);
      return buf;
    }
  return "null";
}

/* The tokenizer's files: tokenizer.model (SentencePiece) or tokenizer.json
 * and tokenizer_config.json (BPE), the others removed. */
static int gt_hf_tokenizer_files(const char *out_dir, const gt_hf_data *data, int seq_len)
{
  const void *model = NULL;
  size_t size = 0;
  if (data->tok)
    gt_tokenizer_model(data->tok, &model, &size);
  const bool spm = gt_hf_is(data, GT_TOKENIZER_SENTENCEPIECE);
  const bool bpe = gt_hf_is(data, GT_TOKENIZER_BPE);
  GT_CALL(gt_hf_file_or_none(out_dir, GT_HF_TOKENIZER_FILE, spm, model, size));
  GT_CALL(gt_hf_file_or_none(out_dir, GT_HF_TOKENIZER_JSON, bpe, model, size));
  char config[1024], bos[64], eos[64];
  int n = 0;
  if (bpe) /* transformers' fast tokenizer over tokenizer.json, which decodes as it is */
    n = snprintf(config, sizeof config,
                 "{\n"
                 "  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n"
                 "  \"model_max_length\": %d,\n"
                 "  \"clean_up_tokenization_spaces\": false,\n"
                 "  \"bos_token\": %s,\n"
                 "  \"eos_token\": %s\n"
                 "}\n",
                 seq_len,
                 gt_hf_token_json(data->tok, data->special.bos, gt_hf_bos, bos, sizeof bos),
                 gt_hf_token_json(data->tok, data->special.eos, gt_hf_eos, eos, sizeof eos));
  GT_ASSERT(n >= 0 && (size_t)n < sizeof config);
  GT_CALL(gt_hf_file_or_none(out_dir, GT_HF_TOKENIZER_CONFIG, bpe, config, (size_t)n));
  return GT_SUCCESS;
}

/* The files into out_dir, the reader open and the dataset known. */
static int gt_hf_write(const char *ckpt, const char *out_dir, const gt_hf_options *opt,
                       const gt_ckpt_meta *meta, const gt_hf_data *data, gt_hf_weights *w,
                       gt_hf_summary *sum)
{
  char path[GT_PATH_MAX], step[32], vocab[32];
  GT_CALL(gt_hf_weights_plan(w));
  snprintf(step, sizeof step, "%ld", meta->step);
  snprintf(vocab, sizeof vocab, "%d", meta->vocab);
  const char *const metadata[][2] = {
      {"format", "pt"}, /* what transformers' from_pretrained asks for */
      {"gridtrain_version", gt_version()},
      {"checkpoint", ckpt},
      {"step", step},
      {"tokenizer", sum->tokenizer},
      {"checkpoint_vocab", vocab},
  };
  GT_CALL(gt_hf_join(out_dir, "model.safetensors", path, sizeof path));
  sum->tensors = w->n;
  GT_CALL(gt_safetensors_write(path, sum->tensors, w->t,
                               (int)(sizeof metadata / sizeof metadata[0]), metadata,
                               gt_hf_fill, w, &sum->bytes));
  GT_CALL(gt_hf_tokenizer_files(out_dir, data, w->shape.max_seq));
  gt_hf_readme readme = {ckpt, meta, data, sum, opt->dtype, &w->shape};
  GT_CALL(gt_hf_join(out_dir, "README.txt", path, sizeof path));
  GT_CALL(gt_path_replace(path, gt_hf_readme_write, &readme));
  GT_CALL(gt_hf_join(out_dir, "config.json", path, sizeof path));
  GT_CALL(gt_hf_config(path, &w->shape, sum->vocab, opt->dtype, &data->special));
  return GT_SUCCESS;
}

static int gt_hf_export_in(const char *ckpt, const char *out_dir, const gt_hf_options *opt,
                           gt_ckpt_meta *meta, gt_hf_data *data, gt_hf_weights *w,
                           gt_hf_summary *sum)
{
  GT_CHECK(opt->dtype == GT_F32 || opt->dtype == GT_BF16 || opt->dtype == GT_F16,
           GT_ERR_INPUT, "the Hugging Face export writes fp32, bf16 or fp16, not %s",
           gt_dtype_name(opt->dtype));
  GT_CALL(gt_ckpt_read_meta(ckpt, MPI_COMM_SELF, meta));
  GT_CALL(gt_ckpt_meta_shape(meta, ckpt, &w->shape));
  GT_CALL(gt_hf_export_moe_check(&w->shape, ckpt));
  GT_CALL(gt_hf_data_find(meta, ckpt, opt->data, data));
  const long vocab = data->tok && !data->own ? gt_tokenizer_vocab(data->tok) : data->vocab;
  GT_CHECK(vocab <= meta->vocab, GT_ERR_INPUT,
           "the dataset %s has a vocabulary of %ld but the model of checkpoint %s has %d; "
           "it was not trained on this data (give --data FILE.h5)",
           data->spec, vocab, ckpt, meta->vocab);
  const gt_spm_special *sp = &data->special;
  GT_CHECK(sp->unk < vocab && sp->bos < vocab && sp->eos < vocab && sp->pad < vocab,
           GT_ERR_INPUT, "the %s tokenizer of %s names special ids beyond its "
           "vocabulary of %ld", data->tok ? gt_tokenizer_name(data->tok) : "", data->spec, vocab);
  w->vocab = (int)vocab;
  w->dtype = opt->dtype;
  *sum = (gt_hf_summary){.vocab = w->vocab, .model_vocab = meta->vocab};
  snprintf(sum->tokenizer, sizeof sum->tokenizer, "%s",
           data->tok ? gt_tokenizer_name(data->tok) : "none");
  snprintf(sum->data, sizeof sum->data, "%s", data->spec);
  GT_CALL(gt_hf_prepare_dir(out_dir, opt->force));
  GT_CALL(gt_ckpt_weights_open(ckpt, &w->reader));
  GT_CALL(gt_hf_write(ckpt, out_dir, opt, meta, data, w, sum));
  return GT_SUCCESS;
}

int gt_hf_export(const char *ckpt, const char *out_dir, const gt_hf_options *opt,
                 gt_hf_summary *sum)
{
  gt_ckpt_meta meta = {0};
  gt_hf_data data = {0};
  gt_hf_weights w = {0};
  gt_hf_summary local;
  int status = gt_hf_export_in(ckpt, out_dir, opt, &meta, &data, &w, sum ? sum : &local);
  const int closed = gt_ckpt_weights_close(&w.reader);
  status = status != GT_SUCCESS ? status : closed;
  gt_hf_weights_free(&w);
  gt_tokenizer_free(data.tok);
  gt_ckpt_meta_free(&meta);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- SentencePiece's special ids --------------------------------------------------------

/* A protobuf varint at *p (< end); false when cut off or too long. */
static bool gt_pb_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    const unsigned char b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return true;
  }
  return false;
}

/* The next field of the message [*p, end): its number, wire type, and
 * (varint) value or (length-delimited) contents [*sub, *sub_end); *p moves
 * past it. false when the bytes are not a message. */
static bool gt_pb_field(const unsigned char **p, const unsigned char *end, uint64_t *field,
                        int *wire, uint64_t *value, const unsigned char **sub,
                        const unsigned char **sub_end)
{
  uint64_t key;
  if (!gt_pb_varint(p, end, &key))
    return false;
  *field = key >> 3;
  *wire = (int)(key & 7);
  switch (*wire) {
  case 0: return gt_pb_varint(p, end, value);
  case 1:
  case 5: {
    const size_t n = *wire == 1 ? 8 : 4;
    if ((size_t)(end - *p) < n)
      return false;
    *p += n;
    return true;
  }
  case 2:
    if (!gt_pb_varint(p, end, value) || *value > (uint64_t)(end - *p))
      return false;
    *sub = *p;
    *sub_end = *p + *value;
    *p += *value;
    return true;
  default: return false; /* groups (3, 4) are not in sentencepiece_model.proto */
  }
}

int gt_hf_spm_special(const void *model, size_t size, gt_spm_special *ids)
{
  *ids = (gt_spm_special){0, 1, 2, -1}; /* TrainerSpec's defaults */
  const unsigned char *p = model, *end = p + size, *sub = NULL, *sub_end = NULL;
  bool pieces = false;
  while (p < end) {
    uint64_t field, value;
    int wire;
    GT_CHECK(gt_pb_field(&p, end, &field, &wire, &value, &sub, &sub_end), GT_ERR_INPUT,
             "the SentencePiece model is not a serialized ModelProto");
    pieces |= field == 1 && wire == 2;
    if (field != 2 || wire != 2) /* ModelProto.trainer_spec */
      continue;
    const unsigned char *q = sub, *q_end = sub_end, *s2, *e2;
    while (q < q_end) {
      GT_CHECK(gt_pb_field(&q, q_end, &field, &wire, &value, &s2, &e2), GT_ERR_INPUT,
               "the SentencePiece model's trainer_spec is damaged");
      int *id = field == 40 ? &ids->unk : field == 41 ? &ids->bos
              : field == 42 ? &ids->eos : field == 43 ? &ids->pad : NULL;
      if (id && wire == 0)
        *id = (int32_t)(uint32_t)value; /* int32: negative ones as 64-bit two's complement */
    }
  }
  GT_CHECK(pieces, GT_ERR_INPUT, "the SentencePiece model has no pieces");
  return GT_SUCCESS;
}
