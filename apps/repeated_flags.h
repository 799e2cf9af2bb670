// A flag given twice takes its last value, as argparse (Megatron-LM's parser) does: launchers
// such as Megatron's model-zoo scripts append overrides to a base command line. CLI11 alone
// refuses a repeated option.
#pragma once

#include <CLI/CLI.hpp>

namespace tessel {

// For every single-valued option of `app` and of its subcommands, once all are declared.
void last_value_wins(CLI::App& app);

}  // namespace tessel
