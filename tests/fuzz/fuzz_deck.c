/*
 * fuzz_deck.c - libFuzzer harness for the input-deck parser and validator
 * (config.h). The input is a deck, optionally followed by a NUL byte and
 * NUL-separated `section.key=value` overrides. Properties: parsing ends in
 * success or a GT_ERR_INPUT error with a message, never a crash or another
 * error code; and a deck that parses prints (gt_config_to_ini) as text that
 * parses again to the same text. Built by `make fuzz` (clang, libFuzzer,
 * ASan, UBSan) and replayed over tests/fuzz/corpus and tests/fuzz/regress
 * by `make check` (replay.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/config.h"
#include "gridtrain/error.h"

#define GT_FUZZ_OVERRIDES 8
#define GT_FUZZ_INI (64 * 1024)

static void gt_fuzz_fail(const char *what, int status)
{
  fprintf(stderr, "fuzz_deck: %s: status %d: %s\n", what, status, gt_error_message());
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size > 1 << 20)
    return 0;
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  /* the overrides: the NUL-separated strings after the deck's end */
  char *ov[GT_FUZZ_OVERRIDES];
  int nov = 0;
  for (size_t at = strlen(text) + 1; at < size && nov < GT_FUZZ_OVERRIDES;
       at += strlen(text + at) + 1)
    if (text[at])
      ov[nov++] = text + at;
  gt_config cfg;
  gt_config_defaults(&cfg);
  int status = gt_config_parse(&cfg, text, "fuzz.in", nov, ov);
  if (status == GT_SUCCESS)
    status = gt_config_check_values(&cfg);
  if (status != GT_SUCCESS && status != GT_ERR_INPUT)
    gt_fuzz_fail("parse", status);
  if (status != GT_SUCCESS && gt_error_message()[0] == '\0')
    gt_fuzz_fail("an error without a message", status);
  if (status == GT_SUCCESS) { /* printed and parsed again: the same configuration */
    char *a = malloc(GT_FUZZ_INI), *b = malloc(GT_FUZZ_INI);
    const int need = a && b ? gt_config_to_ini(&cfg, a, GT_FUZZ_INI) : -1;
    if (need > 0 && need < GT_FUZZ_INI) {
      gt_config again;
      gt_config_defaults(&again);
      status = gt_config_parse(&again, a, "printed.in", 0, NULL);
      if (status != GT_SUCCESS)
        gt_fuzz_fail("the printed deck does not parse", status);
      if (gt_config_to_ini(&again, b, GT_FUZZ_INI) != need || strcmp(a, b) != 0)
        gt_fuzz_fail("the printed deck parses to another configuration", -1);
    }
    free(a);
    free(b);
  }
  gt_error_clear();
  free(text);
  return 0;
}
