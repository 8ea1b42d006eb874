// twin-run: trains attention-twin pairs (docs/protocol.md) and reports how
// far the two copies drift apart. Parses flags and hands over to the
// libraries; turns any error into one line on stderr and a non-zero exit.
#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>

#include "app/bench_cmd.h"
#include "app/census_cmd.h"
#include "app/common.h"
#include "app/merge_cmd.h"
#include "app/plot_cmd.h"
#include "app/run_cmd.h"
#include "app/table_cmd.h"
#include "app/verdict_cmd.h"
#include "bridge/bridge.h"
#include "twins/device.h"
#include "twins/environment.h"
#include "twins/stop.h"
#include "twins/text.h"

using twins::first_line;

namespace {

// Why the command line has an empty value ("--opt ''", "--out=", an empty
// positional), or empty when it has none. CLI11 would take an empty value
// for "use the default" for some flags (an empty --opt runs every pair);
// here it is refused for every flag alike, before anything is parsed.
std::string empty_value(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos &&
        eq + 1 == arg.size())
      return arg.substr(0, eq) + ": empty value";
    if (!arg.empty())
      continue;
    const std::string before = i > 1 ? argv[i - 1] : "";
    return before.rfind("-", 0) == 0
               ? before + ": empty value"
               : "argument " + std::to_string(i) +
                     (before.empty() ? "" : " (after '" + before + "')") +
                     ": empty value";
  }
  return "";
}

// For an unexpected flag that another command takes ("twin-run --merge-at
// 100"): "; --merge-at is an option of twin-run merge", else empty.
std::string where_flags_belong(const CLI::App& root, const CLI::Error& e) {
  if (dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr)
    return "";
  std::string hint;
  std::istringstream words(e.what());
  for (std::string word; words >> word;) {
    if (word.rfind("--", 0) != 0 || word.size() < 3)
      continue;
    const std::string flag = word.substr(0, word.find('='));
    std::string commands;
    for (const CLI::App* sub : root.get_subcommands(
             [](const CLI::App*) { return true; })) {
      if (sub->get_option_no_throw(flag) != nullptr)
        commands += (commands.empty() ? "twin-run " : ", twin-run ") +
                    sub->get_name();
    }
    if (!commands.empty())
      hint += "; " + flag + " is an option of " + commands;
  }
  return hint;
}

// Every command's flags and its subcommand; the default run's flags are
// the root's. CLI11 binds the flags by reference: they live in main.
struct Commands {
  app::RunFlags run;
  app::TableFlags table_flags;
  app::PlotFlags plot_flags;
  app::VerdictFlags verdict_flags;
  app::MergeFlags merge_flags;
  app::BenchFlags bench_flags;
  app::CensusFlags census_flags;
  CLI::App* table = nullptr;
  CLI::App* plot = nullptr;
  CLI::App* verdict = nullptr;
  CLI::App* merge = nullptr;
  CLI::App* bench = nullptr;
  CLI::App* census = nullptr;
};

void add_commands(CLI::App& cli, Commands& c) {
  app::setup_run(cli, c.run);
  c.table = app::setup_table(cli, c.table_flags);
  c.plot = app::setup_plot(cli, c.plot_flags);
  c.verdict = app::setup_verdict(cli, c.verdict_flags);
  c.merge = app::setup_merge(cli, c.merge_flags);
  c.bench = app::setup_bench(cli, c.bench_flags);
  c.census = app::setup_census(cli, c.census_flags);
  // One command per call. Without this bound CLI11 would take a word after
  // a command that names another command as that command: `table merge`
  // must run the table named merge.
  cli.require_subcommand(0, 1);
}

// The command that was parsed, run; what it throws is one line and an exit
// code.
int run_parsed(const Commands& c) {
  try {
    if (c.table->parsed())
      return app::run_table(c.table_flags);
    if (c.plot->parsed())
      return app::run_plot(c.plot_flags);
    if (c.verdict->parsed())
      return app::run_verdict(c.verdict_flags);
    if (c.bench->parsed())
      return app::run_bench(c.bench_flags);
    if (c.merge->parsed())
      return app::run_merge(c.merge_flags);
    if (c.census->parsed())
      return app::run_census(c.census_flags);
    return app::run_run(c.run);
  } catch (const twins::Stopped& e) {
    // The state is saved: 75 (EX_TEMPFAIL) tells a batch script to requeue
    // the job (scripts/slurm/table-array.sbatch), and a hang-up (a closed
    // terminal) leaves the same state; an interrupt from the terminal is
    // 130, as the shell reports one.
    std::fprintf(stderr, "twin-run: %s; rerun the same command to resume\n",
                 e.what());
    return e.signal() == SIGINT ? 130 : 75;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "twin-run: error: %s\n",
                 first_line(e.what_without_backtrace()).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "twin-run: error: %s\n", first_line(e.what()).c_str());
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything computes: the kernels are pinned, or a BLAS that does
  // not know this CPU is given the CPU's, by re-executing with the
  // libraries' variables set (twins/environment.h).
  try {
    if (twins::portable_requested(argc, argv))
      twins::enter_portable_mode(argv);
    twins::enter_known_blas_core(argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "twin-run: error: %s\n", e.what());
    return 1;
  }
  twins::keep_freed_memory();  // before the first tensor
  bridge::install();            // the torch: and py: names (bridge/bridge.h)
  CLI::App cli{
      "twin-run: train two copies of a small transformer that compute the "
      "same function (one with each head's W_Q, W_K rotated by a random "
      "orthogonal matrix) in lockstep, and measure whether the optimizer "
      "keeps them together."};
  // Errors are one line: the message and where to look.
  cli.failure_message([&cli](const CLI::App*, const CLI::Error& e) {
    return std::string("twin-run: error: ") + e.what() +
           where_flags_belong(cli, e) + " (see --help)\n";
  });
  Commands commands;
  add_commands(cli, commands);
  const std::string empty = empty_value(argc, argv);
  if (!empty.empty()) {
    std::fprintf(stderr, "twin-run: error: %s (see --help)\n", empty.c_str());
    return 2;
  }
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  return run_parsed(commands);
}
