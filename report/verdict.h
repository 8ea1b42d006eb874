// The automatic equivariance verdict (docs/protocol.md §10).
//
// A verdict rests on five pairs of one optimizer, identical but for copy 2:
// the gauge twin it judges, the identity twin, the round-trip twin (every
// rotation of gauge-all applied and undone: copy 1 off only by the gauge's
// own rounding, in copy 1's basis), and the noise twins at 1e-7 and 1e-5
// (the paper's triplet and its sensitivity records). Two measurements: the
// gauge twin's logit drift against the round trip's at every checkpoint
// from the first step the rule moved the parameters to the last (the
// separation), and the commutation check (twins/commutation.h) against the
// round trip's own at each of the first steps after the move. A rule that
// amplifies every perturbation amplifies both twins alike; a rule that sees
// the basis separates the gauge twin at the step it starts to. The rules,
// in order:
//   0. failed: the rule raised while a twin trained (a record of status
//      "failed": the census); nothing was measured;
//   1. invalid (nondeterministic): the identity twin is non-zero anywhere
//      (a drift at any checkpoint, a final per-head drift, a commutation
//      error);
//   2. undetermined (diverged): the identity twin diverged, or the gauge or
//      round-trip twin diverged before there is a separation to read;
//   3. did not move: copy 1's parameters never changed in the run;
//   4. basis-dependent: the separation exceeds kSeparation and so does the
//      commutation ratio (where measured);
//   5. undetermined (drift and commutation disagree): one of the two
//      exceeds kSeparation and the other does not;
//   6. unresolved in float32 / float64: neither exceeds it, but the round
//      trip's drift at the first moving checkpoint is already above
//      kResolution: the rule turns its own rounding into a jump that large
//      at its first update, so a basis dependence that size would not show
//      (a finer precision decides);
//   7. equivariant otherwise, "(chaotic)" when the round trip's drift ends
//      above kChaoticFinalDrift: the rule grows its own rounding to that
//      size, and the gauge twin with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/registry.h"
#include "twins/result.h"

namespace report {

constexpr double kSeparation = 10;           // above: basis-dependent
constexpr double kResolution = 1e-4;         // round trip at onset above
constexpr double kChaoticFinalDrift = 1e-2;  // round trip's final drift above
// The floor of the commutation ratio's denominator, in unit roundoffs: an
// update computed in another basis rounds differently everywhere, and the
// equivariant rules measure 27 to 537 unit roundoffs of it in both
// precisions (docs/protocol.md §10), while the round trip, which changes
// few weights and no basis, can commute to far less.
constexpr double kUpdateRounding = 1000;
// And a second term, in unit roundoffs over the update's size relative to
// the weights: each weight stores its update rounded to about half a unit
// roundoff of the weight, independently in the two bases, about 0.8 u ||W||
// in all (docs/protocol.md §10), which for a small update (a small rate)
// exceeds the update's own rounding. 1: that bound, rounded up; the census
// measures 0.085 to 0.26 of it (only W_Q and W_K are stored in two bases),
// so with the 10x threshold an equivariant rule stays 38x clear of it, and
// a larger constant would hide float32 basis dependences a few times the
// storage rounding.
constexpr double kStorageRounding = 1;
// The sensitivity records (not the verdict): the largest gauge / noise-1e-5
// ratio at checkpoints 1..kEarlyLastStep (the verdict's line before the
// round trip), and the paper's tracking of the 1e-7 noise twin past
// kChaoticPastStep.
constexpr int64_t kEarlyLastStep = 10;
constexpr int64_t kChaoticPastStep = 100;

enum class VerdictClass {
  kEquivariant,
  kBasisDependent,
  kInvalid,
  kUndetermined,
  kFailed,
  kDidNotMove,
  kUnresolved,
};

struct Verdict {
  std::string opt;
  // The gauge twin judged: the QK gauge (the paper's), gauge-vo, gauge-all
  // or gauge-full; one verdict per symmetry tested.
  twins::TwinKind gauge = twins::TwinKind::kGauge;
  VerdictClass verdict = VerdictClass::kUndetermined;
  bool chaotic = false;     // equivariant, its own rounding grown past 1e-2
  bool disagree = false;    // kUndetermined: separation vs commutation
  bool diverged = false;    // a twin diverged (or failed): named in note
  std::string dtype;        // the pairs' ("float32", "float64")
  double identity_max = 0;  // largest identity-twin figure anywhere
  // The first step copy 1's parameters changed (the commutation check's;
  // the first checkpoint whose validation loss moved where a record has no
  // check), and the first checkpoint at or after it: the onset.
  int64_t moved_at = -1;
  int64_t onset_step = -1;
  // The separation: the largest gauge / round-trip logit drift ratio at
  // the checkpoints from the onset on (the round trip's drift floored at
  // the dtype's unit roundoff), where, and the two drifts there.
  double separation = 0;
  int64_t separation_step = -1;
  double gauge_at = 0;
  double roundtrip_at = 0;
  double gauge_step0 = 0;      // both twins' rounding at step 0
  double roundtrip_step0 = 0;
  double roundtrip_onset = 0;  // the round trip at the onset: the resolution
  // The commutation check: the largest ratio of the gauge twin's error to
  // the round trip's (floored at kUpdateRounding unit roundoffs, plus
  // kStorageRounding over the update's relative size where measured) over
  // the steps measured, where, and the two errors and the floor there.
  bool commutation_measured = false;
  double commutation_ratio = 0;
  int64_t commutation_step = -1;
  double commutation_gauge = 0;
  double commutation_roundtrip = 0;
  double commutation_floor = 0;  // at commutation_step (report/verdict.h)
  double gauge_final = 0;      // gauge twin, final drift (NaN if diverged)
  double roundtrip_final = 0;  // round trip, final drift
  // Sensitivity records: the 1e-5 noise twin (the paper's onset ratio at
  // step 1, and at the onset), its largest ratio to step 10, and the 1e-7
  // twin's final drift and tracking past step 100.
  double gauge_step1 = 0;
  double noise_step1 = 0;
  double onset_ratio_step1 = 0;
  double gauge_onset = 0;
  double noise_onset = 0;
  double onset_ratio = 0;
  double early_ratio = 0;
  int64_t early_step = -1;
  double noise_final = 0;
  double track_decades = 0;
  std::string note;   // e.g. "gauge diverged at step 40"
  std::string error;  // kFailed: the rule's error, one line
};

// "equivariant", "equivariant (chaotic)", "basis-dependent",
// "invalid (nondeterministic)", "undetermined (diverged)", "undetermined
// (drift and commutation disagree)", "did not move", "unresolved in
// float32", "failed (the rule raised)".
std::string verdict_label(const Verdict& verdict);

// Whether the measured class is the predicted one (a chaotic equivariant
// verdict is equivariant).
bool as_predicted(const Verdict& verdict, optim::Equivariance predicted);

// The rules above on the five records of one optimizer (any order). Throws
// when a twin is missing or present twice.
Verdict judge(const std::vector<twins::PairResult>& records);

// Groups records by optimizer (first-seen order) and judges each group that
// is complete: one verdict per gauge twin it holds (gauge, gauge-vo,
// gauge-all, gauge-full), each with the group's identity, round-trip and
// two noise twins. `pending` (when given) gets the optimizers whose records are not
// all there yet, with how many there are.
std::vector<Verdict> judge_all(
    const std::vector<twins::PairResult>& results,
    std::vector<std::pair<std::string, size_t>>* pending = nullptr);

// The optimizer, and the gauge twin's kind where it is not the QK gauge:
// "adam", "adam gauge-vo".
std::string verdict_name(const Verdict& verdict);

// One line: name, verdict, what decided it (the step, the two drifts, the
// commutation errors), the sensitivity record.
std::string format_verdict_line(const Verdict& verdict);

// "238x", "0.014x", "1.2e+13x", "inf", "nan".
std::string format_ratio(double v);

}  // namespace report
