// scalar-Adam (docs/protocol.md §5): Adam's moments m, v per parameter, but ONE
// denominator shared by every parameter of the model,
//   s = sqrt(mean of v_hat over every entry of every parameter) + eps,
//   p -= (lr / s) * m_hat.
// A scalar denominator commutes with any orthogonal change of basis, so the
// rule is gauge-equivariant where Adam is not (paper §4, §6).
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

struct ScalarAdamOptions : public PooledAdamOptions<ScalarAdamOptions> {
  ScalarAdamOptions(double lr = 3e-3) : PooledAdamOptions(lr) {}
  Hparams rule_hparams() const { return {}; }  // betas and eps only
  void check() const {}
};

// Buffers per parameter: "exp_avg" (m), "exp_avg_sq" (v). Each group's eps
// is added to the pooled root mean for that group's parameters.
class ScalarAdam : public PooledAdam<ScalarAdamOptions> {
 public:
  explicit ScalarAdam(std::vector<torch::optim::OptimizerParamGroup> groups,
                      ScalarAdamOptions defaults = {})
      : PooledAdam(std::move(groups), defaults) {}
  explicit ScalarAdam(std::vector<torch::Tensor> params,
                      ScalarAdamOptions defaults = {})
      : ScalarAdam({torch::optim::OptimizerParamGroup(std::move(params))},
                   defaults) {}

 private:
  torch::Tensor denominator(const torch::Tensor& exp_avg_sq,
                            double bias_correction2, const torch::Tensor& rms,
                            const ScalarAdamOptions& options) const override;
};

}  // namespace optim
