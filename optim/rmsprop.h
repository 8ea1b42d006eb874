// Classical RMSprop (Tieleman & Hinton, 2012), as the optimizer zoo fixes it
// (docs/protocol.md §5): one second-moment EMA per coordinate, no momentum, no
// centring, no bias correction,
//   v = alpha v + (1 - alpha) g^2,   p -= lr g / (sqrt(v) + eps),
// alpha 0.99, eps 1e-8. The per-coordinate denominator reads the basis, so
// the rule is basis-dependent for the attention-head gauge (paper §4).
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

struct RMSpropOptions
    : public torch::optim::OptimizerCloneableOptions<RMSpropOptions> {
  RMSpropOptions(double lr = 1e-4) : lr_(lr) {}
  TORCH_ARG(double, lr) = 1e-4;
  TORCH_ARG(double, alpha) = 0.99;  // second-moment decay
  TORCH_ARG(double, eps) = 1e-8;    // added to sqrt(v)

 public:
  // Every hyperparameter but the step size, for the result record.
  Hparams hparams() const {
    return {{"alpha", alpha()}, {"eps", eps()}, {"momentum", 0}};
  }

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// Buffer per parameter: "square_avg" (v, the EMA of g^2).
class RMSprop : public StatefulOptimizer {
 public:
  explicit RMSprop(std::vector<torch::optim::OptimizerParamGroup> groups,
                   RMSpropOptions defaults = {});
  explicit RMSprop(std::vector<torch::Tensor> params,
                   RMSpropOptions defaults = {})
      : RMSprop({torch::optim::OptimizerParamGroup(std::move(params))},
                defaults) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
};

// One RMSprop step in place on p and square_avg; op for op LibTorch's
// torch::optim::RMSprop with momentum 0 and centered false.
void rmsprop_update_(const torch::Tensor& p, const torch::Tensor& grad,
                     const torch::Tensor& square_avg, double lr, double alpha,
                     double eps);

}  // namespace optim
