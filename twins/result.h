// What one pair produced, and the one vocabulary every report reads it
// with: the drift at a step, the final drift, the log-ratio of two curves
// around step 100 (the paper's chaos metric is its mean, the verdict's
// tracking its maximum), the largest drift anywhere, the step at which a
// rule first moved the parameters. Defined once here; the summaries, the
// aggregates, the verdict, the plots and the progress lines all call these.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "twins/environment.h"
#include "twins/merge.h"
#include "twins/metrics.h"
#include "twins/spec.h"

namespace twins {

enum class PairStatus {
  kOk,        // trained through every step
  kDiverged,  // stopped at the first non-finite training loss
  // The rule raised while its group trained (a Python rule's error): a
  // record of what could not be measured, written only where a run keeps
  // going past a rule's error (sweep::EngineOptions::record_failures, the
  // census); its curve is empty and `error` says why.
  kFailed,
};
const char* to_string(PairStatus status);  // "ok", "diverged", "failed"
// Throws naming the value for anything else.
PairStatus parse_pair_status(const std::string& text);

struct PairResult {
  PairSpec spec;
  std::vector<CurvePoint> curve;       // one per checkpoint, step 0 first
  std::vector<double> qk_per_head;     // final, layer-major
  std::vector<double> vo_per_head;     // final; twins that rotate W_V / W_O
  std::array<double, 2> val_acc{};     // final, copy 1 / copy 2
  std::array<double, 2> val_loss{};    // final
  std::array<double, 2> train_loss{};  // loss of the last training step
  PairStatus status = PairStatus::kOk;
  int64_t diverged_step = -1;      // first step with a non-finite loss
  std::string error;               // kFailed: the error's one line
  std::vector<MergePoint> merges;  // head merging at spec.merge_at (§9)
  Commutation commutation;         // the update against G(copy 1's) (§6)
  double wall_s = 0;               // seconds from its group's start to its end
  int group_pairs = 1;             // pairs that shared its copy 1's training
  std::string torch_version;
  NumericEnv numeric_env;          // unknown for a record without one

  bool ok() const { return status == PairStatus::kOk; }
};

// The record of a pair whose group raised `error` (status kFailed, no
// curve), with this build's torch version and numeric environment.
PairResult failed_result(const PairSpec& spec, const std::string& error);

// How a pair ended, for a summary: "ok", "diverged at step N", "failed:
// <error>".
std::string status_text(const PairResult& result);

// The logit drift at checkpoint `step`; NaN when the curve has none.
double drift_at(const PairResult& result, int64_t step);

// The drift at the end of training (step spec.steps); NaN for a pair that
// did not get there (diverged).
double final_drift(const PairResult& result);

// The mean over heads of the final QK drift.
double final_qk_drift(const PairResult& result);

// The largest |drift| anywhere in the record: logit and QK drift at every
// checkpoint and the final per-head QK drift. A NaN is returned as NaN (it
// counts as non-zero). What an identity twin must keep at exactly 0.
double largest_drift(const PairResult& result);

// |log10((gauge + floor) / (noise + floor))| at every checkpoint from step
// `from` on that both curves have with finite drifts: how far a gauge twin
// is from its noise twin, in decades (0 where the two are equal).
std::vector<double> decades_apart(const PairResult& gauge,
                                  const PairResult& noise, int64_t from,
                                  double floor);

// The paper's chaos metric (docs/protocol.md §6): the mean of decades_apart
// from step 100 on, with the paper's floor 1e-12; NaN when there is no such
// checkpoint.
double chaos_metric(const PairResult& gauge, const PairResult& noise);

// The verdict's tracking (docs/protocol.md §10): the maximum of
// decades_apart past step 100, with no floor; NaN when there is no such
// checkpoint.
double tracking(const PairResult& gauge, const PairResult& noise);

// The first checkpoint after step 0 at which copy 1's validation loss
// differs from step 0's: where the rule first moved the parameters (step 1
// for most rules; later for a rule that skips its first update). -1 when
// none does.
int64_t first_moving_step(const PairResult& result);

// A drift in a progress line or a plain-text table: "0" for exact zero,
// "nan", else two significant digits in e-notation ("3.9e-03").
std::string format_drift(double v);

}  // namespace twins
