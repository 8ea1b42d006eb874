// The default command: run a list of twin pairs (the Table-3 set unless
// --opt / --twin say otherwise) and print the Table-3-shaped summary.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "app/flags.h"

namespace app {

struct RunFlags {
  sweep::PlanRequest plan;  // scalar fields bound directly
  // Comma-separated lists, parsed strictly into `plan` by run_run.
  std::string opts, twins, init_seeds = "42", twin_seeds, noise_scales = "1e-7";
  std::string adam_ps;  // --p: exponents of a bare adam-p, comma-separated
  EngineFlags engine;
  bool list_optimizers = false;
};

// --opt, --twin, --init-seed, --twin-seed, --noise-scale, --p, the pair
// flags and the engine flags (results file default `out_help`), bound to
// `flags`: what every command that takes a list of pairs accepts.
void add_pair_list_flags(CLI::App& app, RunFlags& flags,
                         const std::string& out_help);

void setup_run(CLI::App& app, RunFlags& flags);
int run_run(const RunFlags& flags);

// The plan of the default command's flags, every list parsed; throws
// naming a malformed value.
sweep::PlanRequest plan_request(const RunFlags& flags);

}  // namespace app
