// train/log.h: --log-json keeps, when a run resumes after iteration N, the records up to N, so
// that the file ends up holding the whole run however often it was restarted; a fresh run
// starts the file anew.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/fixtures.h"
#include "tessel/train/log.h"

namespace tessel {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

IterationStats at(int64_t iteration) {
  IterationStats s;
  s.iteration = iteration;
  s.loss = 1.0 / static_cast<double>(iteration);
  return s;
}

TEST(TrainLog, ResumedRunKeepsTheRecordsUpToItsSave) {
  testing::TestDir dir;
  const std::string path = dir.path("log.jsonl");
  {
    TrainLog first(10, 1, path, false, true);
    for (int64_t it = 1; it <= 5; ++it) first.iteration(at(it));  // killed after 5, saved at 3
  }
  {
    TrainLog resumed(10, 1, path, false, true, 3);
    for (int64_t it = 4; it <= 6; ++it) resumed.iteration(at(it));
  }
  std::istringstream lines(read(path));
  std::vector<int64_t> iterations;
  for (std::string line; std::getline(lines, line);)
    iterations.push_back(nlohmann::json::parse(line).at("iteration").get<int64_t>());
  EXPECT_EQ(iterations, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST(TrainLog, FreshRunStartsTheFileAnew) {
  testing::TestDir dir;
  const std::string path = dir.write("log.jsonl", "{\"iteration\": 1}\n");
  { TrainLog fresh(10, 1, path, false, true); }
  EXPECT_EQ(read(path), "");
}

}  // namespace
}  // namespace tessel
