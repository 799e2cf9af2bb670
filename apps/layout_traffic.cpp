#include "layout_traffic.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessel/plan/memory.h"

namespace tessel {

LayoutTraffic read_layout_traffic(const std::string& path, int world, std::vector<std::string>& violations) {
  std::ifstream in(path);
  if (!in) {
    violations.push_back(fmt::format("--traffic {}: cannot be read", path));
    return {};
  }
  nlohmann::json last;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded()) {
      violations.push_back(fmt::format("--traffic {}: line {} is not JSON (a tessel train --log-json file?)", path,
                                       line_number));
      return {};
    }
    if (record.is_object() && record.contains("ranks")) last = record;
  }
  if (last.is_null()) {
    violations.push_back(fmt::format("--traffic {}: no record has \"ranks\" (tessel train --log-json of a run on "
                                     "several ranks writes them)",
                                     path));
    return {};
  }
  const nlohmann::json& ranks = last["ranks"];
  if (static_cast<int>(ranks.size()) != world) {
    violations.push_back(fmt::format("--traffic {}: its iteration {} ran on {} ranks, --world is {}", path,
                                     last.value("iteration", 0), ranks.size(), world));
    return {};
  }
  LayoutTraffic traffic;
  traffic.bytes.assign(world, 0);
  try {
    for (const nlohmann::json& rank : ranks) {
      const int r = rank.value("rank", -1);
      if (r < 0 || r >= world) {
        violations.push_back(fmt::format("--traffic {}: rank {} outside --world {}", path, r, world));
        return {};
      }
      const nlohmann::json comm = rank.value("comm", nlohmann::json::object());
      for (const auto& [group, calls] : comm.items())
        for (const auto& [call, counter] : calls.items()) traffic.bytes[r] += counter.value("bytes", 0.0);
    }
  } catch (const nlohmann::json::exception& e) {  // a value of another type than tessel writes
    violations.push_back(fmt::format("--traffic {}: its \"ranks\" are not tessel's ({})", path, e.what()));
    return {};
  }
  for (double bytes : traffic.bytes) traffic.written.push_back(bytes_str(bytes));
  traffic.source = fmt::format("iteration {} of {}", last.value("iteration", 0), path);
  return traffic;
}

}  // namespace tessel
