// The automatic equivariance verdict (issue 6) and the two tables built on
// it: the optimizer zoo and the Adam-p dial.
//
// A verdict rests on four pairs of one optimizer, identical but for copy 2:
// the paper's diagnostic triplet (gauge, identity, noise 1e-7; PROTOCOL §2)
// plus a noise twin at 1e-5, the reference of the onset ratio (PROTOCOL §6).
// The rules, in order:
//   1. invalid (nondeterministic): the identity twin is non-zero (logit or
//      QK drift, any checkpoint, or a final per-head QK drift);
//   2. basis-dependent: gauge drift at step 1 > 10 x the 1e-5 noise twin's
//      drift at step 1 (onset ratio > 10; Adam's is 39-158x in the paper);
//   3. otherwise equivariant, qualified "(chaotic)" when the gauge twin
//      ends above 1e-2 while tracking its 1e-7 noise twin within 0.3 decades
//      at every checkpoint past step 100 (the paper's Muon case).
// A pair set whose gauge or 1e-5 noise twin has no step-1 checkpoint
// (diverged at step 1) is "undetermined (diverged)".
//
// Hook-up for `twin-run table zoo|dial` (twins/tables.*): the job list of a
// table is zoo_specs(base) / dial_specs(base), where `base` carries the
// table command's flags (task, steps, dtype, threads do not matter here);
// run them in any order or shard, then print format_zoo_table(results) /
// format_dial_table(results) (and format_dial_plot(results) for --plot,
// or plot dial_points(results) with the plot machinery). The formatters
// take the records in any order and need only the pairs of their own list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "twins/pair.h"
#include "twins/plan.h"

namespace twins {

constexpr double kVerdictNoiseScale = 1e-7;   // the triplet's noise twin
constexpr double kOnsetNoiseScale = 1e-5;     // reference of the onset ratio
constexpr double kOnsetRatioThreshold = 10;   // above: basis-dependent
constexpr double kChaoticFinalDrift = 1e-2;   // chaos needs a final drift above
constexpr double kChaoticTrackDecades = 0.3;  // |log10(gauge / noise)| within
constexpr int64_t kChaoticPastStep = 100;     // at checkpoints after this step

// ---------------------------------------------------------------------------
// Verdict

// Per optimizer of request.opts (adam-p resolved as by expand(): a bare
// adam-p once per --p), in this order: gauge, identity, noise 1e-7, noise
// 1e-5. Every other setting comes from `request`; its twins, twin seeds and
// noise scales are replaced (default seeds: gauge 777, noise 888). Throws
// for an empty optimizer list, an optimizer named twice, more than one init
// seed, or anything expand() rejects.
std::vector<PairSpec> verdict_specs(PlanRequest request);

enum class VerdictClass {
  kEquivariant,
  kBasisDependent,
  kInvalid,
  kUndetermined
};

struct Verdict {
  std::string opt;
  VerdictClass verdict = VerdictClass::kUndetermined;
  bool chaotic = false;          // equivariant and tracking its noise twin
  double identity_max = 0;       // largest identity-twin drift anywhere
  double gauge_step1 = 0;        // gauge twin logit drift at step 1
  double onset_noise_step1 = 0;  // 1e-5 noise twin logit drift at step 1
  double onset_ratio = 0;        // gauge_step1 / onset_noise_step1
  double gauge_final = 0;        // gauge twin, last checkpoint
  double noise_final = 0;        // 1e-7 noise twin, last checkpoint
  // max over checkpoints past step 100 of |log10(gauge / noise 1e-7)|; NaN
  // when there is none (a run of <= 100 steps).
  double track_decades = 0;
  std::string note;  // e.g. "gauge diverged at step 40"
};

// "equivariant", "equivariant (chaotic)", "basis-dependent",
// "invalid (nondeterministic)", "undetermined (diverged)".
std::string verdict_label(const Verdict& v);

// The rules above on the four records of one optimizer (any order). Throws
// when a twin is missing or present twice.
Verdict judge(const std::vector<PairResult>& records);

// Groups records by optimizer (first-seen order) and judges each group.
std::vector<Verdict> judge_all(const std::vector<PairResult>& results);

// One line: name, verdict, the figures it rests on.
std::string format_verdict_line(const Verdict& v);

// ---------------------------------------------------------------------------
// `twin-run table zoo`: the verdict for ten optimizers, mod47 float32 by
// default, predicted class (the registry's) next to the measured verdict.

// adam, sgd, scalar-adam, muon, rmsprop, signum, lion, adafactor, shampoo,
// adam-p0.5.
std::vector<std::string> zoo_optimizers();

// verdict_specs of zoo_optimizers() on `base` (its opts and adam_ps are
// replaced): 40 pairs.
std::vector<PairSpec> zoo_specs(const PlanRequest& base = {});

// One row per optimizer: predicted, measured, whether they agree, the
// figures; then a count of agreements.
std::string format_zoo_table(const std::vector<PairResult>& results);

// ---------------------------------------------------------------------------
// `twin-run table dial`: gauge twins of adam-p over p, one learning rate for
// every p (adam-p's default, 1e-3, unless base.lr is set).

// {0, 0.125, 0.25, 0.5, 0.75, 1}.
std::vector<double> dial_exponents();

// Gauge twins of adam-p at every p of base.adam_ps (dial_exponents() when
// empty), with the other settings of `base` (its opts and twins replaced).
std::vector<PairSpec> dial_specs(const PlanRequest& base = {});

struct DialPoint {
  double p = 0;
  uint64_t init_seed = 0;
  double step0 = 0, step1 = 0, step100 = 0, final = 0;  // logit drift
  double qk_final = 0;  // mean final QK drift over heads
};

// One point per adam-p gauge record, sorted by p (then init seed); other
// records are skipped.
std::vector<DialPoint> dial_points(const std::vector<PairResult>& results);

// p against step-0 / step-1 / step-100 / final drift, sorted by p.
std::string format_dial_table(const std::vector<PairResult>& results);

// A text chart of log10 drift against p: '1' step 1, 'F' final, '0' the
// step-0 float floor.
std::string format_dial_plot(const std::vector<PairResult>& results);

}  // namespace twins
