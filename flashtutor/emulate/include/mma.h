// CPU emulation: nvcuda::wmma, an optional part of the emulator (chapter 3's kernels include <mma.h>).
#pragma once
#include "../wmma.h"
