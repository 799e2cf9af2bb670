// The losses of a `tessel train --log-json` file, one per logged line, in order.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessel::testing {

inline std::vector<double> log_json_losses(const std::string& path) {
  std::vector<double> losses;
  std::ifstream lines(path);
  for (std::string line; std::getline(lines, line);)
    losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return losses;
}

}  // namespace tessel::testing
