// twin-run's command line: one options struct per command, bound by
// setup_*() and executed by run_*() (the CLI11 subcommand pattern).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "twins/plan.h"

namespace app {

// The default command: run a list of twin pairs.
struct RunFlags {
  twins::PlanRequest plan;  // scalar fields bound directly
  // Comma-separated lists, parsed strictly into `plan` by run_run.
  std::string opts, twins, init_seeds = "42", twin_seeds,
                            noise_scales = "1e-7";
  std::string adam_ps;  // --p: exponents of a bare adam-p, comma-separated
  std::string out;   // results file; empty = a new file under runs/
  bool quiet = false;
  int threads = 2;   // 2+: the copies of a pair train concurrently
  bool list_optimizers = false;
};

// The flags that shape every pair, shared by the run and `verdict`:
// --task, --steps, --lr, --dtype, --device, --depth, --d-model, --heads,
// --mlp, --data-seed, --ctx, --batch, --data, bound to `plan`.
void add_pair_flags(CLI::App& app, twins::PlanRequest& plan);

void setup_run(CLI::App& app, RunFlags& flags);
int run_run(const RunFlags& flags);

}  // namespace app
