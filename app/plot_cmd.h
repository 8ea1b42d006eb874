// `twin-run plot`: the paper's Figure 2 (and the per-head QK drift) from
// results files, through gnuplot.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace app {

struct PlotFlags {
  std::vector<std::string> files;  // JSONL results (several are merged)
  std::string out;                 // OUT.svg or OUT.png; empty: FILE.svg
  bool allow_mixed_env = false;    // --allow-mixed-env
};

CLI::App* setup_plot(CLI::App& parent, PlotFlags& flags);
int run_plot(const PlotFlags& flags);

}  // namespace app
