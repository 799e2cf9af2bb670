// GoogleTest value printers for the parameter types tests are instantiated over, so that test
// listings and failure messages read "llama" rather than the bytes of an enum (gtest's fallback
// printer), and read the same on every run.
#pragma once

#include <ostream>

#include "tessel/model/config.h"

namespace tessel {

inline void PrintTo(Arch arch, std::ostream* os) { *os << arch_name(arch); }

}  // namespace tessel
