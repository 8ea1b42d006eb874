// The default command: run a list of twin pairs (the Table-3 set unless
// --opt / --twin say otherwise) and print the Table-3-shaped summary.
#pragma once

#include <CLI/CLI.hpp>

#include "sweep/command.h"

namespace app {

struct RunFlags {
  sweep::CommandRequest request;  // kind kRun
  std::string opt_args;           // --opt-args
  bool list_optimizers = false;
};

void setup_run(CLI::App& app, RunFlags& flags);
int run_run(const RunFlags& flags);

}  // namespace app
