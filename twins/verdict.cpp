#include "twins/verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "optim/registry.h"
#include "twins/report.h"

namespace twins {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool same_scale(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
}

// The logit drift at checkpoint `step`, NaN when the curve has none.
double drift_at(const PairResult& r, int64_t step) {
  for (const auto& c : r.curve) {
    if (c.step == step)
      return c.logit_drift;
  }
  return kNaN;
}

double last_drift(const PairResult& r) {
  return r.curve.empty() ? kNaN : r.curve.back().logit_drift;
}

// Largest drift of an identity twin anywhere; NaN counts as non-zero.
double identity_max(const PairResult& r) {
  double worst = 0;
  auto take = [&](double v) {
    if (std::isnan(v) || std::abs(v) > worst) {
      worst = std::isnan(v) ? v : std::abs(v);
    }
  };
  for (const auto& c : r.curve) {
    if (std::isnan(worst))
      break;
    take(c.logit_drift);
    take(c.qk_drift_max);
  }
  for (double v : r.qk_per_head) {
    if (!std::isnan(worst))
      take(v);
  }
  return worst;
}

// max over common checkpoints after kChaoticPastStep of |log10(a / b)|.
double track_decades(const PairResult& gauge, const PairResult& noise) {
  double worst = kNaN;
  for (const auto& c : gauge.curve) {
    if (c.step <= kChaoticPastStep)
      continue;
    const double other = drift_at(noise, c.step);
    if (std::isnan(other))
      continue;
    double d = std::abs(std::log10(c.logit_drift / other));
    if (std::isnan(d))
      d = std::numeric_limits<double>::infinity();  // 0 / 0
    worst = std::isnan(worst) ? d : std::max(worst, d);
  }
  return worst;
}

std::string diverged_note(const char* twin, const PairResult& r) {
  return r.status == "ok"
             ? ""
             : fmt::format("{} diverged at step {}", twin, r.diverged_step);
}

// A drift figure: "0", "nan" or 2 significant digits.
std::string fig(double v) {
  return format_drift(v);
}

std::string ratio(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return "inf";
  return v >= 10 ? fmt::format("{:.0f}x", v) : fmt::format("{:.2g}x", v);
}

std::string decades(double v) {
  return std::isnan(v) ? "-" : fmt::format("{:.2f}", v);
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v)
    s += x;
  return v.empty() ? kNaN : s / double(v.size());
}

}  // namespace

// ---------------------------------------------------------------------------
// Verdict

std::vector<PairSpec> verdict_specs(PlanRequest r) {
  TORCH_CHECK(!r.opts.empty(), "verdict: no optimizer given (--opt)");
  TORCH_CHECK(r.init_seeds.size() == 1,
              "verdict: one init seed per verdict, got ", r.init_seeds.size());
  r.twins = {"gauge", "identity", "noise"};
  r.twin_seeds.clear();
  r.noise_scales = {kVerdictNoiseScale, kOnsetNoiseScale};
  std::vector<PairSpec> specs = expand(r);
  std::vector<std::string> seen;
  for (const auto& s : specs) {
    if (s.twin != TwinKind::kGauge)
      continue;
    TORCH_CHECK(std::find(seen.begin(), seen.end(), s.opt) == seen.end(),
                "verdict: optimizer '", s.opt, "' is listed twice");
    seen.push_back(s.opt);
  }
  return specs;
}

std::string verdict_label(const Verdict& v) {
  switch (v.verdict) {
    case VerdictClass::kEquivariant:
      return v.chaotic ? "equivariant (chaotic)" : "equivariant";
    case VerdictClass::kBasisDependent:
      return "basis-dependent";
    case VerdictClass::kInvalid:
      return "invalid (nondeterministic)";
    case VerdictClass::kUndetermined:
      return "undetermined (diverged)";
  }
  return "?";
}

Verdict judge(const std::vector<PairResult>& records) {
  TORCH_CHECK(!records.empty(), "verdict: no records");
  const std::string& opt = records.front().spec.opt;
  const PairResult *gauge = nullptr, *identity = nullptr, *noise = nullptr,
                   *onset = nullptr;
  for (const auto& r : records) {
    TORCH_CHECK(r.spec.opt == opt, "verdict: records of '", opt, "' and '",
                r.spec.opt, "' mixed");
    const PairResult** slot = nullptr;
    const char* what = "";
    switch (r.spec.twin) {
      case TwinKind::kGauge:
        slot = &gauge, what = "gauge";
        break;
      case TwinKind::kIdentity:
        slot = &identity, what = "identity";
        break;
      case TwinKind::kNoise:
        if (same_scale(r.spec.noise_scale, kVerdictNoiseScale)) {
          slot = &noise, what = "noise 1e-7";
        } else if (same_scale(r.spec.noise_scale, kOnsetNoiseScale)) {
          slot = &onset, what = "noise 1e-5";
        } else {
          TORCH_CHECK(false, "verdict: '", opt, "' has a noise twin at ",
                      r.spec.noise_scale, " (expected 1e-7 and 1e-5)");
        }
        break;
    }
    TORCH_CHECK(*slot == nullptr, "verdict: '", opt, "' has two ", what,
                " twins");
    *slot = &r;
  }
  TORCH_CHECK(gauge && identity && noise && onset, "verdict: '", opt,
              "' needs gauge, identity, noise 1e-7 and noise 1e-5 twins; "
              "missing ",
              !gauge      ? "gauge"
              : !identity ? "identity"
              : !noise    ? "noise 1e-7"
                          : "noise 1e-5");

  Verdict v;
  v.opt = opt;
  v.identity_max = identity_max(*identity);
  v.gauge_step1 = drift_at(*gauge, 1);
  v.onset_noise_step1 = drift_at(*onset, 1);
  v.onset_ratio = v.gauge_step1 / v.onset_noise_step1;
  v.gauge_final = last_drift(*gauge);
  v.noise_final = last_drift(*noise);
  v.track_decades = track_decades(*gauge, *noise);
  for (const auto& [twin, r] :
       {std::pair<const char*, const PairResult*>{"gauge", gauge},
        {"identity", identity},
        {"noise 1e-7", noise},
        {"noise 1e-5", onset}}) {
    const std::string n = diverged_note(twin, *r);
    if (!n.empty())
      v.note += (v.note.empty() ? "" : "; ") + n;
  }

  if (v.identity_max != 0) {
    v.verdict = VerdictClass::kInvalid;
  } else if (std::isnan(v.gauge_step1) || std::isnan(v.onset_noise_step1)) {
    v.verdict = VerdictClass::kUndetermined;
  } else if (v.gauge_step1 > kOnsetRatioThreshold * v.onset_noise_step1) {
    v.verdict = VerdictClass::kBasisDependent;
  } else {
    v.verdict = VerdictClass::kEquivariant;
    v.chaotic = v.gauge_final > kChaoticFinalDrift &&
                v.track_decades <= kChaoticTrackDecades;
  }
  return v;
}

std::vector<Verdict> judge_all(const std::vector<PairResult>& results) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<PairResult>> groups;
  for (const auto& r : results) {
    if (!groups.count(r.spec.opt))
      order.push_back(r.spec.opt);
    groups[r.spec.opt].push_back(r);
  }
  std::vector<Verdict> out;
  for (const auto& opt : order)
    out.push_back(judge(groups[opt]));
  return out;
}

std::string format_verdict_line(const Verdict& v) {
  std::string line = fmt::format(
      "{:<12} {:<26} onset {:>5} (step 1: gauge {} / noise1e-5 {}); final: "
      "gauge {}, noise1e-7 {}, {} dec apart past step {}; identity {}",
      v.opt, verdict_label(v), ratio(v.onset_ratio), fig(v.gauge_step1),
      fig(v.onset_noise_step1), fig(v.gauge_final), fig(v.noise_final),
      decades(v.track_decades), kChaoticPastStep, fig(v.identity_max));
  if (!v.note.empty())
    line += " [" + v.note + "]";
  return line;
}

// ---------------------------------------------------------------------------
// Zoo

std::vector<std::string> zoo_optimizers() {
  return {"adam",   "sgd",  "scalar-adam", "muon",    "rmsprop",
          "signum", "lion", "adafactor",   "shampoo", "adam-p0.5"};
}

std::vector<PairSpec> zoo_specs(const PlanRequest& base) {
  PlanRequest r = base;
  r.opts = zoo_optimizers();
  r.adam_ps.clear();
  return verdict_specs(r);
}

std::string format_zoo_table(const std::vector<PairResult>& results) {
  if (results.empty())
    return "no pairs\n";
  std::string out = fmt::format(
      "{:<12} {:<16} {:<26} {:<5} {:>8} {:>9} {:>6} {:>9} {:>9} {:>6} {:>8}\n",
      "optimizer", "predicted", "measured", "match", "gauge@1", "noise5@1",
      "onset", "gauge end", "noise end", "track", "identity");
  int agree = 0, total = 0;
  std::string notes;
  for (const auto& v : judge_all(results)) {
    const optim::Equivariance predicted =
        optim::find_optimizer(v.opt).predicted;
    const bool match = (v.verdict == VerdictClass::kEquivariant &&
                        predicted == optim::Equivariance::kEquivariant) ||
                       (v.verdict == VerdictClass::kBasisDependent &&
                        predicted == optim::Equivariance::kBasisDependent);
    agree += match;
    ++total;
    out += fmt::format(
        "{:<12} {:<16} {:<26} {:<5} {:>8} {:>9} {:>6} {:>9} {:>9} {:>6} "
        "{:>8}\n",
        v.opt, optim::to_string(predicted), verdict_label(v),
        match ? "yes" : "NO", fig(v.gauge_step1), fig(v.onset_noise_step1),
        ratio(v.onset_ratio), fig(v.gauge_final), fig(v.noise_final),
        decades(v.track_decades), fig(v.identity_max));
    if (!v.note.empty())
      notes += fmt::format("  {}: {}\n", v.opt, v.note);
  }
  const PairSpec& s = results.front().spec;
  out += fmt::format(
      "{}/{} verdicts as predicted. {} {}, {} steps, init seed {}; onset = "
      "gauge@1 / noise5@1 (basis-dependent above {:g}x); noise end = the "
      "1e-7 noise twin; track = max |log10(gauge / noise)| past step {} "
      "(chaotic when gauge end > {:g} and track <= {:g}).\n",
      agree, total, s.task, dtype_name(s.dtype), s.steps, s.init_seed,
      kOnsetRatioThreshold, kChaoticPastStep, kChaoticFinalDrift,
      kChaoticTrackDecades);
  if (!notes.empty())
    out += "notes:\n" + notes;
  return out;
}

// ---------------------------------------------------------------------------
// Dial

std::vector<double> dial_exponents() {
  return {0, 0.125, 0.25, 0.5, 0.75, 1};
}

std::vector<PairSpec> dial_specs(const PlanRequest& base) {
  PlanRequest r = base;
  r.opts = {"adam-p"};
  if (r.adam_ps.empty())
    r.adam_ps = dial_exponents();
  r.twins = {"gauge"};
  return expand(r);
}

std::vector<DialPoint> dial_points(const std::vector<PairResult>& results) {
  std::vector<DialPoint> out;
  for (const auto& r : results) {
    if (r.spec.twin != TwinKind::kGauge)
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
    d.step0 = drift_at(r, 0);
    d.step1 = drift_at(r, 1);
    d.step100 = drift_at(r, 100);
    d.final = last_drift(r);
    d.qk_final = mean(r.qk_per_head);
    out.push_back(d);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const DialPoint& a, const DialPoint& b) {
                     return a.p != b.p ? a.p < b.p : a.init_seed < b.init_seed;
                   });
  return out;
}

std::string format_dial_table(const std::vector<PairResult>& results) {
  const std::vector<DialPoint> points = dial_points(results);
  if (points.empty())
    return "no adam-p gauge pairs\n";
  std::vector<double> lrs;
  for (const auto& r : results) {
    if (std::find(lrs.begin(), lrs.end(), r.spec.lr) == lrs.end()) {
      lrs.push_back(r.spec.lr);
    }
  }
  const PairSpec& s = results.front().spec;
  std::string out =
      fmt::format("Adam-p dial: gauge twins, {} {}, {} steps, lr {}\n", s.task,
                  dtype_name(s.dtype), s.steps,
                  lrs.size() == 1 ? fmt::format("{:g} for every p", lrs[0])
                                  : std::string("per p"));
  out += fmt::format("{:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8}\n", "p", "init",
                     "step 0", "step 1", "step 100", "final", "QK final");
  for (const auto& d : points) {
    out += fmt::format("{:>6g} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8}\n", d.p,
                       d.init_seed, fig(d.step0), fig(d.step1), fig(d.step100),
                       fig(d.final), fig(d.qk_final));
  }
  return out;
}

std::string format_dial_plot(const std::vector<PairResult>& results) {
  const std::vector<DialPoint> points = dial_points(results);
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

}  // namespace twins
