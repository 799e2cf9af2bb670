// tessel: one binary, one subcommand per job, each in its own file. Flags carry Megatron-LM's names.
//   tessel train     train a model (the default one on the bundled corpus with no flags)
//   tessel generate  sample text from a model folder
//   tessel export    write a model's initial (or --init-from, or a --load save's) weights as a
//                    Hugging Face folder
//   tessel checkpoint inspect or verify a --save folder
//   tessel tokenizer  train a tokenizer; encode, decode or inspect with one
//   tessel preprocess tokenize a corpus into Megatron's .bin/.idx
//   tessel data      inspect a .bin/.idx pair, build the GPT datasets' indices
//   tessel plan      predict a layout's memory and step time, or search the best layout
//   tessel layout    show a parallel layout's process groups, batch and model split
//   tessel schedule  draw a pipeline schedule
//   tessel demo      the seed's worked examples on two ranks
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint_command.h"
#include "data_command.h"
#include "demo_command.h"
#include "export_command.h"
#include "generate_command.h"
#include "layout_command.h"
#include "plan_command.h"
#include "preprocess_command.h"
#include "repeated_flags.h"
#include "schedule_command.h"
#include "standard_output.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"
#include "tessel/train/signals.h"
#include "thread_flags.h"
#include "tokenizer_command.h"
#include "train_command.h"
#include "whole_numbers.h"

namespace tessel {
namespace {

// Every rank parses the same command line: the first reports its error. CLI11 says "Could not
// convert: --tp = 3000000000" for a number outside its flag's type.
int report_parse_error(const CLI::ParseError& e, const MpiRuntime& runtime) {
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

int run(int argc, char** argv, MpiRuntime& runtime) {
  CLI::App app{"tessel: trains Transformer language models with Megatron-LM's parallelisms"};
  app.require_subcommand(1);
  TrainCommand train_cmd(app);
  GenerateCommand generate_cmd(app);
  ExportCommand export_cmd(app);
  LayoutCommand layout_cmd(app);
  DemoCommand demo_cmd(app);
  ScheduleCommand schedule_cmd(app);
  CheckpointCommand checkpoint_cmd(app);
  TokenizerCommand tokenizer_cmd(app);
  PreprocessCommand preprocess_cmd(app);
  DataCommand data_cmd(app);
  PlanCommand plan_cmd(app);
  require_whole_numbers(app);
  last_value_wins(app);

  // CLI11 says only "A subcommand is required" for a word that names none.
  const std::vector<CLI::App*> commands = app.get_subcommands({});
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(commands.begin(), commands.end(), [&](CLI::App* c) { return c->check_name(argv[1]); })) {
    std::vector<std::string> names;
    for (const CLI::App* c : commands) names.push_back(c->get_name());
    if (runtime.world_rank() == 0)
      fmt::print(stderr, "tessel: error: '{}' is not a tessel command; the commands are {} (see tessel --help)\n",
                 argv[1], fmt::join(names, ", "));
    return 2;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help: printed, and written or an error as any output
    const int code = app.exit(e);
    flush_standard_output();
    return code;
  } catch (const CLI::ParseError& e) {
    return report_parse_error(e, runtime);
  }
  check_environment_threads();  // before any command starts an OpenMP region

  if (train_cmd.selected())
    train_cmd.run(runtime);
  else if (generate_cmd.selected())
    generate_cmd.run();
  else if (export_cmd.selected())
    export_cmd.run();
  else if (layout_cmd.selected())
    layout_cmd.run();
  else if (demo_cmd.selected())
    demo_cmd.run(runtime);
  else if (schedule_cmd.selected())
    schedule_cmd.run();
  else if (checkpoint_cmd.selected())
    checkpoint_cmd.run();
  else if (tokenizer_cmd.selected())
    tokenizer_cmd.run();
  else if (preprocess_cmd.selected())
    preprocess_cmd.run();
  else if (data_cmd.selected())
    data_cmd.run();
  else if (plan_cmd.selected())
    plan_cmd.run(runtime);
  flush_standard_output();
  return 0;
}

}  // namespace
}  // namespace tessel

// Errors: a JobError (a ConfigError among them) is thrown by every rank together with the same
// message, so the first rank reports it and all exit normally; any other error may strike one
// rank alone while the others wait for it in a collective, so it ends the whole job (DESIGN
// invariant 6).
int main(int argc, char** argv) {
  // Before MPI_Init (train/signals.h): a pre-emption's SIGTERM during start-up is noted, not fatal.
  if (tessel::asks_exit_signal_handler(argc, argv)) tessel::install_exit_signal_handlers();
  tessel::MpiRuntime runtime(&argc, &argv);
  try {
    return tessel::run(argc, argv, runtime);
  } catch (const tessel::JobError& e) {
    // fputs: a stderr that cannot be written either must not turn the error into a crash.
    if (runtime.world_rank() == 0) std::fputs(fmt::format("tessel: error: {}\n", e.what()).c_str(), stderr);
    return 1;
  } catch (const std::bad_alloc&) {
    tessel::abort_job("out of memory");
  } catch (const std::exception& e) {
    tessel::abort_job(e.what());
  }
}
