// `twin-run plot`: the paper's Figure 2 (and the per-head QK drift) from
// results files, through gnuplot.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "twins/results.h"

namespace app {

struct PlotFlags {
  std::vector<std::string> files;  // JSONL results (several are merged)
  std::string out;                 // OUT.svg or OUT.png; empty: FILE.svg
};

CLI::App* setup_plot(CLI::App& parent, PlotFlags& flags);
int run_plot(const PlotFlags& flags);

// Shared with `table`: the records of `files` merged (each key once, a
// truncated last line ignored with a note on stderr); throws when a file is
// missing or malformed, or when they hold no record at all.
std::vector<twins::StoredRecord> read_records(
    const std::vector<std::string>& files);

// A title for figures of `records`: the table's, when they name one.
std::string records_title(const std::vector<twins::StoredRecord>& records);

// Draws the figures of `records` at `out`; a missing gnuplot is reported
// in one line on stderr, not as an error.
void draw(const std::vector<twins::StoredRecord>& records,
          const std::string& out);

// The Adam-p dial figure (drift against p) of `records` at `out`, reported
// like draw().
void draw_dial(const std::vector<twins::StoredRecord>& records,
               const std::string& out);

}  // namespace app
