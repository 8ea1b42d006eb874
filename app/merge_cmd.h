// `twin-run merge`: head merging (docs/protocol.md §9). Trains pairs and
// measures, at each --merge-at step, the loss barrier between the two copies
// naive and after the per-head Procrustes alignment; or, with --models,
// measures pairs saved by --save-models without training them again.
#pragma once

#include <CLI/CLI.hpp>

#include "sweep/command.h"

namespace app {

struct MergeFlags {
  // The pairs (the default command's flags and --merge-at), or with
  // --models the directory of saved pairs.
  sweep::CommandRequest request{sweep::CommandKind::kMerge};
  std::string opt_args;  // --opt-args
  bool plot = false;  // also draw the loss along lambda
};

CLI::App* setup_merge(CLI::App& parent, MergeFlags& flags);
int run_merge(const MergeFlags& flags);

}  // namespace app
