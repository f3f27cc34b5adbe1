/*
 * gridtrain/peak.h - the peak FLOP/s that model FLOP utilisation (MFU) is
 * measured against (pace.h): the dense peaks of GPUs from their vendors'
 * datasheets, and for the CPU an sgemm calibration cached per machine.
 *
 * GPU peaks are the dense tensor-core figures, never the "with sparsity"
 * ones printed beside them (twice as large). The table (peak.c) knows the
 * H100 SXM, H100 PCIe, H200, GH200, A100, L40S, A10 and V100 (PCIe and
 * SXM2); another GPU (an H100 NVL, say) has no peak here: MFU is then not
 * reported unless [run] peak_tflops gives one.
 *
 * The CPU peak is measured, not looked up: the best fp32 rate of the
 * backend's own linear op (OpenBLAS sgemm on the cpu backend) on square
 * products with the rank's threads, in under a second. Because a test suite
 * starts hundreds of short runs, the result is kept in a cache file, one
 * line per machine (host name, CPU model, backend, threads,
 * OPENBLAS_CORETYPE): ${XDG_CACHE_HOME:-$HOME/.cache}/gridtrain/cpu-peak.
 * Delete the file to measure again (after an upgrade of the BLAS, or a
 * calibration that ran on a busy machine).
 */
#ifndef GRIDTRAIN_PEAK_H
#define GRIDTRAIN_PEAK_H

#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/backend.h"

/* What the products multiply in. */
typedef enum { GT_PEAK_FP32, GT_PEAK_TF32, GT_PEAK_BF16, GT_PEAK_FP16 } gt_peak_kind;

/* The kind of the products of a [backend] precision (GT_F32, GT_BF16,
 * GT_F16): fp32 is GT_PEAK_FP32, since the cuda backend multiplies fp32
 * without TF32 (docs/cuda.md). */
gt_peak_kind gt_peak_kind_of(gt_dtype precision);

/* The dense peak FLOP/s of the GPU called `name` (the CUDA runtime's
 * cudaDeviceProp.name, e.g. "NVIDIA H100 80GB HBM3") for products of kind;
 * 0 when the GPU is not in the table, or has no units for that kind (a V100
 * has no bf16). Pure. */
double gt_peak_gpu(const char *name, gt_peak_kind kind);

/* The best fp32 FLOP/s of be's linear_forward on square products (n = 256,
 * 512, ... 2048, as far as `seconds` allows) with be's threads. Allocates
 * and frees device memory of be and waits for it (be->ops->sync): call it
 * outside a training step. Its buffers stay out of be's high-water mark
 * (gt_backend_device_memory_rewind). Not collective. */
int gt_peak_cpu_measure(gt_backend *be, double seconds, double *flops);

/* gt_peak_cpu_measure (one second at most) behind the cache file: this
 * machine's line when the file has one (*cached = true), else a
 * measurement, appended to the file when it can be written (a cache that
 * cannot be made is no error). path (size bytes; may be NULL) gets the cache
 * file's name, "" when there is none (neither XDG_CACHE_HOME nor HOME is
 * set). Not collective. */
int gt_peak_cpu(gt_backend *be, double *flops, bool *cached, char *path, size_t size);

#endif /* GRIDTRAIN_PEAK_H */
