// Plain-text summaries of a run: the Table-3-shaped drift table every run
// prints, and the Adam-p dial's points with their text chart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "twins/result.h"

namespace report {

// Drift at steps 0 / 1 / 100 / last per pair (the paper's Table 3 layout),
// with the final QK drift, both copies' validation accuracy (mod) or loss
// (char-LM) and the status. "-" where the pair did not reach a step.
std::string format_drift_table(const std::vector<twins::PairResult>& results);

// The Adam-p dial (docs/protocol.md §5): one point per adam-p gauge pair.
struct DialPoint {
  double p = 0;
  uint64_t init_seed = 0;
  double step0 = 0, step1 = 0, step100 = 0, final = 0;  // logit drift
  double qk_final = 0;  // mean final QK drift over heads
};

// One point per adam-p gauge record, sorted by p (then init seed); other
// records are skipped.
std::vector<DialPoint> dial_points(
    const std::vector<twins::PairResult>& results);

// A text chart of log10 drift against p: '1' step 1, 'F' final, '0' the
// step-0 float floor, '*' where two marks fall on one cell.
std::string format_dial_plot(const std::vector<DialPoint>& points);

}  // namespace report
