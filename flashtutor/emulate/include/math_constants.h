// CPU emulation: CUDART_INF_F lives in emu.h (included first with -include).
#pragma once
