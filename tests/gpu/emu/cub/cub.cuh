/* cub/cub.cuh - the CUDA emulator's stand-in for CUB (cuda_emu.h: DeviceRadixSort::SortPairs). */
#include "../cuda_emu.h"
