/*
 * fuzz_safetensors.c - libFuzzer harness for the safetensors reader
 * (safetensors.h: gt_safetensors_open, _info, _find, _meta, _read_f32;
 * src/io/safetensors.c), which reads the weights of Hugging Face models that
 * `ckpt import`, `[checkpoint] init` and `score` are given: files from the
 * outside. The input is the file's bytes. Properties: the open ends in
 * GT_SUCCESS, or GT_ERR_INPUT with a message, never a crash or a read outside
 * the file; after a successful open every tensor's info is consistent (its
 * bytes are its elements times its type's size, its range inside the data),
 * find gives each name's own index, and each tensor reads into fp32 (or is
 * refused with GT_ERR_INPUT for a type not converted). Built by `make fuzz`
 * and replayed over tests/fuzz/corpus/safetensors by `make check`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "gridtrain/error.h"
#include "gridtrain/safetensors.h"

static char gt_fz_in[300];

static void gt_fz_fail(const char *what)
{
  fprintf(gt_fuzz_log(), "fuzz_safetensors: %s\n", what);
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  gt_fuzz_setup();
  char dir[256];
  gt_fuzz_tmpdir("safetensors", dir, sizeof dir);
  snprintf(gt_fz_in, sizeof gt_fz_in, "%s/in.safetensors", dir);
  gt_fuzz_quiet();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (!gt_fuzz_write(gt_fz_in, data, size))
    gt_fz_fail("cannot write the input file");
  gt_st_file *f = NULL;
  const int st = gt_safetensors_open(gt_fz_in, &f);
  gt_fuzz_expect("fuzz_safetensors", "gt_safetensors_open", st);
  if (st != GT_SUCCESS) {
    if (f)
      gt_fz_fail("an error, but a file object");
    gt_error_clear();
    return 0;
  }
  const int n = gt_safetensors_count(f);
  for (int i = 0; i < n; i++) {
    const gt_st_info *t = gt_safetensors_info(f, i);
    if (!t || !t->name)
      gt_fz_fail("a tensor without its info");
    if (gt_safetensors_find(f, t->name) != i)
      gt_fz_fail("find does not give a tensor's own index");
    size_t numel = 1;
    for (int d = 0; d < t->ndim; d++)
      numel *= (size_t)t->dims[d];
    if (numel > size || t->numel != numel || t->offset + t->bytes > size ||
        t->bytes < numel || t->bytes > 8 * numel)
      gt_fz_fail("a tensor's info does not fit its shape or the file");
    float *out = malloc((numel ? numel : 1) * sizeof *out);
    if (!out)
      gt_fz_fail("out of memory");
    const int rs = gt_safetensors_read_f32(f, i, out);
    gt_fuzz_expect("fuzz_safetensors", "gt_safetensors_read_f32", rs);
    if (rs == GT_SUCCESS && t->dtype < 0)
      gt_fz_fail("a type that is not converted read as fp32");
    free(out);
    gt_error_clear();
  }
  (void)gt_safetensors_meta(f, "format");
  gt_safetensors_close(&f);
  if (f)
    gt_fz_fail("close leaves the object");
  gt_error_clear();
  return 0;
}
