// The commutation check of docs/protocol.md §6, measured while a group
// trains: a rule that is equivariant under a twin's gauge G makes, from
// G(state), the update G(its update from the state). Copy 2 of a gauge twin
// starts at G(copy 1), so at each step its update dW2 is compared with G dW1
// (for the twins that rotate nothing, G is the identity: the update's own
// sensitivity to the twin's perturbation). The error of a step, with every
// parameter's update taken as one vector, is ||dW2 - G dW1|| / max(||dW1||,
// ||dW2||), in float64: 0 for equal updates, at most 2, and a rule's
// rounding in between for an equivariant one.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/transformer.h"
#include "twins/gauge.h"
#include "twins/lockstep.h"
#include "twins/result.h"

namespace twins {

// One step's check: its error, and the update's size relative to the
// weights, max(||dW1||, ||dW2||) / max(||W1||, ||W2||) after the step (0
// when neither copy moved).
struct StepCommutation {
  double error = 0;
  double size = 0;
};

// The check of one step from the parameters before and after it (in build
// order) of copy 1 and copy 2, under `gauge` (its empty sides: the
// identity); `scratch` is a float64 model of the same config that G dW1 is
// made in. Throws for lists of different lengths.
StepCommutation commutation_step(const std::vector<torch::Tensor>& before1,
                                 const std::vector<torch::Tensor>& after1,
                                 const std::vector<torch::Tensor>& before2,
                                 const std::vector<torch::Tensor>& after2,
                                 const GaugeDraw& gauge,
                                 model::Transformer& scratch);

// Watches a group step by step until copy 1 has moved and every live twin
// has kCommutationSteps errors; the errors and sizes go to each record's
// `commutation` (whose state, restored from a checkpoint, it goes on from).
class CommutationWatch {
 public:
  // Right after `group` is built: the scratch model is built as the
  // group's twins were (the same seed), so the global generator is left
  // as that build leaves it.
  explicit CommutationWatch(Lockstep& group);

  // Whether the next step must be watched: a live twin's check is measured
  // and not complete.
  bool watching(const std::vector<PairResult>& results) const;
  // Around one training step of the group.
  void before_step();
  void after_step(std::vector<PairResult>& results);

 private:
  Lockstep& group_;
  std::vector<GaugeDraw> gauges_;  // per twin
  model::Transformer scratch_{nullptr};
  std::vector<torch::Tensor> reference_before_;
  std::vector<std::vector<torch::Tensor>> twin_before_;
};

}  // namespace twins
