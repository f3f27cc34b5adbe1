/* emu_moe.cc - src/backend/cuda/cuda_moe.cu built as host C++ for the CUDA
 * emulator (cuda_emu.h), unchanged. */
#include "cuda_moe.cu"
