#include "moe_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessel {

void MoeFlags::add_to(CLI::App& app, std::string& dispatcher) {
  const char* group = "Megatron-LM's MoE routing flags";
  load_balancing_opt_ =
      app.add_option("--moe-router-load-balancing-type", load_balancing_,
                     "aux_loss (GShard's loss, --moe-aux-loss-coeff) | none; seq_aux_loss, global_aux_loss, "
                     "sinkhorn and quantile_balancing are not built")
          ->check(CLI::IsMember(
              {"aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "quantile_balancing", "none"}))
          ->capture_default_str()
          ->group(group);
  router_dtype_opt_ = app.add_option("--moe-router-dtype", router_dtype_,
                                     "fp32: the router's scores and the experts' weighted sum (tessel's always are)")
                          ->check(CLI::IsMember({"fp32", "fp64"}))
                          ->group(group);
  app.add_option("--moe-token-dispatcher-type", dispatcher,
                 "allgather (over ETP × EP) | alltoall | flex (all-to-all here): how routed tokens reach their "
                 "experts' ranks")
      ->check(CLI::IsMember({"allgather", "alltoall", "flex"}))
      ->capture_default_str()
      ->group(group);
  dispatcher_ = &dispatcher;
  backend_opt_ = app.add_option("--moe-flex-dispatcher-backend", backend_,
                                "deepep | hybridep | ncclep: the flex dispatcher's kernels (none is present here)")
                     ->check(CLI::IsMember({"deepep", "hybridep", "ncclep"}))
                     ->group(group);
  hybridep_sms_ = app.add_option("--moe-hybridep-num-sms", hybridep_num_sms_,
                                 "SMs for HybridEP's kernels (not present here)")
                      ->group(group);
  deepep_ = app.add_flag("--moe-enable-deepep")->description("DeepEP's kernels for the flex dispatcher (not present here)")
                ->group(group);
}

void MoeFlags::apply(ModelConfig& cfg, std::vector<std::string>& notes, std::vector<std::string>& v) const {
  // Megatron-LM takes several types (one per loss it adds); tessel has GShard's loss or none.
  for (const std::string& type : load_balancing_)
    if (type != "aux_loss" && type != "none")
      v.push_back(fmt::format("--moe-router-load-balancing-type {} is not built (tessel has aux_loss, GShard's and "
                              "Switch Transformer's loss over the micro batch's tokens, and none)",
                              type));
  if (load_balancing_.size() > 1)
    v.push_back(fmt::format("--moe-router-load-balancing-type {}: tessel takes one type", fmt::join(load_balancing_, " ")));
  if (load_balancing_ == std::vector<std::string>{"none"} && cfg.moe.aux_loss_coeff != 0) {
    notes.push_back(fmt::format("--moe-router-load-balancing-type none: no load-balancing loss, --moe-aux-loss-coeff "
                                "{} unused (as Megatron-LM)",
                                cfg.moe.aux_loss_coeff));
    cfg.moe.aux_loss_coeff = 0;
  }
  if (router_dtype_ == "fp64")
    v.push_back("--moe-router-dtype fp64 is not built: tessel's router computes in fp32 (--moe-router-dtype fp32)");
  if (deepep_->count() > 0 && *dispatcher_ != "flex")
    v.push_back("--moe-enable-deepep needs --moe-token-dispatcher-type flex (Megatron-LM's rule)");
  if (*dispatcher_ != "flex" && backend_opt_->count() + hybridep_sms_->count() > 0)
    notes.push_back("--moe-flex-dispatcher-backend, --moe-hybridep-num-sms: no effect without "
                    "--moe-token-dispatcher-type flex (as in Megatron-LM)");
}

}  // namespace tessel
