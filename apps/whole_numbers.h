// Integer flags take whole decimal numbers in range, for every subcommand. CLI11 alone turns
// `--seed -1` into 18446744073709551615 and clamps a number past int64's range; this refuses both
// (and fractions, exponents and hexadecimal) with the flag named.
#pragma once

#include <CLI/CLI.hpp>

namespace tessel {

// Adds the check to every integer option of `app` and of its subcommands, once all are declared.
void require_whole_numbers(CLI::App& app);

}  // namespace tessel
