// Adam-p, the preconditioner-anisotropy dial (paper §7, Algorithm 1;
// docs/protocol.md §5). Adam's moments m, v per coordinate, bias-corrected as
// Adam; only the denominator moves with p in [0, 1]:
//   p = 1:  sqrt(v_hat) + eps                                  (stock Adam)
//   p < 1:  (sqrt(v_hat) + eps)^p * (s + eps)^(1 - p) + eps,
// s = sqrt(mean of v_hat over every entry of every parameter), the pooled
// scalar of scalar-Adam. At p = 1 the step is LibTorch's Adam op for op
// (bitwise `adam`); at p = 0 the denominator is s + 2 eps, scalar-Adam's
// s + eps up to the O(eps) extra eps that Algorithm 1 puts outside the
// product for p < 1. The pooled s is gauge-invariant, so p = 0 is
// equivariant and every p > 0 reads the basis (paper §7).
#pragma once

#include <tuple>
#include <vector>

#include "optim/base.h"

namespace optim {

struct AdamPOptions
    : public torch::optim::OptimizerCloneableOptions<AdamPOptions> {
  AdamPOptions(double lr = 1e-3) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(double, p) = 0.5;  // dial: 1 = Adam, 0 = scalar-Adam
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;

 public:
  // Every hyperparameter but the step size, for the result record.
  Hparams hparams() const {
    return {{"p", p()},
            {"beta1", std::get<0>(betas())},
            {"beta2", std::get<1>(betas())},
            {"eps", eps()}};
  }

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct AdamPParamState
    : public torch::optim::OptimizerCloneableParamState<AdamPParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);
};

class AdamP : public StatefulOptimizer {
 public:
  explicit AdamP(std::vector<torch::optim::OptimizerParamGroup> groups,
                 AdamPOptions defaults = {});
  explicit AdamP(std::vector<torch::Tensor> params, AdamPOptions defaults = {})
      : AdamP({torch::optim::OptimizerParamGroup(std::move(params))},
              defaults) {}

  // p and eps are model-wide (the pooled scalar spans every group): the
  // first group's values are used. The pooled scalar stays a tensor: no
  // host synchronisation.
  torch::Tensor step(LossClosure closure = nullptr) override;
};

// Throws "Invalid Adam-p exponent: x (must be in [0, 1])" unless 0 <= p <= 1.
void check_adam_p_exponent(double p);

// The p < 1 denominator (sqrt(v / bias_correction2) + eps)^p *
// pooled^(1 - p) + eps, with pooled = s + eps (a 0-dim tensor, see
// pooled_denominator in scalar_adam.h).
torch::Tensor adam_p_denominator(const torch::Tensor& exp_avg_sq,
                                 double bias_correction2,
                                 const torch::Tensor& pooled, double p,
                                 double eps);

}  // namespace optim
