// tessel: one binary, one subcommand per job. Flags carry Megatron-LM's names.
//   tessel train     train a model (the default one on the bundled corpus with no flags)
//   tessel generate  sample text from a model folder
//   tessel export    write a model's initial (or --init-from, or a --load save's) weights as a
//                    Hugging Face folder
//   tessel checkpoint inspect or verify a --save folder
//   tessel tokenizer  train a tokenizer; encode, decode or inspect with one
//   tessel preprocess tokenize a corpus into Megatron's .bin/.idx
//   tessel data      inspect a .bin/.idx pair, build the GPT datasets' indices
//   tessel plan      predict a layout's memory and step time, or search the best layout
#include <omp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fmt/format.h>

#include "tessel/train/plan.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/hf.h"
#include "tessel/parallel/groups.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"
#include "tessel/model/config.h"
#include "tessel/data/tokenizer_files.h"
#include "tessel/infer/generate.h"
#include "tessel/model/moe/moe.h"
#include "tessel/core/params.h"
#include "tessel/model/transformer.h"
#include "tessel/train/numerics.h"
#include "tessel/train/trainer.h"
#include "tessel/core/writable.h"

#include "checkpoint_command.h"
#include "data_command.h"
#include "demo_command.h"
#include "layout_command.h"
#include "preprocess_command.h"
#include "plan_command.h"
#include "schedule_command.h"
#include "tokenizer_command.h"
#include "tokenizer_flags.h"
#include "whole_numbers.h"

#ifndef TESSEL_DEFAULT_DATA
#define TESSEL_DEFAULT_DATA "data/kjv-genesis-esther.txt"
#endif

namespace tessel {
namespace {

// Model flags: defaults, then --model-config FILE, then the flags given on the command line.
struct ModelFlags {
  ModelConfig cfg;    // the defaults, then the resolved config
  ModelConfig flags;  // what CLI11 parsed into; copied over only for the flags actually given
  std::string arch = "gpt2";
  std::string model_config;
  std::vector<std::pair<CLI::Option*, std::function<void(ModelConfig&)>>> given;

  MoeConfig moe;
  std::string moe_layer_freq = "1", moe_score = "softmax";

  void add(CLI::App& app) {
    app.add_option("--num-experts", moe.num_experts, "Mixture of Experts: experts per MoE layer (0: dense)")->capture_default_str();
    app.add_option("--moe-router-topk", moe.topk, "experts per token")->capture_default_str();
    app.add_option("--moe-ffn-hidden-size", moe.ffn_hidden_size, "an expert's MLP size (0: --ffn-hidden-size)")->capture_default_str();
    app.add_option("--moe-layer-freq", moe_layer_freq, "MoE every N layers, or a 0/1 list such as [1,0,1,0]")->capture_default_str();
    app.add_option("--moe-shared-expert-intermediate-size", moe.shared_expert_size, "shared expert MLP size (0: none)")->capture_default_str();
    app.add_option("--moe-router-score-function", moe_score, "softmax | sigmoid")->capture_default_str();
    app.add_flag("--moe-router-pre-softmax", moe.pre_softmax, "softmax over all experts before the top-k");
    app.add_option("--moe-aux-loss-coeff", moe.aux_loss_coeff, "load-balancing loss coefficient")->capture_default_str();
    app.add_option("--moe-z-loss-coeff", moe.z_loss_coeff, "router z-loss coefficient")->capture_default_str();
    app.add_option("--moe-expert-capacity-factor", moe.capacity_factor, "expert capacity factor (0: dropless)")->capture_default_str();
    app.add_flag("--moe-pad-expert-input-to-capacity", moe.pad_to_capacity, "pad every expert's input to its capacity");
    app.add_option("--model-config", model_config, "JSON model file (keys = flag names with _)");
    given.emplace_back(app.add_option("--arch", arch, "gpt2 | llama")->capture_default_str(),
                       [this](ModelConfig& c) { c.arch = parse_arch(arch); });
    option(app, "--num-layers", &ModelConfig::num_layers, "Transformer layers");
    option(app, "--hidden-size", &ModelConfig::hidden_size, "hidden size");
    option(app, "--num-attention-heads", &ModelConfig::num_attention_heads, "attention heads");
    option(app, "--num-query-groups", &ModelConfig::num_query_groups, "key/value heads (GQA, llama)");
    option(app, "--ffn-hidden-size", &ModelConfig::ffn_hidden_size, "MLP hidden size (0: default)");
    option(app, "--seq-length", &ModelConfig::seq_length, "sequence length");
    option(app, "--max-position-embeddings", &ModelConfig::max_position_embeddings,
           "maximum positions (0: --seq-length)");
    option(app, "--vocab-size", &ModelConfig::vocab_size,
           cfg.vocab_size == 0 ? "vocabulary size (0: the tokenizer's)" : "vocabulary size");
    option(app, "--norm-epsilon", &ModelConfig::norm_epsilon, "LayerNorm / RMSNorm epsilon");
    option(app, "--rotary-base", &ModelConfig::rotary_base, "RoPE base (llama)");
    flag(app, "--add-qkv-bias", &ModelConfig::add_qkv_bias, "biases on q, k and v (llama; Qwen2)");
    flag(app, "--qk-layernorm", &ModelConfig::qk_layernorm,
         "RMSNorm over each head's q and k before RoPE (llama; Qwen3)");
  }

  void flag(CLI::App& app, const std::string& name, bool ModelConfig::*member, const std::string& help) {
    CLI::Option* opt = app.add_flag(name, flags.*member, help);
    given.emplace_back(opt, [this, member](ModelConfig& c) { c.*member = flags.*member; });
  }

  template <typename T>
  void option(CLI::App& app, const std::string& name, T ModelConfig::*member, const std::string& help) {
    CLI::Option* opt = app.add_option(name, flags.*member, help)->capture_default_str();
    given.emplace_back(opt, [this, member](ModelConfig& c) { c.*member = flags.*member; });
  }

  // The final config: defaults < model file < init-from's config.json < flags (which must agree
  // with an init-from config.json on every size). The MoE settings come from the flags.
  ModelConfig resolve(const std::string& init_from) {
    ModelConfig c = resolve_sizes(init_from);
    if (moe.num_experts > 0) {
      c.moe = moe;
      c.moe.score_sigmoid = moe_score == "sigmoid";
      TESSEL_CHECK(moe_score == "softmax" || moe_score == "sigmoid",
                   "--moe-router-score-function must be softmax or sigmoid (got {})", moe_score);
      c.moe.layer_pattern = parse_moe_layer_freq(moe_layer_freq, c.num_layers);
    }
    return c;
  }

  ModelConfig resolve_sizes(const std::string& init_from) {
    ModelConfig defaults = cfg;
    if (!model_config.empty()) cfg = load_model_config_file(model_config);
    if (!init_from.empty()) {
      if (std::optional<ModelConfig> file = hf_config_beside(init_from)) {
        ModelConfig wanted = cfg;
        for (auto& [opt, apply] : given)
          if (opt->count() > 0) apply(wanted);
        check_agrees(*file, wanted, init_from);
        int seq = given_count("--seq-length") ? wanted.seq_length
                                              : std::min(defaults.seq_length, file->max_positions());
        cfg = *file;
        cfg.seq_length = seq;
        return cfg;
      }
    }
    for (auto& [opt, apply] : given)
      if (opt->count() > 0) apply(cfg);
    return cfg;
  }

  int given_count(const std::string& name) const {
    for (auto& [opt, apply] : given)
      if (opt->get_name() == name) return static_cast<int>(opt->count());
    return 0;
  }

  void check_agrees(const ModelConfig& file, const ModelConfig& flags, const std::string& path) {
    std::vector<std::string> v;
    auto same = [&](const char* flag, auto a, auto b) {
      if (given_count(flag) && a != b) v.push_back(fmt::format("{} {} but {} has {}", flag, b, path, a));
    };
    same("--arch", arch_name(file.arch), arch_name(flags.arch));
    same("--num-layers", file.num_layers, flags.num_layers);
    same("--hidden-size", file.hidden_size, flags.hidden_size);
    same("--num-attention-heads", file.num_attention_heads, flags.num_attention_heads);
    same("--num-query-groups", file.query_groups(), flags.query_groups());
    same("--ffn-hidden-size", file.ffn_size(), flags.ffn_size());
    same("--vocab-size", file.vocab_size, flags.vocab_size);
    same("--max-position-embeddings", file.max_positions(), flags.max_positions());
    same("--add-qkv-bias", file.add_qkv_bias, flags.add_qkv_bias);
    same("--qk-layernorm", file.qk_layernorm, flags.qk_layernorm);
    if (v.empty()) return;
    std::string msg = "--init-from does not match the flags: " + v[0];
    for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
    throw Error(msg);
  }
};

void set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

int run(int argc, char** argv, MpiRuntime& runtime) {
  CLI::App app{"tessel: trains Transformer language models with Megatron-LM's parallelisms"};
  app.require_subcommand(1);

  // ---- train ----
  CLI::App* train_cmd = app.add_subcommand("train", "train a model");
  ModelFlags train_model;
  train_model.cfg.vocab_size = train_model.flags.vocab_size = 0;  // the tokenizer's
  train_model.add(*train_cmd);
  TrainOptions t;
  t.data.path = {TESSEL_DEFAULT_DATA};
  std::string decay_style = lr_decay_style_name(t.optim.lr.style);
  int threads = 0;
  std::string device = "cpu";
  train_cmd->add_option("--micro-batch-size", t.batch.micro_batch_size, "samples per microbatch")->capture_default_str();
  train_cmd->add_option("--global-batch-size", t.batch.global_batch_size, "samples per iteration")->capture_default_str();
  train_cmd->add_option("--train-iters", t.optim.lr.train_iters, "iterations")->capture_default_str();
  train_cmd->add_option("--seed", t.seed, "seed of initialisation and of the datasets' shuffles")->capture_default_str();
  train_cmd->add_option("--log-interval", t.log.interval, "iterations between log lines")->capture_default_str();
  train_cmd->add_option("--log-json", t.log.json, "write one JSON object per logged iteration");
  CLI::Option* data_path = train_cmd->add_option(
      "--data-path", t.data.path, "PREFIX (.bin/.idx) or text file, or W1 P1 W2 P2 ... (a blend) for all splits")
      ->capture_default_str();
  train_cmd->add_option("--train-data-path", t.data.train_path, "the train split's blend (instead of --data-path)");
  train_cmd->add_option("--valid-data-path", t.data.valid_path, "the valid split's blend");
  train_cmd->add_option("--test-data-path", t.data.test_path, "the test split's blend");
  train_cmd->add_option("--split", t.data.split, "train,valid,test proportions of --data-path's documents")->capture_default_str();
  train_cmd->add_option("--data-cache-path", t.data.cache_path, "where the datasets' index files go (default: beside the data)");
  add_tokenizer_flags(*train_cmd, t.data.tokenizer);
  train_cmd->add_flag("--reset-position-ids", t.data.reset_position_ids, "positions restart after each end-of-document token");
  train_cmd->add_flag("--reset-attention-mask", t.data.reset_attention_mask, "attention stays within each document");
  train_cmd->add_flag("--eod-mask-loss", t.data.eod_mask_loss, "no loss where the input is an end-of-document token");
  train_cmd->add_option("--eval-interval", t.eval.interval, "iterations between evaluations on the valid split")->capture_default_str();
  train_cmd->add_option("--eval-iters", t.eval.iters, "global batches per evaluation (0: none)")->capture_default_str();
  train_cmd->add_option("--init-from", t.checkpoint.init_from, "start from a Hugging Face safetensors file or folder");
  train_cmd->add_option("--save-hf", t.checkpoint.save_hf, "write model.safetensors + config.json here at the end");
  train_cmd->add_option("--save", t.checkpoint.save, "checkpoint folder (a save every --save-interval and at the end)");
  train_cmd->add_option("--save-interval", t.checkpoint.save_interval, "iterations between checkpoints (0: only at the end)")->capture_default_str();
  train_cmd->add_flag("--async-save", t.checkpoint.async_save, "write checkpoints on a background thread while training goes on");
  train_cmd->add_option("--exit-interval", t.checkpoint.exit_interval, "stop once the iteration is a multiple of this (after saving)");
  train_cmd->add_option("--load", t.checkpoint.load, "resume from the newest checkpoint in this folder (any layout)");
  train_cmd->add_option("--lr", t.optim.lr.lr, "peak learning rate")->capture_default_str();
  train_cmd->add_option("--min-lr", t.optim.lr.min_lr, "final learning rate")->capture_default_str();
  train_cmd->add_option("--lr-warmup-iters", t.optim.lr.warmup_iters, "linear warmup iterations")->capture_default_str();
  train_cmd->add_option("--lr-decay-iters", t.optim.lr.decay_iters, "decay iterations (0: --train-iters)")->capture_default_str();
  train_cmd->add_option("--lr-decay-style", decay_style, "constant | linear | cosine")->capture_default_str();
  train_cmd->add_option("--weight-decay", t.optim.adamw.weight_decay, "AdamW weight decay")->capture_default_str();
  train_cmd->add_option("--adam-beta1", t.optim.adamw.beta1, "AdamW beta1")->capture_default_str();
  train_cmd->add_option("--adam-beta2", t.optim.adamw.beta2, "AdamW beta2")->capture_default_str();
  train_cmd->add_option("--adam-eps", t.optim.adamw.eps, "AdamW epsilon")->capture_default_str();
  train_cmd->add_option("--clip-grad", t.optim.adamw.clip_grad, "gradient clipping by global norm (0: off)")->capture_default_str();
  train_cmd->add_flag("--enable-optimizer-post-validation", t.optim.post_validation,
                      "step before the global gradient norm is known; undo and redo the step if clipping or a "
                      "non-finite norm changes it (zero-bubble pipelines)");
  ParallelConfig& pc = t.parallel.layout;
  train_cmd->add_option("--tp,--tensor-model-parallel-size", pc.tp, "tensor parallel size")->capture_default_str();
  train_cmd->add_option("--pp,--pipeline-model-parallel-size", pc.pp, "pipeline parallel size")->capture_default_str();
  train_cmd->add_option("--cp,--context-parallel-size", pc.cp, "context parallel size")->capture_default_str();
  train_cmd->add_option("--ep,--expert-model-parallel-size", pc.ep, "expert parallel size")->capture_default_str();
  train_cmd->add_option("--etp,--expert-tensor-parallel-size", pc.etp, "expert tensor parallel size (0: = TP)")->capture_default_str();
  train_cmd->add_option("--vpp,--num-virtual-stages-per-pipeline-rank", pc.vpp, "virtual pipeline stages")->capture_default_str();
  train_cmd->add_option("--order", pc.order, "rank order, first axis fastest")->capture_default_str();
  train_cmd->add_flag("--sequence-parallel", pc.sequence_parallel, "split norms and residuals along the sequence over TP");
  train_cmd->add_option("--schedule", t.parallel.pipeline.schedule, "pipeline schedule: gpipe | 1f1b | interleaved | zb-h1 | zb-v | dualpipev (default 1f1b, interleaved with --vpp)");
  train_cmd->add_option("--microbatch-group-size-per-virtual-pipeline-stage", t.parallel.pipeline.microbatch_group,
                        "interleaved schedule's microbatch group (0: PP)")->capture_default_str();
  train_cmd->add_option("--decoder-first-pipeline-num-layers", t.parallel.pipeline.first_stage_layers, "layers of the first pipeline stage");
  train_cmd->add_option("--decoder-last-pipeline-num-layers", t.parallel.pipeline.last_stage_layers, "layers of the last pipeline stage");
  train_cmd->add_option("--pipeline-model-parallel-layout", t.parallel.pipeline.layout, "Megatron's layout string, e.g. \"Et*3|(tt|)*2tL\"");
  train_cmd->add_option("--cp-comm-type", t.parallel.cp_comm_type, "context parallel attention: p2p (ring) | all-gather")->capture_default_str();
  train_cmd->add_option("--ddp-bucket-size", t.parallel.ddp.bucket_size, "gradients per DP reduction bucket (floats)")->capture_default_str();
  train_cmd->add_flag("--overlap-grad-reduce", t.parallel.ddp.overlap_grad_reduce,
                      "start each DP bucket's reduction during backward (non-blocking)");
  train_cmd->add_flag("--use-distributed-optimizer", pc.distributed_optimizer, "shard Adam state and the update over DP (ZeRO-1)");
  train_cmd->add_option("--recompute-granularity", t.recompute.granularity, "activation recomputation: full | selective");
  train_cmd->add_option("--recompute-method", t.recompute.method, "full recompute: uniform | block");
  train_cmd->add_option("--recompute-num-layers", t.recompute.num_layers,
                        "full recompute: layers per recompute group (uniform), or recomputed layers of each model chunk (block)");
  train_cmd->add_option("--recompute-modules", t.recompute.modules,
                        "selective recompute: core_attn layernorm mlp moe moe_act shared_experts (default core_attn)");
  train_cmd->add_flag("--recompute-activations", t.recompute.activations, "selective recompute (Megatron's older flag)");
  train_cmd->add_option("--make-vocab-size-divisible-by", train_model.flags.make_vocab_size_divisible_by,
                        "pad the vocabulary to a multiple of this × TP")->capture_default_str();
  bool force_progress = false;
  train_cmd->add_flag("--progress", force_progress, "draw the live progress line (default: on a terminal, not under mpirun)");
  train_cmd->add_option("--device", device, "where to compute: cpu | cuda (a build with -DTESSEL_CUDA)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  train_cmd->add_flag_callback("--bf16", [&t] { t.precision = Precision::BF16; },
                               "bf16 mixed precision: GEMMs on bf16 operands, fp32 accumulation, fp32 master weights");
  train_cmd->add_flag("--profile", t.log.profile, "report GEMM throughput and memory at the end");
  train_cmd->add_option("--pipeline-timeline", t.log.pipeline_timeline,
                        "write the last iteration's F, B, I and W actions on every rank as a Chrome trace (chrome://tracing, Perfetto)");
  train_cmd->add_option("--threads", threads, "threads per process (default: OMP_NUM_THREADS or all cores)");
  FaultOptions& f = t.faults;
  train_cmd->add_flag("--check-for-nan-in-loss-and-grad,!--no-check-for-nan-in-loss-and-grad", f.check_nan,
                      "stop before the optimizer step when the loss or the gradient norm is not finite (default on; off: skip that step)");
  train_cmd->add_option("--rerun-mode", f.rerun_mode, "validate_results: recompute a failing iteration once to tell a reproducible fault from a transient one | disabled")->capture_default_str();
  train_cmd->add_flag("--check-for-spiky-loss", f.check_spiky_loss, "report a loss 10 times the largest of the first 100 (recomputed under validate_results)");
  train_cmd->add_option("--inject-fault", f.inject, "tests: nan-grad|transient-nan-grad|loss-spike:ITERATION[:RANK]");
  train_cmd->add_flag("--exit-signal-handler", f.exit_signal_handler, "on SIGTERM, SIGINT, SIGUSR1 or SIGUSR2: finish the iteration, save, exit 0");
  train_cmd->add_option("--exit-duration-in-mins", f.exit_duration_mins, "save and exit 0 after this many minutes (0: no limit)")->capture_default_str();
  train_cmd->add_option("--distributed-timeout-minutes", f.distributed_timeout_minutes, "end the job when a communication waits this long without progress")->capture_default_str();
  train_cmd->add_option("--distributed-timeout-seconds", f.distributed_timeout_seconds, "the same in seconds, for tests (0: the minutes)")->capture_default_str();
  train_cmd->add_flag("--log-straggler", t.log.straggler, "every --log-interval: each rank's compute time against the median, the slowest named");
  train_cmd->add_option("--straggler-minmax-count", t.log.straggler_minmax_count, "slowest and fastest ranks named")->capture_default_str();

  // ---- generate ----
  CLI::App* gen_cmd = app.add_subcommand("generate", "sample text from a model folder");
  std::string model_dir;
  GenerateOptions g;
  gen_cmd->add_option("--model", model_dir, "folder with config.json + model.safetensors")->required();
  gen_cmd->add_option("--prompt", g.prompt, "text to continue");
  gen_cmd->add_option("--max-new-tokens", g.max_new_tokens, "tokens to generate")->capture_default_str();
  gen_cmd->add_option("--temperature", g.temperature, "sampling temperature (0: greedy)")->capture_default_str();
  gen_cmd->add_option("--top-k", g.top_k, "sample among the k likeliest tokens (0: all)")->capture_default_str();
  gen_cmd->add_option("--seed", g.seed, "sampling seed")->capture_default_str();
  gen_cmd->add_flag("--ignore-eos", g.ignore_eos, "go on past the end-of-sequence token");
  TokenizerOptions gen_tokenizer;
  add_tokenizer_flags(*gen_cmd, gen_tokenizer);
  gen_cmd->add_option("--threads", threads, "threads");

  // ---- export ----
  CLI::App* export_cmd = app.add_subcommand("export", "write a model as a Hugging Face folder");
  ModelFlags export_model;
  export_model.cfg.vocab_size = export_model.flags.vocab_size = 0;  // the tokenizer's
  export_model.add(*export_cmd);
  std::string out_dir, export_init, export_load;
  uint64_t export_seed = 1234;
  export_cmd->add_option("--out", out_dir, "output folder")->required();
  export_cmd->add_option("--seed", export_seed, "initialisation seed")->capture_default_str();
  export_cmd->add_option("--init-from", export_init, "weights to convert instead of a fresh initialisation");
  export_cmd->add_option("--load", export_load, "consolidate the newest save of this --save folder (any layout)")
      ->excludes("--init-from");
  TokenizerOptions export_tokenizer;
  add_tokenizer_flags(*export_cmd, export_tokenizer);

  LayoutCommand layout_cmd(app);
  DemoCommand demo_cmd(app);
  ScheduleCommand schedule_cmd(app);
  CheckpointCommand checkpoint_cmd(app);
  TokenizerCommand tokenizer_cmd(app);
  PreprocessCommand preprocess_cmd(app);
  DataCommand data_cmd(app);
  PlanCommand plan_cmd(app);
  require_whole_numbers(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same command line: the first reports it. CLI11 says "Could not
    // convert: --tp = 3000000000" for a number outside its flag's type.
    std::string what = e.what();
    const std::string convert = "Could not convert: ", equals = " = ";
    if (what.rfind(convert, 0) == 0 && what.find(equals) != std::string::npos) {
      const size_t at = what.find(equals);
      what = fmt::format("{} {} is not a valid value (not a number, or outside the flag's range)",
                         what.substr(convert.size(), at - convert.size()), what.substr(at + equals.size()));
    }
    for (char& c : what)
      if (c == '\n') c = ' ';
    if (runtime.world_rank() == 0) fmt::print(stderr, "tessel: error: {} (see tessel --help)\n", what);
    return 2;
  }
  set_threads(threads);

  if (*train_cmd) {
    // The bundled corpus is the default for --data-path alone: per-split paths replace it.
    const bool per_split = !t.data.train_path.empty() || !t.data.valid_path.empty() || !t.data.test_path.empty();
    if (per_split && data_path->count() == 0) t.data.path.clear();
    // The live progress line for a terminal. Under mpirun every rank's stdout is a pseudo-terminal
    // whatever the user's is, so there it takes --progress.
    t.log.progress = force_progress || (isatty(STDOUT_FILENO) != 0 && !runtime.active());
    // A Hugging Face folder brings its tokenizer, as transformers' from_pretrained.
    if (!t.checkpoint.init_from.empty() && !tokenizer_flags_given(*train_cmd))
      if (std::optional<TokenizerOptions> found = tokenizer_in_folder(t.checkpoint.init_from))
        t.data.tokenizer = *found;
    pc.world = runtime.world_size();
    t.device = device == "cuda" ? Device::CUDA : Device::CPU;
    std::optional<TrainPlan> resolved;  // every rank alike, before any other communication
    check_together(runtime.world(), [&] {
      t.optim.lr.style = parse_lr_decay_style(decay_style);
      ModelConfig cfg = train_model.resolve(t.checkpoint.init_from);
      cfg.make_vocab_size_divisible_by = train_model.flags.make_vocab_size_divisible_by;
      resolved = plan_training(cfg, t);
    });
    const TrainPlan& plan = *resolved;
    set_distributed_timeout(t.faults.distributed_timeout());
    const DeviceMemory& memory = kernels_for(t.device, t.precision).memory;
    ProcessGroups groups = runtime.active()
                               ? ProcessGroups::create(Layout(plan.layout()), runtime.world_rank(), memory)
                               : ProcessGroups::single(memory);
    train(plan, groups);
  } else if (*gen_cmd) {
    validate_generate_options(g);
    if (tokenizer_flags_given(*gen_cmd)) g.tokenizer = gen_tokenizer;
    std::fwrite(g.prompt.data(), 1, g.prompt.size(), stdout);
    generate(model_dir, g, [](const std::string& text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    });
    std::fputs("\n", stdout);
  } else if (*export_cmd) {
    // A save carries its model's config.json: the sizes come from there, not from flags.
    ModelConfig cfg = export_load.empty()
                          ? export_model.resolve(export_init)
                          : model_config_from_hf(read_checkpoint_metadata(export_load).at("model"),
                                                 export_load + " (metadata.json)");
    // The tokenizer named by flags, else the one beside --init-from's weights (or none: bytes).
    std::optional<TokenizerOptions> tokenizer_options;
    if (tokenizer_flags_given(*export_cmd)) tokenizer_options = export_tokenizer;
    else if (!export_init.empty()) tokenizer_options = tokenizer_in_folder(export_init);
    const std::unique_ptr<Tokenizer> tokenizer =
        tokenizer_options ? make_tokenizer(*tokenizer_options) : std::make_unique<ByteTokenizer>();
    if (cfg.vocab_size == 0) cfg.vocab_size = tokenizer->vocab_size();
    TESSEL_CHECK(cfg.vocab_size >= tokenizer->vocab_size(), "--vocab-size {} is smaller than the {}'s {}",
                 cfg.vocab_size, tokenizer->type(), tokenizer->vocab_size());
    cfg.validate();
    require_writable_dir("--out", out_dir);
    const Kernels& k = cpu_kernels();
    ParamRegistry params;
    TransformerChunk model(k, cfg, ChunkSpec{0, cfg.num_layers, true, true}, 1,
                           no_tensor_parallel(k), params, no_context_parallel(k));
    params.finalize(k.memory);
    if (!export_load.empty()) {
      const nlohmann::json saved = read_checkpoint_metadata(export_load).at("run_config").at("tokenizer");
      if (tokenizer_options) {
        const std::string why = tokenizer_mismatch(saved, tokenizer_identity(*tokenizer));
        TESSEL_CHECK(why.empty(), "--load {}: {}", export_load, why);
      }
      AdamW moments(k, params, OptimizerConfig{});  // read along, not written out
      load_checkpoint(export_load, params, moments, cfg);
    } else if (export_init.empty()) {
      params.init_values(export_seed);
    } else {
      load_hf_weights(params, cfg, hf_weights_file(export_init));
    }
    require_finite_weights(k, params, !export_load.empty()   ? export_load
                                      : !export_init.empty() ? export_init
                                                             : std::string("the initial weights"));
    export_hf(params, cfg, out_dir);
    if (tokenizer_options) save_tokenizer_files(*tokenizer_options, *tokenizer, out_dir);
    fmt::print("wrote {}/model.safetensors and config.json{} ({:.2f}M parameters)\n", out_dir,
               tokenizer_options ? " and the tokenizer" : "", params.numel() / 1e6);
  } else if (layout_cmd.selected()) {
    layout_cmd.run();
  } else if (demo_cmd.selected()) {
    demo_cmd.run(runtime);
  } else if (schedule_cmd.selected()) {
    schedule_cmd.run();
  } else if (checkpoint_cmd.selected()) {
    checkpoint_cmd.run();
  } else if (tokenizer_cmd.selected()) {
    tokenizer_cmd.run();
  } else if (preprocess_cmd.selected()) {
    preprocess_cmd.run();
  } else if (data_cmd.selected()) {
    data_cmd.run();
  } else if (plan_cmd.selected()) {
    plan_cmd.run(runtime);
  }
  return 0;
}

}  // namespace
}  // namespace tessel

// Errors: a JobError (a ConfigError among them) is thrown by every rank together with the same
// message, so the first rank reports it and all exit normally; any other error may strike one
// rank alone while the others wait for it in a collective, so it ends the whole job (DESIGN
// invariant 6).
int main(int argc, char** argv) {
  tessel::MpiRuntime runtime(&argc, &argv);
  try {
    return tessel::run(argc, argv, runtime);
  } catch (const tessel::JobError& e) {
    if (runtime.world_rank() == 0) fmt::print(stderr, "tessel: error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    tessel::abort_job("out of memory");
  } catch (const std::exception& e) {
    tessel::abort_job(e.what());
  }
}
