#include "report/verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace report {

using twins::PairResult;
using twins::TwinKind;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool same_scale(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
}

std::string diverged_note(const char* twin, const PairResult& r) {
  return r.ok() ? "" : fmt::format("{} {}", twin, twins::status_text(r));
}

}  // namespace

std::string format_ratio(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return "inf";
  if (v >= 1e5)  // the float64 separations: 1.2e+13x, not 14 digits
    return fmt::format("{:.2g}x", v);
  return v >= 10 ? fmt::format("{:.0f}x", v) : fmt::format("{:.2g}x", v);
}

std::string verdict_label(const Verdict& verdict) {
  switch (verdict.verdict) {
    case VerdictClass::kEquivariant:
      return verdict.chaotic ? "equivariant (chaotic)" : "equivariant";
    case VerdictClass::kBasisDependent:
      return "basis-dependent";
    case VerdictClass::kInvalid:
      return "invalid (nondeterministic)";
    case VerdictClass::kUndetermined:
      return verdict.disagree ? "undetermined (drift and commutation disagree)"
                              : "undetermined (diverged)";
    case VerdictClass::kFailed:
      return "failed (the rule raised)";
    case VerdictClass::kDidNotMove:
      return "did not move";
    case VerdictClass::kUnresolved:
      return "unresolved in " + verdict.dtype;
  }
  return "?";
}

bool as_predicted(const Verdict& verdict, optim::Equivariance predicted) {
  return (verdict.verdict == VerdictClass::kEquivariant &&
          predicted == optim::Equivariance::kEquivariant) ||
         (verdict.verdict == VerdictClass::kBasisDependent &&
          predicted == optim::Equivariance::kBasisDependent);
}

namespace {

// The five records a verdict rests on.
struct Five {
  const PairResult* gauge = nullptr;
  const PairResult* identity = nullptr;
  const PairResult* roundtrip = nullptr;  // the yardstick
  const PairResult* noise = nullptr;      // 1e-7: the paper's triplet
  const PairResult* onset = nullptr;      // 1e-5: the sensitivity record
};

// Sorts one optimizer's records into their five places; throws for a
// mixed optimizer, an unexpected noise scale, or a twin missing or twice.
Five sort_twins(const std::vector<PairResult>& records) {
  TORCH_CHECK(!records.empty(), "verdict: no records");
  const std::string& opt = records.front().spec.opt;
  Five f;
  for (const auto& r : records) {
    TORCH_CHECK(r.spec.opt == opt, "verdict: records of '", opt, "' and '",
                r.spec.opt, "' mixed");
    const PairResult** slot = nullptr;
    const char* what = "";
    switch (r.spec.twin) {
      case TwinKind::kGauge:
      case TwinKind::kGaugeVo:
      case TwinKind::kGaugeAll:
      case TwinKind::kGaugeFull:
        slot = &f.gauge, what = "gauge";
        break;
      case TwinKind::kIdentity:
        slot = &f.identity, what = "identity";
        break;
      case TwinKind::kRoundTrip:
        slot = &f.roundtrip, what = "round-trip";
        break;
      case TwinKind::kNoise:
        if (same_scale(r.spec.noise_scale, twins::kTripletNoiseScale)) {
          slot = &f.noise, what = "noise 1e-7";
        } else if (same_scale(r.spec.noise_scale, twins::kOnsetNoiseScale)) {
          slot = &f.onset, what = "noise 1e-5";
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
  TORCH_CHECK(f.gauge && f.identity && f.roundtrip && f.noise && f.onset,
              "verdict: '", opt,
              "' needs gauge, identity, round-trip, noise 1e-7 and noise "
              "1e-5 twins; missing ",
              !f.gauge       ? "gauge"
              : !f.identity  ? "identity"
              : !f.roundtrip ? "round-trip"
              : !f.noise     ? "noise 1e-7"
                             : "noise 1e-5");
  return f;
}

// The unit roundoff of the pairs' dtype: the floor of a ratio's
// denominator (a round trip that rounds back exactly is no perturbation,
// not an infinitely fine yardstick).
double unit_roundoff(const twins::PairSpec& spec) {
  return spec.dtype == torch::kDouble ? std::ldexp(1.0, -53)
                                      : std::ldexp(1.0, -24);
}

// Keeps the largest of a series of ratios in `largest` (NaN before the
// first): whether `ratio` is the new largest. A NaN ratio is skipped.
bool new_largest(double ratio, double& largest) {
  if (std::isnan(ratio) || (!std::isnan(largest) && !(ratio > largest)))
    return false;
  largest = ratio;
  return true;
}

// The largest gauge / noise-1e-5 ratio at checkpoints 1..kEarlyLastStep.
void measure_early_ratio(const Five& f, Verdict& verdict) {
  verdict.early_ratio = kNaN;
  for (const auto& c : f.gauge->curve) {
    if (c.step < 1 || c.step > kEarlyLastStep)
      continue;
    const double ratio = c.logit_drift / twins::drift_at(*f.onset, c.step);
    if (new_largest(ratio, verdict.early_ratio))
      verdict.early_step = c.step;
  }
}

// Where the rule first moved the parameters, and the onset checkpoint.
void measure_onset(const Five& f, Verdict& v) {
  const twins::Commutation& c = f.gauge->commutation;
  v.commutation_measured =
      c.measured && f.roundtrip->commutation.measured;
  if (v.commutation_measured) {
    v.moved_at = c.moved_at;
    v.onset_step = -1;
    for (const auto& point : f.gauge->curve) {
      if (c.moved_at > 0 && point.step >= c.moved_at) {
        v.onset_step = point.step;
        break;
      }
    }
  } else {
    // Copy 1 is the same in every pair: the gauge pair's tells.
    v.onset_step = twins::first_moving_step(*f.gauge);
    v.moved_at = v.onset_step;
  }
}

// The separation: gauge / round trip at every checkpoint from the onset on.
void measure_separation(const Five& f, double floor, Verdict& v) {
  v.separation = kNaN;
  v.roundtrip_onset = twins::drift_at(*f.roundtrip, v.onset_step);
  for (const auto& point : f.gauge->curve) {
    if (v.onset_step < 0 || point.step < v.onset_step)
      continue;
    const double rt = twins::drift_at(*f.roundtrip, point.step);
    const double ratio = point.logit_drift / std::max(rt, floor);
    if (new_largest(ratio, v.separation)) {
      v.separation_step = point.step;
      v.gauge_at = point.logit_drift;
      v.roundtrip_at = rt;
    }
  }
}

// The floor of step k's commutation ratio, for unit roundoff u: the
// update's own rounding, kUpdateRounding u, and its rounding in the
// weights' storage, kStorageRounding u / (its size relative to the
// weights) where the record measured the size.
double commutation_floor(const twins::Commutation& c, size_t k, double u) {
  double floor = kUpdateRounding * u;
  if (k < c.sizes.size() && c.sizes[k] > 0)
    floor += kStorageRounding * u / c.sizes[k];
  return floor;
}

// The commutation ratio: gauge error / round trip's, step by step.
void measure_commutation(const Five& f, double u, Verdict& v) {
  v.commutation_ratio = kNaN;
  v.commutation_floor = kUpdateRounding * u;
  if (!v.commutation_measured)
    return;
  const auto& g = f.gauge->commutation;
  const auto& r = f.roundtrip->commutation;
  const size_t n = std::min(g.errors.size(), r.errors.size());
  for (size_t k = 0; k < n; ++k) {
    const double floor = commutation_floor(g, k, u);
    const double ratio = g.errors[k] / std::max(r.errors[k], floor);
    if (new_largest(ratio, v.commutation_ratio)) {
      v.commutation_step = g.moved_at + static_cast<int64_t>(k);
      v.commutation_gauge = g.errors[k];
      v.commutation_roundtrip = r.errors[k];
      v.commutation_floor = floor;
    }
  }
}

// Every figure the rules read, and a note on each twin that diverged.
Verdict measure(const Five& f) {
  Verdict v;
  v.opt = f.gauge->spec.opt;
  v.gauge = f.gauge->spec.twin;
  v.dtype = twins::dtype_name(f.gauge->spec.dtype);
  const double floor = unit_roundoff(f.gauge->spec);
  v.identity_max = twins::largest_drift(*f.identity);
  // Its commutation errors too; a NaN anywhere stays NaN (diverged).
  if (!f.identity->commutation.errors.empty()) {
    const double c = f.identity->commutation.largest();
    v.identity_max = std::isnan(c) || std::isnan(v.identity_max)
                         ? kNaN
                         : std::max(v.identity_max, c);
  }
  measure_onset(f, v);
  measure_separation(f, floor, v);
  measure_commutation(f, floor, v);
  v.gauge_step0 = twins::drift_at(*f.gauge, 0);
  v.roundtrip_step0 = twins::drift_at(*f.roundtrip, 0);
  v.gauge_final = twins::final_drift(*f.gauge);
  v.roundtrip_final = twins::final_drift(*f.roundtrip);
  // The sensitivity records.
  v.gauge_step1 = twins::drift_at(*f.gauge, 1);
  v.noise_step1 = twins::drift_at(*f.onset, 1);
  v.onset_ratio_step1 = v.gauge_step1 / v.noise_step1;
  v.gauge_onset = twins::drift_at(*f.gauge, v.onset_step);
  v.noise_onset = twins::drift_at(*f.onset, v.onset_step);
  v.onset_ratio = v.gauge_onset / v.noise_onset;
  measure_early_ratio(f, v);
  v.noise_final = twins::final_drift(*f.noise);
  v.track_decades = twins::tracking(*f.gauge, *f.noise);
  for (const auto& [twin, r] :
       {std::pair<const char*, const PairResult*>{"gauge", f.gauge},
        {"identity", f.identity},
        {"round trip", f.roundtrip},
        {"noise 1e-7", f.noise},
        {"noise 1e-5", f.onset}}) {
    const std::string n = diverged_note(twin, *r);
    if (!n.empty())
      v.note += (v.note.empty() ? "" : "; ") + n;
    v.diverged = v.diverged || !r->ok();
    if (r->status == twins::PairStatus::kFailed && v.error.empty())
      v.error = r->error;
  }
  if (!v.commutation_measured) {
    v.note += std::string(v.note.empty() ? "" : "; ") +
              "commutation not measured (a record written before it)";
  }
  if (!f.gauge->spec.twin_is_symmetry()) {
    v.note += fmt::format("{}not a symmetry: step-0 drift {}",
                          v.note.empty() ? "" : "; ",
                          twins::format_drift(v.gauge_step0));
  }
  return v;
}

// The rules of report/verdict.h, in order, on the measured figures.
void classify(Verdict& v) {
  const bool separated = v.separation > kSeparation;
  const bool commutes_not =
      v.commutation_measured && v.commutation_ratio > kSeparation;
  // A NaN identity figure is an identity twin that diverged: a cause for
  // "undetermined", not evidence of nondeterminism.
  if (!v.error.empty()) {
    v.verdict = VerdictClass::kFailed;
  } else if (!std::isnan(v.identity_max) && v.identity_max != 0) {
    v.verdict = VerdictClass::kInvalid;
  } else if (std::isnan(v.identity_max)) {
    v.verdict = VerdictClass::kUndetermined;
  } else if (v.moved_at < 0 && !v.diverged) {
    v.verdict = VerdictClass::kDidNotMove;
  } else if (v.onset_step < 0 || std::isnan(v.separation) ||
             (v.commutation_measured && std::isnan(v.commutation_ratio))) {
    v.verdict = VerdictClass::kUndetermined;
  } else if (separated && (commutes_not || !v.commutation_measured)) {
    v.verdict = VerdictClass::kBasisDependent;
  } else if (separated || commutes_not) {
    v.verdict = VerdictClass::kUndetermined;
    v.disagree = true;
  } else if (v.roundtrip_onset > kResolution) {
    v.verdict = VerdictClass::kUnresolved;
  } else {
    v.verdict = VerdictClass::kEquivariant;
    v.chaotic = v.roundtrip_final > kChaoticFinalDrift;
  }
}

}  // namespace

Verdict judge(const std::vector<PairResult>& records) {
  Verdict v = measure(sort_twins(records));
  classify(v);
  return v;
}

std::vector<Verdict> judge_all(
    const std::vector<PairResult>& results,
    std::vector<std::pair<std::string, size_t>>* pending) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<PairResult>> groups;
  for (const auto& r : results) {
    if (!groups.count(r.spec.opt))
      order.push_back(r.spec.opt);
    groups[r.spec.opt].push_back(r);
  }
  std::vector<Verdict> out;
  for (const auto& opt : order) {
    // One verdict per gauge twin (per symmetry tested), each on the four
    // twins they share: identity, round trip, noise 1e-7 and noise 1e-5.
    std::vector<PairResult> shared, gauges;
    for (const PairResult& r : groups[opt])
      (twins::is_gauge(r.spec.twin) ? gauges : shared).push_back(r);
    if (shared.size() != 4 || gauges.empty()) {  // judge() needs all five
      if (pending)
        pending->emplace_back(opt, groups[opt].size());
      continue;
    }
    for (const PairResult& gauge : gauges) {
      std::vector<PairResult> four = shared;
      four.push_back(gauge);
      out.push_back(judge(four));
    }
  }
  return out;
}

std::string verdict_name(const Verdict& verdict) {
  return verdict.gauge == TwinKind::kGauge
             ? verdict.opt
             : verdict.opt + " " + twins::to_string(verdict.gauge);
}

std::string format_verdict_line(const Verdict& v) {
  std::string line =
      fmt::format("{:<13} {:<26}", verdict_name(v), verdict_label(v));
  if (v.verdict == VerdictClass::kFailed) {
    line += " " + v.error;
  } else if (v.verdict == VerdictClass::kDidNotMove) {
    line += " copy 1's parameters never changed";
  } else if (v.onset_step >= 0) {
    line += fmt::format(
        " moved at step {}; separation {} at step {} (gauge {} / round trip "
        "{}; round trip at onset {})",
        v.moved_at, format_ratio(v.separation), v.separation_step,
        twins::format_drift(v.gauge_at), twins::format_drift(v.roundtrip_at),
        twins::format_drift(v.roundtrip_onset));
    if (v.commutation_measured) {
      line += fmt::format(
          "; commutation {} at step {} ({} / round trip {}, floor {})",
          format_ratio(v.commutation_ratio), v.commutation_step,
          twins::format_drift(v.commutation_gauge),
          twins::format_drift(v.commutation_roundtrip),
          twins::format_drift(v.commutation_floor));
    }
    line += fmt::format("; final: gauge {}, round trip {}",
                        twins::format_drift(v.gauge_final),
                        twins::format_drift(v.roundtrip_final));
  }
  line += fmt::format("; identity {}; sensitivity: {} the 1e-5 twin at step 1",
                      twins::format_drift(v.identity_max),
                      format_ratio(v.onset_ratio_step1));
  if (!v.note.empty())
    line += " [" + v.note + "]";
  return line;
}

}  // namespace report
