/* cuda_runtime_api.h - the CUDA emulator's stand-in for the CUDA header of this name (cuda_emu.h). */
#include "cuda_emu.h"
