// CPU emulation: the fp16 types live in emu.h (included first with -include).
#pragma once
