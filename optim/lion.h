// Lion (Chen et al., 2023, "Symbolic Discovery of Optimization
// Algorithms", Algorithm 2 without weight decay), as the optimizer zoo fixes it
// (docs/protocol.md §5):
//   p -= lr sign(beta1 m + (1 - beta1) g),   then m = beta2 m + (1 - beta2) g,
// beta1 0.9, beta2 0.99, sign(0) = 0 (torch::sign). The elementwise sign
// reads the basis: basis-dependent for the attention-head gauge (paper §4).
#pragma once

#include <tuple>
#include <vector>

#include "optim/base.h"

namespace optim {

struct LionOptions
    : public torch::optim::OptimizerCloneableOptions<LionOptions> {
  LionOptions(double lr = 1e-4) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 1e-4;
  // (interpolation for the update, decay of the stored momentum)
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.99);

 public:
  // Every hyperparameter but the step size, for the result record.
  Hparams hparams() const {
    return {{"beta1", std::get<0>(betas())}, {"beta2", std::get<1>(betas())}};
  }

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// Buffer per parameter: "exp_avg" (m).
class Lion : public StatefulOptimizer {
 public:
  explicit Lion(std::vector<torch::optim::OptimizerParamGroup> groups,
                LionOptions defaults = {});
  explicit Lion(std::vector<torch::Tensor> params, LionOptions defaults = {})
      : Lion({torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {
  }

  torch::Tensor step(LossClosure closure = nullptr) override;
};

// One Lion step in place on p and m.
void lion_update_(const torch::Tensor& p, const torch::Tensor& grad,
                  const torch::Tensor& m, double lr, double beta1,
                  double beta2);

}  // namespace optim
