// The records of a `tessel train --log-json` file, one per logged line, in order, and their losses.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessel::testing {

inline std::vector<nlohmann::json> log_json_records(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::ifstream lines(path);
  for (std::string line; std::getline(lines, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

inline std::vector<double> log_json_losses(const std::string& path) {
  std::vector<double> losses;
  for (const nlohmann::json& record : log_json_records(path)) losses.push_back(record["loss"].get<double>());
  return losses;
}

}  // namespace tessel::testing
