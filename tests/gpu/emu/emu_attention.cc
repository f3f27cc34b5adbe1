/* emu_attention.cc - src/backend/cuda/cuda_attention.cu built as host C++
 * for the CUDA emulator (cuda_emu.h), unchanged. */
#include "cuda_attention.cu"
