// `twin-run table`: run one of the named job sets (resumable, parallel,
// shardable) and aggregate it; or aggregate results files alone; or list
// the tables with their cost.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "app/flags.h"

namespace app {

struct TableFlags {
  std::string name;                    // table3, multiseed, table9-...
  bool list = false;                   // print the tables and exit
  std::vector<std::string> aggregate;  // results files to aggregate only
  EngineFlags engine;                  // --out, --jobs, --threads, ...
  std::string shard;  // I/N: this machine's part of the job list
  int64_t steps = 0;  // overrides for a quick look (0 / empty: paper's)
  std::string device;
  std::string dtype;
  bool plot = false;  // also draw the figures
};

// Adds the `table` subcommand to `parent`, bound to `flags`.
CLI::App* setup_table(CLI::App& parent, TableFlags& flags);
int run_table(const TableFlags& flags);

}  // namespace app
