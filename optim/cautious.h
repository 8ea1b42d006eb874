// Cautious optimizers (Liang et al., 2024, "Cautious Optimizers: Improving
// Training with One Line of Code"; reference kyleliang919/C-Optim). A base
// rule's update u is kept only where it agrees in sign with the current
// gradient, and rescaled by the kept fraction:
//   mask = 1[u * g > 0],  u <- u mask / max(mean(mask), 1e-3)
// (the mean over the parameter tensor; the reference's current form, which
// replaced numel / (sum + 1)).
//   cautious-sgd:  the zoo's heavy-ball sgd underneath, b = momentum b + g,
//                  u = b, p -= lr u_masked. The reference repository has no
//                  C-SGD; this is the paper's one-line change applied to
//                  torch.optim.SGD (momentum 0.9, dampening 0: the zoo's).
//   cautious-adam: C-AdamW (c_adamw.py, its default foreach path): Adam's
//                  m, v, u = m, p -= lr / (1 - beta1^t) u_masked /
//                  (sqrt(v / (1 - beta2^t)) + eps), with the reference's
//                  defaults lr 1e-3, betas (0.9, 0.999), eps 1e-6; no weight
//                  decay (0 there as well).
// Both update every parameter (no Adam fallback), as the reference does.
//
// Gauge: the mask is taken entry by entry in the head basis, so it breaks
// even sgd's equivariant update: both rules are basis-dependent. At step 1
// sgd's b = g and the mask is all ones (wherever g != 0): its first step is
// plain sgd's, and the break shows from step 2. Adam is basis-dependent
// already.
#pragma once

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "optim/base.h"

namespace optim {

// The reference's floor under the kept fraction.
constexpr double kCautiousMaskFloor = 1e-3;

struct CautiousSgdOptions
    : public torch::optim::OptimizerCloneableOptions<CautiousSgdOptions> {
  CautiousSgdOptions(double lr = 0.5) : lr_(lr) {}
  TORCH_ARG(double, lr) = 0.5;        // the zoo's sgd rate on mod<p>
  TORCH_ARG(double, momentum) = 0.9;  // heavy-ball, undamped
  TORCH_ARG(double, mask_floor) = kCautiousMaskFloor;

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
  // Every hyperparameter as a name/value pair.
  Hparams hparams() const;
};

struct CautiousAdamOptions
    : public torch::optim::OptimizerCloneableOptions<CautiousAdamOptions> {
  CautiousAdamOptions(double lr = 1e-3) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-6;  // C-AdamW's default
  TORCH_ARG(double, mask_floor) = kCautiousMaskFloor;

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
  // Every hyperparameter as a name/value pair.
  Hparams hparams() const;
};

// Buffer per parameter: "exp_avg" (b).
class CautiousSgd : public StatefulOptimizer {
 public:
  explicit CautiousSgd(std::vector<torch::Tensor> params,
                       CautiousSgdOptions defaults = {});
  torch::Tensor step(LossClosure closure = nullptr) override;
};

// Buffers per parameter: "exp_avg" (m), "exp_avg_sq" (v).
class CautiousAdam : public StatefulOptimizer {
 public:
  explicit CautiousAdam(std::vector<torch::Tensor> params,
                        CautiousAdamOptions defaults = {});
  torch::Tensor step(LossClosure closure = nullptr) override;
};

// 1[u * g > 0] / max(mean of it, floor): multiply u by it.
torch::Tensor cautious_mask(const torch::Tensor& u, const torch::Tensor& g,
                            double floor);

}  // namespace optim
