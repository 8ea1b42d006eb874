// The automatic equivariance verdict (docs/protocol.md §10).
//
// A verdict rests on four pairs of one optimizer, identical but for copy 2:
// the paper's diagnostic triplet (gauge, identity, noise 1e-7) plus a noise
// twin at 1e-5, the reference of the onset ratio. The rules, in order:
//   1. invalid (nondeterministic): the identity twin is non-zero anywhere
//      (logit or QK drift at any checkpoint, or a final per-head QK drift);
//   0. failed: the rule raised while a twin trained (a record of status
//      "failed", written only where a run keeps going past a rule's error:
//      the census); nothing was measured;
//   2. undetermined (diverged): the rule never moved the parameters before
//      a twin diverged, so there is no onset to compare;
//   3. basis-dependent: at some checkpoint from step 1 to step 10 the gauge
//      twin's drift exceeds 10x the 1e-5 noise twin's. The onset is taken
//      at the first step where the rule moved the parameters: most rules
//      move them at step 1 (the paper's onset, kept as onset_step1), but a
//      rule may skip its first update (SOAP builds its bases first), and a
//      sign mask that is all ones while momentum equals the gradient makes
//      step 1 plain SGD (cautious SGD), so looking only at step 1 would
//      call both equivariant;
//   4. otherwise equivariant, qualified "(chaotic)" when the gauge twin
//      ends above 1e-2 while tracking its 1e-7 noise twin within 0.3
//      decades at every checkpoint from step 100 on (the paper's Muon case).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/registry.h"
#include "twins/result.h"

namespace report {

constexpr double kOnsetRatioThreshold = 10;   // above: basis-dependent
constexpr int64_t kEarlyLastStep = 10;        // checkpoints 1..10 count
constexpr double kChaoticFinalDrift = 1e-2;   // chaos needs a final drift above
constexpr double kChaoticTrackDecades = 0.3;  // |log10(gauge / noise)| within
constexpr int64_t kChaoticPastStep = 100;     // at checkpoints after this step

enum class VerdictClass {
  kEquivariant,
  kBasisDependent,
  kInvalid,
  kUndetermined,
  kFailed
};

struct Verdict {
  std::string opt;
  // The gauge twin judged: the QK gauge (the paper's), gauge-vo, gauge-all
  // or gauge-full; one verdict per symmetry tested.
  twins::TwinKind gauge = twins::TwinKind::kGauge;
  VerdictClass verdict = VerdictClass::kUndetermined;
  bool chaotic = false;     // equivariant and tracking its noise twin
  double identity_max = 0;  // largest identity-twin drift anywhere
  int64_t onset_step = -1;  // first step the rule moved the parameters
  double gauge_onset = 0;   // gauge twin logit drift at onset_step
  double noise_onset = 0;   // 1e-5 noise twin logit drift there
  double onset_ratio = 0;   // gauge_onset / noise_onset
  double gauge_step1 = 0;   // the paper's onset: step 1
  double noise_step1 = 0;
  double onset_ratio_step1 = 0;
  // The largest gauge / noise-1e-5 ratio at checkpoints 1..10, and where.
  double early_ratio = 0;
  int64_t early_step = -1;
  double gauge_final = 0;    // gauge twin, final drift (NaN if diverged)
  double noise_final = 0;    // 1e-7 noise twin, final drift
  double track_decades = 0;  // twins::tracking(gauge, noise 1e-7)
  std::string note;          // e.g. "gauge diverged at step 40"
  std::string error;         // kFailed: the rule's error, one line
};

// "equivariant", "equivariant (chaotic)", "basis-dependent",
// "invalid (nondeterministic)", "undetermined (diverged)".
std::string verdict_label(const Verdict& verdict);

// Whether the measured class is the predicted one (a chaotic equivariant
// verdict is equivariant).
bool as_predicted(const Verdict& verdict, optim::Equivariance predicted);

// The rules above on the four records of one optimizer (any order). Throws
// when a twin is missing or present twice.
Verdict judge(const std::vector<twins::PairResult>& records);

// Groups records by optimizer (first-seen order) and judges each group that
// is complete: one verdict per gauge twin it holds (gauge, gauge-vo,
// gauge-all, gauge-full), each with the group's identity and two noise
// twins. `pending` (when given) gets the optimizers whose records are not
// all there yet, with how many there are.
std::vector<Verdict> judge_all(
    const std::vector<twins::PairResult>& results,
    std::vector<std::pair<std::string, size_t>>* pending = nullptr);

// The optimizer, and the gauge twin's kind where it is not the QK gauge:
// "adam", "adam gauge-vo".
std::string verdict_name(const Verdict& verdict);

// One line: name, verdict, the figures it rests on.
std::string format_verdict_line(const Verdict& verdict);

// "238x", "0.014x", "inf", "nan".
std::string format_ratio(double v);

}  // namespace report
