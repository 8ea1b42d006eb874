// scalar-Adam (docs/protocol.md §5): Adam's moments m, v per parameter, but ONE
// denominator shared by every parameter of the model,
//   s = sqrt(mean of v_hat over every entry of every parameter) + eps,
//   p -= (lr / s) * m_hat.
// A scalar denominator commutes with any orthogonal change of basis, so the
// rule is gauge-equivariant where Adam is not (paper §4, §6).
#pragma once

#include <tuple>
#include <vector>

#include "optim/base.h"

namespace optim {

struct ScalarAdamOptions
    : public torch::optim::OptimizerCloneableOptions<ScalarAdamOptions> {
  ScalarAdamOptions(double lr = 3e-3) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 3e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;

 public:
  // Every hyperparameter but the step size, for the result record.
  Hparams hparams() const {
    return {{"beta1", std::get<0>(betas())},
            {"beta2", std::get<1>(betas())},
            {"eps", eps()}};
  }

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct ScalarAdamParamState
    : public torch::optim::OptimizerCloneableParamState<ScalarAdamParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);
};

class ScalarAdam : public StatefulOptimizer {
 public:
  explicit ScalarAdam(std::vector<torch::optim::OptimizerParamGroup> groups,
                      ScalarAdamOptions defaults = {});
  explicit ScalarAdam(std::vector<torch::Tensor> params,
                      ScalarAdamOptions defaults = {})
      : ScalarAdam({torch::optim::OptimizerParamGroup(std::move(params))},
                   defaults) {}

  // The pooled denominator stays a tensor: no host synchronisation.
  torch::Tensor step(LossClosure closure = nullptr) override;
};

// The shared denominator: sqrt(sum_i sum(v_i) / bias_correction2_i /
// sum_i numel(v_i)) + eps, as a 0-dim tensor.
torch::Tensor pooled_denominator(const std::vector<torch::Tensor>& exp_avg_sqs,
                                 const std::vector<double>& bias_corrections2,
                                 double eps);

}  // namespace optim
