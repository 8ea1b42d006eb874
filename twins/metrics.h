// Drift metrics of docs/protocol.md §6, measured at the checkpoints.
#pragma once

#include <torch/torch.h>

#include <array>
#include <limits>
#include <vector>

#include "data/task.h"
#include "model/transformer.h"

namespace twins {

// ||a - b||_F / (0.5 (||a||_F + ||b||_F) + 1e-12), in float64: the paper's
// relative distance, 1e-12 in the denominator included (docs/protocol.md
// §6); 0 when a and b are equal.
double relative_distance(const torch::Tensor& a, const torch::Tensor& b);

// Per query head (layer-major), the relative distance between P = W_Q,h^T
// W_K,j of the two models (d x d each; j = h's key head), as
// relative_distance measures it.
std::vector<double> qk_drift_per_head(const model::Transformer& m1,
                                      const model::Transformer& m2);

// Per query head (layer-major), the same for M = W_O,h W_V,j (d x d): the
// value/output product the VO gauge leaves unchanged (docs/protocol.md §6).
std::vector<double> vo_drift_per_head(const model::Transformer& m1,
                                      const model::Transformer& m2);

// Mean and max over heads of a per-head drift; a NaN stays visible in the
// max; both NaN when there are no heads.
void summarise(const std::vector<double>& per_head, double* mean, double* max);

// What one checkpoint records.
struct CurvePoint {
  int64_t step = 0;
  double logit_drift = 0;
  double qk_drift_mean = 0;
  double qk_drift_max = 0;
  // The VO drift's mean and max over heads, measured for the twins that
  // rotate W_V / W_O; NaN (not written) for the others.
  double vo_drift_mean = std::numeric_limits<double>::quiet_NaN();
  double vo_drift_max = std::numeric_limits<double>::quiet_NaN();
  std::array<double, 2> val_loss{};  // copy 1, copy 2
  std::array<double, 2> val_acc{};   // mod task: last-position accuracy
  // Loss of the training batch of this step (before its update); NaN at
  // step 0, where no step has run.
  std::array<double, 2> train_loss{};
};

// One model on the task's validation set.
struct Evaluation {
  torch::Tensor logits;  // validation logits
  double loss = 0;       // mean cross-entropy
  double accuracy = 0;   // argmax accuracy (per position for the char-LM)
};
Evaluation evaluate(model::Transformer& model, const data::Task& task);

// The checkpoint of two models from their evaluations (e1 of m1, e2 of
// m2), neither evaluated again: copy 1 is evaluated once per checkpoint and
// compared with every twin of its group. With `vo`, the VO drift too.
CurvePoint compare(const Evaluation& e1, const model::Transformer& m1,
                   const Evaluation& e2, const model::Transformer& m2,
                   int64_t step, bool vo = false);

// The commutation check of docs/protocol.md §6: from the step copy 1 first
// moves, at each of kCommutationSteps steps, the relative difference
// between the twin's update and copy 1's update mapped by the twin's gauge
// (the identity for twins that rotate nothing), every parameter as one
// vector.
constexpr int64_t kCommutationSteps = 10;
struct Commutation {
  bool measured = false;  // records written before the check carry none
  // The first step at which copy 1's parameters changed; -1 while none has
  // (at the end of a pair: none did, through its last step).
  int64_t moved_at = -1;
  // errors[k]: step moved_at + k, up to kCommutationSteps of them.
  std::vector<double> errors;
  // sizes[k]: the update's size at that step relative to the weights, the
  // larger update over the larger weights of the two copies (every
  // parameter as one vector): the weights' storage rounds an update to
  // about unit roundoff / size of itself (docs/protocol.md §6). Empty in
  // records written before it was measured.
  std::vector<double> sizes;
  bool complete() const {
    return moved_at > 0 &&
           static_cast<int64_t>(errors.size()) >= kCommutationSteps;
  }
  // The largest error, and the step where; NaN and -1 when there is none.
  double largest(int64_t* step = nullptr) const;
};

// The checkpoint steps: {0, 1, 2, 3, 5, 10, 50, 100, 300, 600, 1000, 1500,
// 2000, 3000} within [0, steps], plus `steps` itself and any of `extra`
// (a pair's merge steps), sorted. Steps 2, 3 and 5 let the verdict see a
// rule that leaves step 1 alone (docs/protocol.md §10). With `stop_after`
// (> 0) those of them within [0, stop_after], plus stop_after itself: a
// run of `steps` steps stopped there (docs/protocol.md §6).
std::vector<int64_t> checkpoint_steps(int64_t steps,
                                      const std::vector<int64_t>& extra = {},
                                      int64_t stop_after = 0);

}  // namespace twins
