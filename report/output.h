// Writing an aggregate where a person finds it: the Markdown on stdout and
// in <stem>.md, the figures as CSV in <stem>.csv, and the figures the
// layout has (gnuplot) beside them.
#pragma once

#include <string>
#include <vector>

#include "report/aggregate.h"

namespace report {

// Writes <stem>.md and <stem>.csv (atomically) and prints the Markdown and
// their names on stdout; with `plot`, draws the figures of the aggregate's
// layout (report/layouts.cpp): <stem>.svg (Figure 2) and <stem>-qk.svg,
// plus <stem>-dial.svg for the dial; for head merging only
// <stem>-merge.svg. A missing gnuplot is one line on stderr.
void write_outputs(const Aggregate& aggregate,
                   const std::vector<twins::PairResult>& results,
                   const std::string& stem, bool plot,
                   const std::string& title);

// Draws Figure 2 and the per-head QK drift of `results` at `out` (.svg or
// .png) and says where, or why not, in one line.
void draw_figures(const std::vector<twins::PairResult>& results,
                  const std::string& out, const std::string& title);

}  // namespace report
