// `twin-run merge`: head merging (docs/protocol.md §9). Trains pairs and
// measures, at each --merge-at step, the loss barrier between the two copies
// naive and after the per-head Procrustes alignment; or, with --models,
// measures pairs saved by --save-models without training them again.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "app/run_cmd.h"

namespace app {

struct MergeFlags {
  RunFlags run;          // the pairs: the default command's flags
  std::string merge_at;  // comma-separated steps; empty: 1, 100, last
  std::string models;    // a directory of saved pairs: measure those
  bool plot = false;     // also draw the loss along lambda
};

CLI::App* setup_merge(CLI::App& parent, MergeFlags& flags);
int run_merge(const MergeFlags& flags);

}  // namespace app
