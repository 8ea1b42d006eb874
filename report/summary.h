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
// Then one warning line per identity twin that is not exactly 0
// (identity_warnings).
std::string format_drift_table(const std::vector<twins::PairResult>& results);

// One line per identity twin whose copies came apart: the protocol's
// identity twin is exactly 0 (docs/protocol.md §2), so a drift there means
// the rule is not the same function in both copies (state kept outside
// its optimizer, a draw outside its random stream) and the pair's other
// twins do not measure the gauge alone. Empty when every one is 0.
std::vector<std::string> identity_warnings(
    const std::vector<twins::PairResult>& results);

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
