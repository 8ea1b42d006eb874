// Signum (Bernstein et al., 2018: signSGD with momentum), as the optimizer zoo
// fixes it: an EMA momentum and the sign of it, no second moment,
//   m = beta m + (1 - beta) g,   p -= lr sign(m),
// beta 0.9, sign(0) = 0 (torch::sign). Elementwise sign reads the basis:
// basis-dependent for the attention-head gauge (paper §4).
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

struct SignumOptions
    : public torch::optim::OptimizerCloneableOptions<SignumOptions> {
  SignumOptions(double lr = 1e-4) : lr_(lr) {}
  TORCH_ARG(double, lr) = 1e-4;
  TORCH_ARG(double, momentum) = 0.9;  // EMA decay of m

 public:
  // Every hyperparameter but the step size, for the result record.
  Hparams hparams() const { return {{"momentum", momentum()}}; }

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// Buffer per parameter: "momentum_buffer" (m).
class Signum : public StatefulOptimizer {
 public:
  explicit Signum(std::vector<torch::optim::OptimizerParamGroup> groups,
                  SignumOptions defaults = {});
  explicit Signum(std::vector<torch::Tensor> params,
                  SignumOptions defaults = {})
      : Signum({torch::optim::OptimizerParamGroup(std::move(params))},
               defaults) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
};

// One Signum step in place on p and m.
void signum_update_(const torch::Tensor& p, const torch::Tensor& grad,
                    const torch::Tensor& m, double lr, double beta);

}  // namespace optim
