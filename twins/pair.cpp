#include "twins/pair.h"

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "twins/commutation.h"
#include "twins/environment.h"
#include "twins/merge.h"

namespace twins {

namespace {

// Losses are read back (a host synchronisation on CUDA) only at measurement
// steps and every kSyncEvery steps, to catch a non-finite loss early.
constexpr int64_t kSyncEvery = 50;

using Clock = std::chrono::steady_clock;

// A measurement no finite pair of models gives: the drifts and losses are
// finite for any weights whose norms fit the float range.
bool overflowed(const CurvePoint& point) {
  for (double value :
       {point.logit_drift, point.qk_drift_mean, point.qk_drift_max,
        point.val_loss[0], point.val_loss[1]}) {
    if (!std::isfinite(value))
      return true;
  }
  return false;
}

// One group's run through its measurement steps, phase by phase: start
// (resumed from its checkpoint, or measured at step 0), then segments of
// training, each followed by the divergence check and, at a measurement
// step, the measurements; finally the pairs still live end.
class GroupRun {
 public:
  GroupRun(const std::vector<PairSpec>& specs, const GroupOptions& options)
      : start_(Clock::now()),
        options_(options),
        checkpoint_(options.checkpoint),
        group_(specs, options.threads),
        watch_(group_),
        results_(specs.size()),
        gauges_(specs.size()),
        merge_at_(specs.front().merge_at),
        steps_(specs.front().last_step()),
        measurement_steps_(checkpoint_steps(specs.front().steps, merge_at_,
                                            specs.front().stop_after)) {
    for (size_t i = 0; i < specs.size(); ++i) {
      results_[i].spec = specs[i];
      results_[i].torch_version = TORCH_VERSION;
      results_[i].numeric_env = numeric_env(specs[i].device);
      results_[i].group_pairs = static_cast<int>(specs.size());
      results_[i].commutation.measured = true;
      // What a twin's merge aligns, and the rotations that made it
      // (docs/protocol.md §9).
      if (!merge_at_.empty())
        gauges_[i] = twin_gauge(specs[i]);
    }
  }

  std::vector<PairResult> run() {
    start();
    while (group_.done() < steps_ && any_live()) {
      train_segment();
      end_diverged();
      if (!any_live())
        break;
      if (group_.done() == measurement_steps_[next_])
        measure();
    }
    for (size_t i = 0; i < group_.twins(); ++i) {
      if (group_.live(i))
        finish(i, results_[i].curve.back());
    }
    checkpoint_.discard();  // every pair is recorded
    return std::move(results_);
  }

 private:
  // Resumed from the checkpoint, or measured at step 0 when that is a
  // measurement step.
  void start() {
    if (const auto resumed =
            checkpoint_.resume(group_, results_, measurement_steps_)) {
      next_ = resumed->next_measurement;
      resumed_s_ = resumed->elapsed_s;
    } else if (measurement_steps_[next_] == 0) {
      measure();
    }
    checkpoint_.count_from(group_.done());
  }

  // Segments end at measurement steps and every kSyncEvery steps; the
  // losses are read back (and checked) only there. With a checkpoint the
  // segment is trained step by step, the checkpoint asked before each step:
  // the state between two steps of a segment, or at its start (after the
  // previous segment's checks and measurements), is all a resumed group
  // needs to run the same segments, checks and measurements as a group run
  // straight through.
  //
  // While the commutation check watches (from step 1 until copy 1 has
  // moved and every live twin has its errors), the segment is trained step
  // by step too, the watch around each step; the same operations run
  // either way.
  void train_segment() {
    const int64_t sync = (group_.done() / kSyncEvery + 1) * kSyncEvery;
    const int64_t end = std::min(sync, measurement_steps_[next_]);
    if (!checkpoint_.enabled() && !watch_.watching(results_)) {
      group_.train_to(end, options_.progress);
      return;
    }
    while (group_.done() < end) {
      if (checkpoint_.enabled())
        checkpoint_.between_steps(group_, results_, {next_, seconds()});
      if (!watch_.watching(results_)) {
        group_.train_to(group_.done() + 1, options_.progress);
        continue;
      }
      watch_.before_step();
      group_.train_to(group_.done() + 1, options_.progress);
      watch_.after_step(results_);
    }
  }

  double seconds() const {
    return resumed_s_ +
           std::chrono::duration<double>(Clock::now() - start_).count();
  }

  // A pair whose copy 1 or copy 2 has a non-finite loss ends here.
  void end_diverged() {
    const std::vector<int64_t> bad = group_.check_losses();
    for (size_t i = 0; i < bad.size(); ++i) {
      if (bad[i] < 0)
        continue;
      results_[i].status = PairStatus::kDiverged;
      results_[i].diverged_step = bad[i];
      finish(i, group_.measure(i));  // mostly NaN, recorded as null
    }
  }

  // The measurements of a measurement step, on the weights each rule
  // evaluates with (schedule-free rules swap theirs in and back once, for
  // the whole group: docs/protocol.md §6).
  void measure() {
    group_.to_evaluation();
    measure_all();
    group_.to_training();
    ++next_;
  }

  // Every live twin against the reference (evaluated once), and head
  // merging at the merge steps.
  void measure_all() {
    const Evaluation reference = group_.evaluate_reference();
    const bool merge = std::find(merge_at_.begin(), merge_at_.end(),
                                 group_.done()) != merge_at_.end();
    for (size_t i = 0; i < group_.twins(); ++i) {
      if (!group_.live(i))
        continue;
      const CurvePoint point = group_.measure(i, &reference);
      if (overflowed(point)) {
        // Finite losses from weights past the float range (a learning
        // rate of 1e30): the pair has diverged as surely as with a
        // non-finite loss (docs/output-format.md, `status`).
        results_[i].status = PairStatus::kDiverged;
        results_[i].diverged_step = group_.done();
        finish(i, point);
        continue;
      }
      results_[i].curve.push_back(point);
      if (merge) {
        results_[i].merges.push_back(
            measure_merge(group_.reference(), group_.twin(i), group_.task(),
                          group_.done(), gauges_[i]));
      }
    }
  }

  // The pair's final fields from `last` (its last measurement, or a fresh
  // one after a divergence), then the caller hears of it.
  void finish(size_t twin, const CurvePoint& last) {
    PairResult& result = results_[twin];
    result.val_acc = last.val_acc;
    result.val_loss = last.val_loss;
    const auto& l1 = group_.reference_losses();
    const auto& l2 = group_.twin_losses(twin);
    result.train_loss = {l1.empty() ? std::nan("") : l1.back(),
                         l2.empty() ? std::nan("") : l2.back()};
    result.qk_per_head =
        qk_drift_per_head(group_.reference(), group_.twin(twin));
    if (acts_on_vo(result.spec.twin)) {
      result.vo_per_head =
          vo_drift_per_head(group_.reference(), group_.twin(twin));
    }
    result.wall_s = seconds();
    if (options_.pair_done) {
      options_.pair_done(result, group_.done(), group_.reference(),
                         group_.twin(twin));
    }
    group_.retire(twin);
  }

  bool any_live() const {
    for (size_t i = 0; i < group_.twins(); ++i) {
      if (group_.live(i))
        return true;
    }
    return false;
  }

  const Clock::time_point start_;
  const GroupOptions& options_;
  GroupCheckpoint checkpoint_;
  Lockstep group_;
  CommutationWatch watch_;  // built right after group_ (see its constructor)
  std::vector<PairResult> results_;
  std::vector<MergeGauge> gauges_;
  const std::vector<int64_t> merge_at_;
  const int64_t steps_;
  const std::vector<int64_t> measurement_steps_;
  size_t next_ = 0;  // the next measurement step
  // The seconds the group had run when its checkpoint was written (wall_s
  // goes on from there).
  double resumed_s_ = 0;
};

}  // namespace

std::vector<PairResult> run_group(const std::vector<PairSpec>& specs,
                                  const GroupOptions& options) {
  TORCH_CHECK(!specs.empty(), "Lockstep: no pairs");
  try {
    return GroupRun(specs, options).run();
  } catch (const StartAfresh&) {
    return GroupRun(specs, options).run();  // its file is gone: step 0
  }
}

PairResult run_pair(const PairSpec& spec, const Progress& progress,
                    int threads) {
  GroupOptions options;
  options.threads = threads;
  options.progress = progress;
  return run_group({spec}, options)[0];
}

}  // namespace twins
