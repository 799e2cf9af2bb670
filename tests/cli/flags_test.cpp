// One definition per flag, as the subcommands' --help shows them: every model field is a flag of
// train, plan, layout and export with the field's help; a name that several subcommands take has
// one help wherever it appears; the layout, batch and pipeline flags that train shares with
// layout or schedule, plan takes too. And what reads the model fields besides the flags: the
// model file (every field written and read back) and --init-from's agreement check.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/run_command.h"
#include "tessel/model/config.h"

namespace tessel {
namespace {

// Every name of every flag of `tessel COMMAND --help` ("--tp" and "--tensor-model-parallel-size"
// alike) with its help text.
using Flags = std::map<std::string, std::string>;

Flags flags_of(const std::string& command) {
  const testing::CommandResult r = testing::run_tessel(command + " --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // CLI11's layout: "  NAMES TYPE=DEFAULT" in a 30-column field, the help after it, or on the next
  // line (indented 30) when the field overflows.
  constexpr size_t kColumn = 30;
  std::vector<std::string> lines;
  std::istringstream text(r.output);
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  Flags flags;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.rfind("  -", 0) != 0) continue;
    const std::string next = i + 1 < lines.size() ? lines[i + 1] : "";
    const bool help_below = next.size() > kColumn && next.find_first_not_of(' ') == kColumn;
    const std::string help = help_below ? next.substr(kColumn) : line.substr(std::min(line.size(), kColumn));
    std::string names = line.substr(2, line.find(' ', 2) - 2);
    names = names.substr(0, names.find('{'));  // --flag,--no-flag{false}
    std::istringstream each(names);
    for (std::string name; std::getline(each, name, ',');) flags[name] = help;
  }
  return flags;
}

const char* const kModelCommands[] = {"train", "plan", "layout", "export"};
const char* const kCommands[] = {"train", "plan", "layout", "export", "schedule"};

TEST(FlagsCli, EveryModelFieldIsAFlagOfEveryModelCommand) {
  const Flags train = flags_of("train");
  ASSERT_TRUE(train.count("--model-config"));
  for (const char* command : kModelCommands) {
    SCOPED_TRACE(command);
    const Flags flags = flags_of(command);
    EXPECT_EQ(flags.count("--model-config") ? flags.at("--model-config") : "(missing)",
              train.at("--model-config"));
    for (const ModelField& field : model_fields())
      EXPECT_EQ(flags.count(field.flag) ? flags.at(field.flag) : "(missing)", field.help) << field.flag;
  }
}

// These share a name between subcommands, not a meaning: each subcommand defines its own.
const std::set<std::string> kOwnMeaning = {
    "--seed",       // train's initialisation and data order, export's initialisation
    "--threads",    // train's threads, plan's threads of the planned CPU ranks
    "--out",        // export's folder, plan --calibrate's cluster file
    "--init-from",  // train starts from the weights, export converts them
    "--load",       // train resumes, export consolidates
    "--json",       // each prints its own JSON
    "--attention-backend",  // plan models that GPU attention's memory; train's is its own kernel
    "--bf16",       // plan's planned precision, the default on GPU clusters
    "--fp16",       // plan's planned precision; train's also scales the loss
};

TEST(FlagsCli, ASharedFlagHasOneHelp) {
  std::map<std::string, std::pair<std::string, std::string>> first;  // name -> (command, help)
  for (const char* command : kCommands)
    for (const auto& [name, help] : flags_of(command)) {
      if (kOwnMeaning.count(name)) continue;
      const auto [seen, added] = first.try_emplace(name, command, help);
      if (!added) {
        EXPECT_EQ(help, seen->second.second) << name << " in " << command << " and in " << seen->second.first;
      }
    }
}

TEST(FlagsCli, PlanTakesWhatTrainSharesWithLayoutAndSchedule) {
  const Flags train = flags_of("train"), plan = flags_of("plan");
  size_t shared = 0;
  for (const char* command : {"layout", "schedule"})
    for (const auto& [name, help] : flags_of(command))
      if (name != "-h" && name != "--help" && train.count(name)) {
        ++shared;
        EXPECT_TRUE(plan.count(name)) << name << " (train and " << command << ")";
      }
  EXPECT_GT(shared, model_fields().size());  // the model fields and the parallel flags at least
}

// Every field away from its default (an MoE model with GDN layers, so that their settings are
// written too), to a model file and back.
TEST(ModelFields, EveryFieldRoundTripsThroughTheModelFile) {
  ModelConfig cfg;
  for (const ModelField& field : model_fields())
    visit_model_field(field, cfg, [&](auto& value) {
      using Value = std::decay_t<decltype(value)>;
      if constexpr (std::is_same_v<Value, bool>)
        value = !value;
      else if constexpr (std::is_arithmetic_v<Value>)
        value = value + 1;
      else if constexpr (std::is_same_v<Value, Arch>)
        value = Arch::Llama;
      else if constexpr (std::is_same_v<Value, NamedSwitch>)
        cfg.moe.*value.member = !(cfg.moe.*value.member);
      else if constexpr (std::is_same_v<Value, AttentionVariant>)
        return;  // gdn: the linear-attention pattern, set below
      else
        for (int layer = 0; layer < cfg.num_layers; ++layer) value.push_back(layer % 2 == 0);
    });
  ModelConfig back;
  model_config_from_json(model_config_to_json(cfg), back, "round trip");
  for (const ModelField& field : model_fields())
    EXPECT_EQ(model_field_json(field, back), model_field_json(field, cfg.explicit_sizes())) << field.flag;
}

// As argparse (Megatron's parser): a flag given twice takes its last value, so a launcher may
// append overrides to a base command line.
TEST(FlagsCli, TheLastOfARepeatedFlagWins) {
  const testing::CommandResult twice = testing::run_tessel("layout --world 8 --tp 2 --pp 2 --tp 4");
  ASSERT_EQ(twice.exit_code, 0) << twice.output;
  const testing::CommandResult once = testing::run_tessel("layout --world 8 --pp 2 --tp 4");
  ASSERT_EQ(once.exit_code, 0) << once.output;
  EXPECT_EQ(twice.output, once.output);
  const testing::CommandResult flag = testing::run_tessel("layout --world 8 --tp 2 --sequence-parallel --sequence-parallel");
  EXPECT_EQ(flag.exit_code, 0) << flag.output;
}

// Processes that torchrun or srun started but MPI did not join would each train alone, the same
// run N times: refused in one line naming the variable and the launch that works.
TEST(FlagsCli, AJobMpiDoesNotJoinIsRefused) {
  const std::string train = std::string(TESSEL_BINARY) + " train --train-iters 1 --eval-iters 0";
  const testing::CommandResult torchrun = testing::run_command("WORLD_SIZE=2 " + train);
  EXPECT_EQ(torchrun.exit_code, 1) << torchrun.output;
  EXPECT_NE(torchrun.output.find("WORLD_SIZE=2 says a job of 2 processes (torchrun's)"), std::string::npos)
      << torchrun.output;
  EXPECT_NE(torchrun.output.find("mpirun -np 2 tessel train"), std::string::npos) << torchrun.output;
  const testing::CommandResult srun = testing::run_command("SLURM_STEP_NUM_TASKS=4 " + train);
  EXPECT_EQ(srun.exit_code, 1) << srun.output;
  EXPECT_NE(srun.output.find("srun --mpi=pmix"), std::string::npos) << srun.output;
}

// Megatron's implementation switches are accepted in Megatron's forms and with its choices,
// counted in one line at the start, and explained, with every other flag given, by
// --explain-flags.
TEST(FlagsCli, ImplementationSwitchesAreAcceptedAndSaid) {
  const std::string train = "train --train-iters 1 --eval-iters 0 --micro-batch-size 2 --global-batch-size 2 --threads 1 "
                            "--num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 16 ";
  const testing::CommandResult r = testing::run_tessel(
      train + "--use-flash-attn --transformer-impl transformer_engine --num-workers 4 --no-rope-fusion --explain-flags");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* said :
       {"4 of Megatron-LM's implementation switches have no effect here: --transformer-impl, --use-flash-attn, "
        "--no-rope-fusion, --num-workers",
        "--transformer-impl transformer_engine: no effect: tessel computes each layer with its own kernels",
        "--use-flash-attn: no effect: tessel's attention is its own blockwise kernel", "--train-iters 1: iterations"})
    EXPECT_NE(r.output.find(said), std::string::npos) << said << "\n" << r.output;
  const testing::CommandResult bad = testing::run_tessel(train + "--attention-backend cudnn");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--attention-backend"), std::string::npos) << bad.output;
}

// A Llama folder's norm weights are plain gains: --apply-layernorm-1p reads them as 1 + w (the 1
// taken away on import) instead of refusing the folder, and a size flag still must agree.
TEST(FlagsCli, InitFromAPlainLlamaTakesZeroCentredNorms) {
  testing::TestDir dir;
  ASSERT_EQ(testing::run_tessel("export --arch llama --num-layers 2 --hidden-size 32 --num-attention-heads 4 "
                                "--seq-length 16 --out " + dir.path("llama"))
                .exit_code,
            0);
  const std::string train = "train --train-iters 1 --eval-iters 0 --micro-batch-size 2 --global-batch-size 2 --threads 1 --init-from " +
                            dir.path("llama") + " ";
  const testing::CommandResult taken = testing::run_tessel(train + "--apply-layernorm-1p");
  EXPECT_EQ(taken.exit_code, 0) << taken.output;
  const testing::CommandResult refused = testing::run_tessel(train + "--apply-layernorm-1p --num-layers 3");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("--num-layers 3 but"), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("--apply-layernorm-1p true but"), std::string::npos) << refused.output;
}

// Issue 38's defect: a Llama trained with --apply-layernorm-1p was exported without the +1, and
// re-imported it had the untrained loss (6.84 against 4.91). Trained, written by --save-hf and
// trained on from the folder at --lr 0, its validation loss is the trained run's, to the bit.
TEST(FlagsCli, ALayernorm1pLlamaKeepsItsTrainedLossThroughAHuggingFaceFolder) {
  testing::TestDir dir;
  const std::string run = "train --micro-batch-size 2 --global-batch-size 4 --threads 1 --train-iters 20 "
                          "--eval-interval 20 --eval-iters 2 --data-path " TESSEL_SOURCE_DIR
                          "/data/kjv-genesis-esther.txt --apply-layernorm-1p ";
  const std::string model = "--arch llama --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 ";
  auto valid_loss = [&](const std::string& flags, const std::string& log) {
    const testing::CommandResult r = testing::run_tessel(run + flags + " --log-json " + dir.path(log));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(dir.path(log));
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("split", "") == "valid") return j["loss"].get<double>();
    }
    ADD_FAILURE() << "no validation record in " << log;
    return 0.0;
  };
  const double trained = valid_loss(model + "--lr 3e-3 --save-hf " + dir.path("hf"), "trained.jsonl");
  const double untrained = valid_loss(model + "--lr 0", "untrained.jsonl");
  const double reloaded = valid_loss("--lr 0 --init-from " + dir.path("hf"), "reloaded.jsonl");
  EXPECT_LT(trained, untrained - 0.5);
  EXPECT_EQ(reloaded, trained);
}

// An MoE model from a model file; training from its exported folder refuses a flag that says
// otherwise about the weights' model, and takes one that sets how this run trains it.
TEST(FlagsCli, InitFromAgreementCoversTheMoeFields) {
  testing::TestDir dir;
  const std::string model = dir.write("moe.json", R"({"arch": "llama", "num_layers": 2, "hidden_size": 32,
      "num_attention_heads": 4, "seq_length": 16, "num_experts": 4, "moe_router_topk": 2})");
  ASSERT_EQ(testing::run_tessel("export --model-config " + model + " --out " + dir.path("moe")).exit_code, 0);
  std::ifstream config(dir.path("moe/config.json"));
  EXPECT_EQ(nlohmann::json::parse(config)["num_experts"], 4);
  const std::string train =
      "train --train-iters 1 --eval-iters 0 --micro-batch-size 2 --global-batch-size 2 --threads 1 --init-from " +
      dir.path("moe") + " ";
  const testing::CommandResult refused = testing::run_tessel(train + "--moe-router-topk 1 --num-layers 3");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("--num-layers 3 but " + dir.path("moe") + " has 2; --moe-router-topk 1 but"),
            std::string::npos)
      << refused.output;
  const testing::CommandResult trained =
      testing::run_tessel(train + "--moe-aux-loss-coeff 0.01 --num-experts 4");
  EXPECT_EQ(trained.exit_code, 0) << trained.output;
}

}  // namespace
}  // namespace tessel
