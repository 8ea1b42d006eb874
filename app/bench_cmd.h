// `twin-run bench`: the speed benchmark (bench/bench.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "bench/bench.h"

namespace app {

struct BenchFlags {
  bench::BenchOptions options;  // --rows parsed into options.rows
  std::string out;  // JSON file; empty: runs/bench-<date>-<time>.json
  bool kernels = false;  // the per-shape kernel table instead of the rows
};

CLI::App* setup_bench(CLI::App& app, BenchFlags& flags);
int run_bench(const BenchFlags& flags);

}  // namespace app
