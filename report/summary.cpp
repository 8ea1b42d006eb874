#include "report/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "optim/registry.h"

namespace report {

using twins::PairResult;

namespace {

std::string cell(const PairResult& r, int64_t step) {
  // "-": no checkpoint at this step (past the run's end, or a saved pair
  // measured at one step only); "nan": a checkpoint whose drift is not
  // finite.
  const bool measured =
      std::any_of(r.curve.begin(), r.curve.end(),
                  [&](const twins::CurvePoint& c) { return c.step == step; });
  return measured ? twins::format_drift(twins::drift_at(r, step)) : "-";
}

}  // namespace

std::string format_drift_table(const std::vector<PairResult>& results) {
  if (results.empty())
    return "no pairs\n";
  const bool lm = results.front().spec.is_charlm();
  std::string out = fmt::format(
      "{:<12} {:<14} {:>5} {:>5} {:>8} {:>8} {:>8} {:>8}  {:>8}  {:<15} {}\n",
      "optimizer", "twin", "init", "seed", "step 0", "step 1", "step 100",
      "last", "QK last", lm ? "val loss 1 / 2" : "val acc 1 / 2", "status");
  for (const auto& r : results) {
    const twins::PairSpec& s = r.spec;
    const auto& val = lm ? r.val_loss : r.val_acc;
    const int64_t last = r.curve.empty() ? 0 : r.curve.back().step;
    out += fmt::format(
        "{:<12} {:<14} {:>5} {:>5} {:>8} {:>8} {:>8} {:>8}  {:>8}  "
        "{:<15} {}\n",
        s.opt, twins::twin_label(s), s.init_seed,
        s.uses_twin_seed() ? std::to_string(s.twin_seed) : "-", cell(r, 0),
        cell(r, 1), cell(r, 100), cell(r, last),
        twins::format_drift(twins::final_qk_drift(r)),
        fmt::format("{:.4f} / {:.4f}", val[0], val[1]),
        twins::status_text(r));
  }
  for (const std::string& warning : identity_warnings(results))
    out += "warning: " + warning + "\n";
  return out;
}

std::vector<std::string> identity_warnings(
    const std::vector<PairResult>& results) {
  std::vector<std::string> out;
  for (const auto& r : results) {
    if (r.spec.twin != twins::TwinKind::kIdentity)
      continue;
    const auto apart = std::find_if(
        r.curve.begin(), r.curve.end(), [](const twins::CurvePoint& c) {
          return c.logit_drift > 0 || c.qk_drift_max > 0;
        });
    if (apart == r.curve.end())
      continue;
    out.push_back(fmt::format(
        "the identity twin of {} is {} at step {}, not exactly 0: its two "
        "copies did not compute the same (a rule's state kept outside its "
        "optimizer, or a draw outside its random stream), so its other twins "
        "do not measure the gauge alone",
        twins::pair_label(r.spec), twins::format_drift(apart->logit_drift),
        apart->step));
  }
  return out;
}

std::vector<DialPoint> dial_points(const std::vector<PairResult>& results) {
  std::vector<DialPoint> out;
  for (const auto& r : results) {
    if (r.spec.twin != twins::TwinKind::kGauge)
      continue;
    std::optional<double> p;
    try {
      p = optim::adam_p_exponent(r.spec.opt);
    } catch (const c10::Error&) {
    }
    if (!p)
      continue;
    DialPoint d;
    d.p = *p;
    d.init_seed = r.spec.init_seed;
    d.step0 = twins::drift_at(r, 0);
    d.step1 = twins::drift_at(r, 1);
    d.step100 = twins::drift_at(r, 100);
    d.final = twins::final_drift(r);
    d.qk_final = twins::final_qk_drift(r);
    out.push_back(d);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const DialPoint& a, const DialPoint& b) {
                     return a.p != b.p ? a.p < b.p : a.init_seed < b.init_seed;
                   });
  return out;
}

std::string format_dial_plot(const std::vector<DialPoint>& points) {
  double lo = 100, hi = -100;  // decades spanned
  for (const auto& d : points) {
    for (const auto& [v, c] : {std::pair<double, char>{d.step0, '0'},
                               {d.step1, '1'},
                               {d.final, 'F'}}) {
      if (!(v > 0) || !std::isfinite(v))
        continue;
      const double l = std::log10(v);
      lo = std::min(lo, std::floor(l));
      hi = std::max(hi, std::ceil(l));
    }
  }
  if (points.empty() || hi < lo)
    return "no adam-p gauge drift to plot\n";
  constexpr int kWidth = 61;  // columns for p in [0, 1]
  constexpr int kRowsPerDecade = 2;
  const int rows = int(hi - lo) * kRowsPerDecade + 1;
  std::vector<std::string> grid(rows, std::string(kWidth, ' '));
  auto put = [&](double p, double v, char c) {
    if (!(v > 0) || !std::isfinite(v))
      return;
    const int col = int(std::lround(p * (kWidth - 1)));
    const int row = int(std::lround((hi - std::log10(v)) * kRowsPerDecade));
    char& cell = grid[std::clamp(row, 0, rows - 1)][col];
    cell = cell == ' ' || cell == c ? c : '*';
  };
  for (const auto& d : points) {
    put(d.p, d.step0, '0');
    put(d.p, d.step1, '1');
    put(d.p, d.final, 'F');
  }
  std::string out =
      "log10 logit drift of the gauge twin against p ('1' step 1, 'F' "
      "final, '0' step 0 = float floor, '*' overlap)\n";
  for (int i = 0; i < rows; ++i) {
    const double level = hi - double(i) / kRowsPerDecade + 0.0;  // no -0
    const std::string label = i % kRowsPerDecade == 0
                                  ? fmt::format("1e{:+03.0f}", level)
                                  : std::string();
    out += fmt::format("{:>6} |{}\n", label, grid[i]);
  }
  out += fmt::format("{:>6} +{}\n", "", std::string(kWidth, '-'));
  out += fmt::format("{:>6}  {:<30}{:>31}\n", "", "p = 0", "p = 1");
  return out;
}

}  // namespace report
