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
//
// p, eps, lr and betas are all read per group; s pools every parameter of
// every group, whatever its group's p.
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

struct AdamPOptions : public PooledAdamOptions<AdamPOptions> {
  AdamPOptions(double lr = 1e-3) : PooledAdamOptions(lr) {}
  TORCH_ARG(double, p) = 0.5;  // dial: 1 = Adam, 0 = scalar-Adam

 public:
  Hparams rule_hparams() const { return {{"p", p()}}; }
  void check() const;
};

// Buffers per parameter: "exp_avg" (m), "exp_avg_sq" (v).
class AdamP : public PooledAdam<AdamPOptions> {
 public:
  explicit AdamP(std::vector<torch::optim::OptimizerParamGroup> groups,
                 AdamPOptions defaults = {})
      : PooledAdam(std::move(groups), defaults) {}
  explicit AdamP(std::vector<torch::Tensor> params, AdamPOptions defaults = {})
      : AdamP({torch::optim::OptimizerParamGroup(std::move(params))},
              defaults) {}

 private:
  torch::Tensor denominator(const torch::Tensor& exp_avg_sq,
                            double bias_correction2, const torch::Tensor& rms,
                            const AdamPOptions& options) const override;
};

// Throws "Invalid Adam-p exponent: x (must be in [0, 1])" unless 0 <= p <= 1.
void check_adam_p_exponent(double p);

// The p < 1 denominator (sqrt(v / bias_correction2) + eps)^p *
// pooled^(1 - p) + eps, with pooled = s + eps (a 0-dim tensor).
torch::Tensor adam_p_denominator(const torch::Tensor& exp_avg_sq,
                                 double bias_correction2,
                                 const torch::Tensor& pooled, double p,
                                 double eps);

}  // namespace optim
