/*
 * test_safetensors.c - the safetensors writer (safetensors.h) and the
 * SentencePiece special ids of the Hugging Face export (hf_export.h).
 *
 * A file with awkward contents (a name with a quote, a backslash, a control
 * character and UTF-8; a scalar; an empty tensor; bf16 and f16 bit patterns
 * chosen by hand; metadata that needs escaping) is read back by the
 * safetensors Python package ($PYTHON_REF), which must find every name,
 * shape, type and value; the C side checks the 8-byte alignment of the data.
 * Bad input (a name twice, an int32 tensor, a fill that fails, a missing
 * directory) is refused and leaves an existing file as it was and no .tmp.
 * tests/data/spm_default.model and spm_custom.model were made with
 * python3-sentencepiece 0.1.97 from tests/data/genesis.txt (bpe, vocab 80,
 * normalization identity; spm_custom with unk_id=3 bos_id=-1 eos_id=1
 * pad_id=0); the ids expected are what that library's SentencePieceProcessor
 * reports for them (unk, bos, eos, pad): 0 1 2 -1 and 3 -1 1 0.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_util.h"
#include "gridtrain/hf_export.h"
#include "gridtrain/safetensors.h"

#define ODD_NAME "we\"ird\\name\x01\xc3\xa9"

static const float f32[6] = {0.0f, 1.0f, -2.5f, 3.25f, 1e-3f, -7.0f};
/* 1.5, -2.25, 2^-7, 3 as bf16; 1.5, -2.25, 2^-7, 65504 as f16 */
static const uint16_t bf16[4] = {0x3fc0, 0xc010, 0x3c00, 0x4040};
static const uint16_t f16[4] = {0x3e00, 0xc080, 0x2000, 0x7bff};

static const gt_st_tensor tensors[] = {
    {"a", GT_F32, 2, {2, 3}},
    {ODD_NAME, GT_BF16, 1, {4}},
    {"h", GT_F16, 2, {2, 2}},
    {"s", GT_F32, 0, {0}},
    {"z", GT_F32, 2, {0, 3}},
};
#define NT ((int)(sizeof tensors / sizeof tensors[0]))

static int fill(void *ctx, int i, void *data, size_t bytes)
{
  int *fail_at = ctx;
  if (fail_at && i == *fail_at)
    return GT_ERROR(GT_ERR_SYSTEM, "fill of tensor %d failed (on purpose)", i);
  static const float scalar = 42.0f;
  const void *src[NT] = {f32, bf16, f16, &scalar, NULL};
  if (bytes)
    memcpy(data, src[i], bytes);
  return GT_SUCCESS;
}

static const char *const meta[][2] = {{"format", "pt"}, {"note", "a \"quoted\"\nline\\"}};

static bool exists(const char *path)
{
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void check_written(const char *dir)
{
  char path[1100], cmd[4000];
  snprintf(path, sizeof path, "%s/t.safetensors", dir);
  size_t total = 0;
  tu_ok_status(gt_safetensors_write(path, NT, tensors, 2, meta, fill, NULL, &total),
               "a file with an escaped name, a scalar, an empty tensor, bf16, f16, metadata");
  FILE *f = fopen(path, "rb");
  unsigned char len[8] = {0};
  const bool read = f && fread(len, 1, 8, f) == 8;
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--)
    n = n << 8 | len[k];
  struct stat sb;
  const bool sized = stat(path, &sb) == 0 && (size_t)sb.st_size == total;
  /* 24 + 8 + 8 + 4 + 0 bytes of data */
  tap_ok(read && (8 + n) % 8 == 0 && sized && total == 8 + n + 44,
         "the data starts on an 8-byte boundary (header %llu bytes) and the file is %zu bytes",
         (unsigned long long)n, total);
  if (f)
    fclose(f);
  snprintf(path, sizeof path, "%s/t.safetensors.tmp", dir);
  tap_ok(!exists(path), "no .tmp is left");

  const char *python = getenv("PYTHON_REF") ? getenv("PYTHON_REF") : "/usr/bin/python3";
  snprintf(cmd, sizeof cmd,
           "'%s' - '%s/t.safetensors' <<'PY'\n"
           "import sys, torch\n"
           "from safetensors import safe_open\n"
           "from safetensors.torch import load_file\n"
           "t = load_file(sys.argv[1])\n"
           "with safe_open(sys.argv[1], framework='pt') as f:\n"
           "    meta = f.metadata()\n"
           "odd = 'we\"ird\\\\name\\x01\\u00e9'\n"
           "want = {'a': torch.tensor([[0, 1, -2.5], [3.25, 1e-3, -7]]),\n"
           "        odd: torch.tensor([1.5, -2.25, 2**-7, 3], dtype=torch.bfloat16),\n"
           "        'h': torch.tensor([[1.5, -2.25], [2**-7, 65504]], dtype=torch.float16),\n"
           "        's': torch.tensor(42.0), 'z': torch.zeros(0, 3)}\n"
           "bad = [n for n in want if n not in t or t[n].dtype != want[n].dtype\n"
           "       or t[n].shape != want[n].shape or not torch.equal(t[n], want[n])]\n"
           "bad += [n for n in t if n not in want]\n"
           "if meta != {'format': 'pt', 'note': 'a \"quoted\"\\nline\\\\'}: bad.append(str(meta))\n"
           "print('# safetensors read', sorted(t), 'differs:', bad)\n"
           "sys.exit(1 if bad else 0)\n"
           "PY",
           python, dir);
  const int rc = system(cmd);
  tap_ok(WIFEXITED(rc) && WEXITSTATUS(rc) == 0,
         "the safetensors package reads every name, shape, type, value and the metadata");
}

static void check_refused(const char *dir)
{
  char path[1100], tmp[1200];
  snprintf(path, sizeof path, "%s/t.safetensors", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  struct stat before, after;
  stat(path, &before);
  gt_st_tensor twice[2] = {{"x", GT_F32, 1, {1}}, {"x", GT_F32, 1, {1}}};
  int st = gt_safetensors_write(path, 2, twice, 0, NULL, fill, NULL, NULL);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "tensor x is given twice"),
         "a name given twice is bad input (%s)", gt_error_message());
  gt_st_tensor i32 = {"i", GT_I32, 1, {1}};
  st = gt_safetensors_write(path, 1, &i32, 0, NULL, fill, NULL, NULL);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "F32, BF16 and F16"),
         "an int32 tensor is bad input (%s)", gt_error_message());
  int fail_at = 2;
  st = gt_safetensors_write(path, NT, tensors, 0, NULL, fill, &fail_at, NULL);
  stat(path, &after);
  tap_ok(st == GT_ERR_SYSTEM && strstr(gt_error_message(), "on purpose") && !exists(tmp) &&
             after.st_ino == before.st_ino && after.st_size == before.st_size &&
             after.st_mtime == before.st_mtime,
         "a fill that fails: its error, the earlier file as it was, no .tmp");
  snprintf(path, sizeof path, "%s/missing/t.safetensors", dir);
  st = gt_safetensors_write(path, NT, tensors, 0, NULL, fill, NULL, NULL);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "cannot write"),
         "a missing directory is bad input (%s)", gt_error_message());
}

static void check_spm(void)
{
  const char *names[2] = {"spm_default.model", "spm_custom.model"};
  const gt_spm_special want[2] = {{0, 1, 2, -1}, {3, -1, 1, 0}};
  for (int k = 0; k < 2; k++) {
    char path[1100];
    snprintf(path, sizeof path, "%s/tests/data/%s", getenv("GT_SRCDIR"), names[k]);
    FILE *f = fopen(path, "rb");
    unsigned char buf[8192];
    const size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
      fclose(f);
    gt_spm_special got = {-9, -9, -9, -9};
    const int st = n ? gt_hf_spm_special(buf, n, &got) : GT_ERR_INPUT;
    tap_ok(st == GT_SUCCESS && got.unk == want[k].unk && got.bos == want[k].bos &&
               got.eos == want[k].eos && got.pad == want[k].pad,
           "%s: unk %d bos %d eos %d pad %d (SentencePiece says %d %d %d %d)", names[k],
           got.unk, got.bos, got.eos, got.pad, want[k].unk, want[k].bos, want[k].eos,
           want[k].pad);
    if (k == 0) {
      gt_spm_special cut;
      tap_ok(gt_hf_spm_special(buf, n / 2, &cut) == GT_ERR_INPUT,
             "half of a model is not a ModelProto (%s)", gt_error_message());
    }
  }
  const char text[] = "not a model at all, just text";
  gt_spm_special got;
  tap_ok(gt_hf_spm_special(text, sizeof text - 1, &got) == GT_ERR_INPUT,
         "text is not a ModelProto (%s)", gt_error_message());
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  if (!getenv("GT_BUILDDIR") || !getenv("GT_SRCDIR"))
    return tap_bail("run through make check (GT_SRCDIR, GT_BUILDDIR unset)");
  char dir[1024], cmd[2200];
  tu_tmp_dir("test_safetensors", dir, sizeof dir);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  if (system(cmd) != 0)
    return tap_bail("cannot create %s", dir);
  check_written(dir);
  check_refused(dir);
  check_spm();
  const int result = tap_done();
  MPI_Finalize();
  return result;
}
