// Megatron-LM's MoE flags that choose how routed tokens travel and how the router is balanced
// and computed, rather than what the experts are (those are model fields, model/config.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "tessel/model/config.h"

namespace tessel {

class MoeFlags {
 public:
  // Adds the flags to `app` (tessel train); they parse into this object, but
  // --moe-token-dispatcher-type into `dispatcher` (the run's option, train/plan.cpp reads it).
  void add_to(CLI::App& app, std::string& dispatcher);
  // Applies them to the run's model: the notes say what each given flag comes to here, `v` gets
  // every rule broken.
  void apply(ModelConfig& cfg, std::vector<std::string>& notes, std::vector<std::string>& v) const;

 private:
  std::vector<std::string> load_balancing_ = {"aux_loss"};
  std::string router_dtype_, backend_ = "deepep";
  const std::string* dispatcher_ = nullptr;
  int hybridep_num_sms_ = 0;
  CLI::Option *load_balancing_opt_ = nullptr, *router_dtype_opt_ = nullptr, *backend_opt_ = nullptr, *hybridep_sms_ = nullptr, *deepep_ = nullptr;
};

}  // namespace tessel
