#include "whole_numbers.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <limits>

namespace tessel {

namespace {

template <typename T>
std::string whole_number_error(const std::string& text) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  T value{};
  const auto [stop, error] = std::from_chars(begin, end, value);
  if (error == std::errc() && stop == end && begin != end) return "";
  return fmt::format("{} is not a whole number in [{}, {}]", text, std::numeric_limits<T>::min(),
                     std::numeric_limits<T>::max());
}

}  // namespace

void require_whole_numbers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (type == "INT")
      option->check(CLI::Validator(whole_number_error<int64_t>, "", "whole number"));
    else if (type == "UINT")
      option->check(CLI::Validator(whole_number_error<uint64_t>, "", "whole number ≥ 0"));
  }
  for (CLI::App* sub : app.get_subcommands({})) require_whole_numbers(*sub);
}

}  // namespace tessel
