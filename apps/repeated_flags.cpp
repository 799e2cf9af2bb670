#include "repeated_flags.h"

namespace tessel {

void last_value_wins(CLI::App& app) {
  // Lists (--data-path, --order's ...) keep collecting; a value or a switch is replaced.
  for (CLI::Option* option : app.get_options())
    if (option->get_items_expected_max() <= 1) option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (CLI::App* sub : app.get_subcommands({})) last_value_wins(*sub);
}

}  // namespace tessel
