// `twin-run verdict`: for each optimizer the diagnostic triplet (gauge,
// identity, noise 1e-7) plus a 1e-5 noise twin, and one verdict line each
// (report/verdict.h has the rules).
#pragma once

#include <CLI/CLI.hpp>

#include "sweep/command.h"

namespace app {

struct VerdictFlags {
  sweep::CommandRequest request{sweep::CommandKind::kVerdict};
  std::string opt_args;  // --opt-args
};

// Adds the `verdict` subcommand to `parent`, bound to `flags`.
CLI::App* setup_verdict(CLI::App& parent, VerdictFlags& flags);
int run_verdict(const VerdictFlags& flags);

}  // namespace app
