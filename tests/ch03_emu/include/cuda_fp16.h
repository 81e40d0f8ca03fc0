// CPU emulation of chapter 3: everything this header would declare lives in emu03.h (-include).
#pragma once
