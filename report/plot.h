// The paper's Figure 2 from results: relative logit drift against step on
// log axes, one colour per optimizer, solid for gauge twins, dotted for
// noise twins (identity twins, exactly 0, are named in the legend); and the
// final per-head QK drift (layers x heads) per optimizer. Written as gnuplot
// data + script, drawn by gnuplot when it is on PATH.
#pragma once

#include <string>
#include <vector>

#include "report/aggregate.h"  // Inputs
#include "twins/census_rule.h"
#include "twins/result.h"

namespace report {

struct PlotFiles {
  std::string drift_figure;  // OUT.svg / OUT.png: Figure 2
  std::string qk_figure;     // OUT-qk.svg / .png: per-head QK drift
  std::string script;        // OUT.gp (draws both)
  std::string drift_data;    // OUT-drift.dat
  std::string qk_data;       // OUT-qk.dat
  bool drawn = false;        // gnuplot ran and wrote both figures
  std::string message;       // why not, in one line, when !drawn
};

// Writes the data and script for `results` next to `out` (which must end
// in .svg or .png) and runs gnuplot on them. Throws for an unknown
// extension, no plottable pair, an unwritable file, or gnuplot failing on
// the script (naming its first error line); a missing gnuplot is not an
// error: drawn = false and `message` says what to run.
PlotFiles plot_results(const std::vector<twins::PairResult>& results,
                       const std::string& out, const std::string& title);

// The dial figure: the Adam-p gauge twins' logit drift (step 1, step
// 100, final, and step 0 = the float floor) against p, log y. Writes OUT.gp
// and OUT.dat beside `out` (.svg / .png) and draws it like plot_results
// (qk_figure / qk_data stay empty). Throws when no adam-p gauge pair is
// among `results`.
PlotFiles plot_dial(const std::vector<twins::PairResult>& results,
                    const std::string& out, const std::string& title);

// Head merging (docs/protocol.md §9): the validation loss along lambda at
// each pair's last merge step, one panel per optimizer, a colour per twin,
// the naive path dashed and the aligned one solid. Writes OUT.gp and
// OUT.dat beside `out` and draws it like plot_results. Throws when no
// record has merge measurements.
PlotFiles plot_merge(const std::vector<twins::PairResult>& results,
                     const std::string& out, const std::string& title);

// The census (docs/results.md): every judged rule's separation (the
// verdict's gauge / round trip, in the records' dtype) on a log axis, one
// column per measured verdict, coloured by the class predicted, one point
// type per library, the rules measured in the other class than predicted
// named, the verdict's threshold (10x) as a line; the rules and their
// predictions are `census`'s rows (report/census.h, census_points). Writes
// OUT.gp and OUT.dat beside `out` and draws it like plot_results. Throws
// when no rule is judged.
PlotFiles plot_census(const std::vector<twins::PairResult>& results,
                      const std::vector<twins::CensusRule>& census,
                      const std::string& out, const std::string& title);

// One drawing a layout makes with --plot (report/layouts.cpp): `draw` at
// <stem><suffix>, then one line naming its figure(s) and what they show.
struct Plot {
  const char* suffix;  // ".svg", "-dial.svg"
  PlotFiles (*draw)(const Inputs& in, const std::string& out,
                    const std::string& title);
  const char* caption;     // of drift_figure: "Figure 2"
  const char* qk_caption;  // of qk_figure; null when it draws none
};
extern const Plot kDriftPlot;  // plot_results: Figure 2, per-head QK drift
extern const Plot kDialPlot;   // plot_dial
extern const Plot kMergePlot;  // plot_merge
extern const Plot kCensusPlot;  // plot_census

// The full path of `program` on PATH, or "" when there is none.
std::string find_on_path(const std::string& program);

}  // namespace report
