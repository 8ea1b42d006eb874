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

std::string decades(double v) {
  return std::isnan(v) ? "-" : fmt::format("{:.2f}", v);
}

}  // namespace

std::string format_ratio(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return "inf";
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
      return "undetermined (diverged)";
    case VerdictClass::kFailed:
      return "failed (the rule raised)";
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

// The four records a verdict rests on.
struct Four {
  const PairResult* gauge = nullptr;
  const PairResult* identity = nullptr;
  const PairResult* noise = nullptr;  // 1e-7: the paper's triplet
  const PairResult* onset = nullptr;  // 1e-5: the onset ratio's reference
};

// Sorts one optimizer's records into their four places; throws for a
// mixed optimizer, an unexpected noise scale, or a twin missing or twice.
Four sort_twins(const std::vector<PairResult>& records) {
  TORCH_CHECK(!records.empty(), "verdict: no records");
  const std::string& opt = records.front().spec.opt;
  Four f;
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
  TORCH_CHECK(f.gauge && f.identity && f.noise && f.onset, "verdict: '", opt,
              "' needs gauge, identity, noise 1e-7 and noise 1e-5 twins; "
              "missing ",
              !f.gauge      ? "gauge"
              : !f.identity ? "identity"
              : !f.noise    ? "noise 1e-7"
                            : "noise 1e-5");
  return f;
}

// The largest gauge / noise-1e-5 ratio at checkpoints 1..kEarlyLastStep
// into v.early_ratio, and where into v.early_step.
void measure_early_ratio(const Four& f, Verdict& verdict) {
  verdict.early_ratio = kNaN;
  for (const auto& c : f.gauge->curve) {
    if (c.step < 1 || c.step > kEarlyLastStep)
      continue;
    const double ratio = c.logit_drift / twins::drift_at(*f.onset, c.step);
    if (std::isnan(ratio))
      continue;
    if (std::isnan(verdict.early_ratio) || ratio > verdict.early_ratio) {
      verdict.early_ratio = ratio;
      verdict.early_step = c.step;
    }
  }
}

// Every figure the rules read, and a note on each twin that diverged.
Verdict measure(const Four& f) {
  Verdict v;
  v.opt = f.gauge->spec.opt;
  v.gauge = f.gauge->spec.twin;
  v.identity_max = twins::largest_drift(*f.identity);
  v.gauge_step1 = twins::drift_at(*f.gauge, 1);
  v.noise_step1 = twins::drift_at(*f.onset, 1);
  v.onset_ratio_step1 = v.gauge_step1 / v.noise_step1;
  // Copy 1 is the same in all four pairs: the gauge pair's tells when the
  // rule first moved the parameters.
  v.onset_step = twins::first_moving_step(*f.gauge);
  v.gauge_onset = twins::drift_at(*f.gauge, v.onset_step);
  v.noise_onset = twins::drift_at(*f.onset, v.onset_step);
  v.onset_ratio = v.gauge_onset / v.noise_onset;
  measure_early_ratio(f, v);
  v.gauge_final = twins::final_drift(*f.gauge);
  v.noise_final = twins::final_drift(*f.noise);
  v.track_decades = twins::tracking(*f.gauge, *f.noise);
  for (const auto& [twin, r] :
       {std::pair<const char*, const PairResult*>{"gauge", f.gauge},
        {"identity", f.identity},
        {"noise 1e-7", f.noise},
        {"noise 1e-5", f.onset}}) {
    const std::string n = diverged_note(twin, *r);
    if (!n.empty())
      v.note += (v.note.empty() ? "" : "; ") + n;
    if (r->status == twins::PairStatus::kFailed && v.error.empty())
      v.error = r->error;
  }
  if (!f.gauge->spec.twin_is_symmetry()) {
    v.note += fmt::format("{}not a symmetry: step-0 drift {}",
                          v.note.empty() ? "" : "; ",
                          twins::format_drift(twins::drift_at(*f.gauge, 0)));
  }
  return v;
}

// The rules of report/verdict.h, in order, on the measured figures.
void classify(Verdict& verdict) {
  // A NaN identity drift is an identity twin that diverged: a cause for
  // "undetermined", not evidence of nondeterminism.
  if (!verdict.error.empty()) {
    verdict.verdict = VerdictClass::kFailed;
  } else if (!std::isnan(verdict.identity_max) && verdict.identity_max != 0) {
    verdict.verdict = VerdictClass::kInvalid;
  } else if (std::isnan(verdict.identity_max) || verdict.onset_step < 0 ||
             std::isnan(verdict.onset_ratio)) {
    verdict.verdict = VerdictClass::kUndetermined;
  } else if (verdict.early_ratio > kOnsetRatioThreshold) {
    verdict.verdict = VerdictClass::kBasisDependent;
  } else {
    verdict.verdict = VerdictClass::kEquivariant;
    verdict.chaotic = verdict.gauge_final > kChaoticFinalDrift &&
                      verdict.track_decades <= kChaoticTrackDecades;
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
    // One verdict per gauge twin (per symmetry tested), each on the three
    // twins they share: identity, noise 1e-7 and noise 1e-5.
    std::vector<PairResult> shared, gauges;
    for (const PairResult& r : groups[opt])
      (twins::is_gauge(r.spec.twin) ? gauges : shared).push_back(r);
    if (shared.size() != 3 || gauges.empty()) {  // judge() needs all four
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

std::string format_verdict_line(const Verdict& verdict) {
  std::string line = fmt::format(
      "{:<13} {:<26} onset {:>6} at step {} (gauge {} / noise1e-5 {}); "
      "largest ratio to step {}: {}; final: gauge {}, noise1e-7 {}, {} dec "
      "apart past step {}; identity {}",
      verdict_name(verdict), verdict_label(verdict),
      format_ratio(verdict.onset_ratio), verdict.onset_step,
      twins::format_drift(verdict.gauge_onset),
      twins::format_drift(verdict.noise_onset), kEarlyLastStep,
      format_ratio(verdict.early_ratio),
      twins::format_drift(verdict.gauge_final),
      twins::format_drift(verdict.noise_final), decades(verdict.track_decades),
      kChaoticPastStep, twins::format_drift(verdict.identity_max));
  if (!verdict.note.empty())
    line += " [" + verdict.note + "]";
  return line;
}

}  // namespace report
