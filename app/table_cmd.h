// `twin-run table`: run one of the named job sets (resumable, parallel,
// shardable) and aggregate it; or aggregate results files alone; or list
// the tables with their cost.
#pragma once

#include <CLI/CLI.hpp>

#include "sweep/command.h"

namespace app {

struct TableFlags {
  // The table (name, overrides for a quick look, shard), or the results
  // files of --aggregate; --out, --jobs, --threads, ...
  sweep::CommandRequest request{sweep::CommandKind::kTable};
  bool list = false;  // print the tables and exit
  bool plot = false;  // also draw the figures
};

// Adds the `table` subcommand to `parent`, bound to `flags`.
CLI::App* setup_table(CLI::App& parent, TableFlags& flags);
int run_table(const TableFlags& flags);

}  // namespace app
