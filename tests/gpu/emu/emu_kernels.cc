/* emu_kernels.cc - src/backend/cuda/cuda_kernels.cu built as host C++ for
 * the CUDA emulator (cuda_emu.h), unchanged. */
#include "cuda_kernels.cu"
