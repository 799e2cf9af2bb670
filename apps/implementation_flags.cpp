#include "implementation_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessel {

namespace {

// The kinds of switch, each its own --help group and its own line of the run's notes.
enum class Kind { Implementation, Logging };
const char* kind_name(Kind kind) {
  return kind == Kind::Implementation ? "implementation switches" : "logging flags";
}

// A switch as Megatron-LM declares it (megatron/training/arguments.py and the config dataclasses
// its ArgumentGroupFactory turns into flags): a flag, or one taking a value among `choices`
// (empty: any), and what it comes to here.
struct Switch {
  const char* flag;
  bool takes_value;
  std::vector<std::string> choices;
  const char* here;
  Kind kind = Kind::Implementation;
};

const std::vector<Switch>& switches() {
  static const char* kKernels = "no effect: tessel computes each layer with its own kernels";
  static const char* kTimers =
      "no effect: tessel times the iteration (iteration-time) and, with --profile-report, GEMMs and communication";
  static const char* kTrace = "no effect: router decisions are not traced";
  constexpr Kind kLog = Kind::Logging;
  static const char* kFusion = "no effect: tessel's kernels are what they are, with or without Megatron's fusions";
  static const std::vector<Switch> table = {
      {"--use-mcore-models", false, {}, "no effect: Megatron-Core's models are the only kind (deprecated in Megatron too)"},
      {"--transformer-impl", true, {"local", "transformer_engine", "inference_optimized"}, kKernels},
      {"--attention-backend", true, {"flash", "fused", "unfused", "local", "auto"},
       "no effect: tessel's attention is its own blockwise kernel"},
      {"--use-flash-attn", false, {}, "no effect: tessel's attention is its own blockwise kernel"},
      {"--no-masked-softmax-fusion", false, {}, kFusion},
      {"--no-bias-gelu-fusion", false, {}, kFusion},
      {"--no-bias-swiglu-fusion", false, {}, kFusion},
      {"--no-bias-dropout-fusion", false, {}, kFusion},
      {"--no-rope-fusion", false, {}, kFusion},
      {"--cross-entropy-loss-fusion", false, {}, kFusion},
      {"--cross-entropy-fusion-impl", true, {"native", "te"}, kFusion},
      {"--no-gradient-accumulation-fusion", false, {}, kFusion},
      {"--no-persist-layer-norm", false, {}, kFusion},
      {"--moe-grouped-gemm", false, {}, "no effect: tessel runs a rank's experts one GEMM each"},
      {"--moe-permute-fusion", false, {}, kFusion},
      {"--tp-comm-overlap", false, {}, "no effect: tessel does not overlap TP communication with GEMMs"},
      {"--overlap-param-gather", false, {},
       "no effect: the distributed optimizer's parameters are gathered after the step"},
      {"--use-nccl-ub", false, {}, "no effect: NCCL user buffers are not used"},
      {"--accumulate-allreduce-grads-in-fp32", false, {}, "no effect: gradients are accumulated and reduced in fp32"},
      {"--grad-reduce-in-bf16", false, {}, "no effect: gradients are reduced in fp32"},
      {"--manual-gc", false, {}, "no effect: there is no Python garbage collector here"},
      {"--manual-gc-interval", true, {}, "no effect: there is no Python garbage collector here"},
      {"--empty-unused-memory-level", true, {"0", "1", "2"},
       "no effect: tessel allocates its memory once, with no allocator cache to empty"},
      {"--num-workers", true, {}, "no effect: one background thread of tessel's reads the next batch ahead"},
      {"--no-mmap-bin-files", false, {}, "no effect: tessel memory-maps the .bin files"},
      {"--attention-softmax-in-fp32", false, {}, "no effect: attention's softmax is computed in fp32"},
      {"--disable-bf16-reduced-precision-matmul", false, {},
       "no effect: tessel's GEMMs accumulate in fp32 (bf16 operands with --bf16)"},
      {"--moe-router-fusion", false, {}, kFusion},
      {"--moe-per-layer-logging", false, {},
       "no effect: the MoE losses are logged summed over the layers (--log-json's figures)"},
      {"--enable-experimental", false, {}, "no effect: tessel has no experimental code paths to enable"},
      {"--delay-wgrad-compute", false, {},
       "no effect: the weight gradients are computed with the input gradients (tessel's zero-bubble schedules split "
       "them: --pipeline-schedule)"},
      {"--overlap-moe-expert-parallel-comm", false, {}, "no effect: the expert all-to-all is not overlapped here"},
      {"--optimizer-cpu-offload", false, {}, "no effect: the optimizer runs where the weights are (here the CPU)"},
      {"--overlap-cpu-optimizer-d2h-h2d", false, {}, "no effect: the optimizer runs where the weights are"},
      {"--cuda-graph-impl", true, {"none", "local", "transformer_engine", "full_iteration"},
       "no effect: tessel launches its kernels without CUDA graphs"},
      {"--record-memory-history", false, {}, "no effect: PyTorch's allocator history; tessel's --profile-report counts memory"},
      {"--memory-snapshot-path", true, {}, "no effect: PyTorch's allocator history is not recorded here"},
      {"--no-create-attention-mask-in-dataloader", false, {},
       "no effect: attention is causal by position (and by document with packing); no mask is built"},
      {"--timing-log-level", true, {"0", "1", "2"}, kTimers, kLog},
      {"--timing-log-option", true, {"max", "minmax", "all"}, kTimers, kLog},
      {"--no-barrier-with-level-1-timing", false, {}, kTimers, kLog},
      {"--logging-level", true, {}, "no effect: tessel's log is its iteration lines; there is no Python logging", kLog},
      {"--log-progress", false, {}, "no effect: no progress.txt is written; --log-json holds every logged iteration",
       kLog},
      {"--log-memory-interval", true, {},
       "no effect: --log-memory-to-tensorboard writes memory at --tensorboard-log-interval", kLog},
      {"--log-device-memory-used", false, {}, "no effect: there is no nvidia-smi reading here", kLog},
      {"--log-max-attention-logit", false, {}, "no effect: the attention kernel does not track its largest logit", kLog},
      {"--log-energy", false, {}, "no effect: there is no energy monitor here", kLog},
      {"--moe-routing-trace-path", true, {}, kTrace, kLog},
      {"--moe-routing-trace-max-training-iters", true, {}, kTrace, kLog},
      {"--moe-routing-trace-capture-logits", false, {}, kTrace, kLog},
      {"--moe-routing-trace-capture-hidden-states", false, {}, kTrace, kLog},
      {"--moe-routing-trace-dump-weights", false, {}, kTrace, kLog},
  };
  return table;
}

const Switch* switch_named(const std::string& name) {
  for (const Switch& s : switches())
    if (name == s.flag) return &s;
  return nullptr;
}

}  // namespace

void ImplementationFlags::add_to(CLI::App& app) {
  values_.resize(switches().size());
  for (size_t i = 0; i < switches().size(); ++i) {
    const Switch& s = switches()[i];
    CLI::Option* option = s.takes_value ? app.add_option(s.flag, values_[i], s.here) : app.add_flag(s.flag, s.here);
    if (!s.choices.empty()) option->check(CLI::IsMember(s.choices));
    option->group(s.kind == Kind::Logging ? "Megatron-LM logging" : "Megatron-LM implementation switches");
    options_.push_back(option);
  }
}

std::vector<std::string> ImplementationFlags::summary() const {
  std::vector<std::string> lines;
  for (Kind kind : {Kind::Implementation, Kind::Logging}) {
    std::vector<std::string> given;
    for (size_t i = 0; i < options_.size(); ++i)
      if (switches()[i].kind == kind && options_[i]->count() > 0) given.push_back(options_[i]->get_name());
    if (!given.empty())
      lines.push_back(fmt::format("{} of Megatron-LM's {} have no effect here: {} (--explain-flags says what each "
                                  "means)",
                                  given.size(), kind_name(kind), fmt::join(given, ", ")));
  }
  return lines;
}

std::vector<std::string> ImplementationFlags::explain(const CLI::App& app) {
  std::vector<std::string> lines;
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() == 0 || option->get_name() == "--explain-flags") continue;
    const std::string name = option->get_name();
    const std::vector<std::string>& given = option->results();
    const bool flag = option->get_items_expected_max() == 0;  // a switch without a value
    const std::string value = flag || given.empty() ? "" : fmt::format(" {}", fmt::join(given, " "));
    const Switch* s = switch_named(name);
    lines.push_back(fmt::format("{}{}: {}", name, value, s != nullptr ? s->here : option->get_description()));
  }
  return lines;
}

}  // namespace tessel
