// Hybrid Muon (docs/protocol.md §5; Jordan et al., 2024): the hidden matrices
// (W_Q, W_K, W_V, W_O, W1, W2) take b = momentum * b + g (undamped) and
// p -= lr * NS5(b); every other parameter (embedding, positional, gains,
// head) takes Adam at adam_lr, as in the reference MuonWithAuxAdam. The gauge
// acts only on matrices and NS5 is orthogonally equivariant, so the hybrid
// is gauge-equivariant.
//
// Parameter group 0 holds the matrices, group 1 (optional) the rest; the
// group's options say which rule it gets (use_muon).
#pragma once

#include <tuple>
#include <vector>

#include "optim/base.h"
#include "optim/newton_schulz.h"

namespace optim {

struct MuonOptions
    : public torch::optim::OptimizerCloneableOptions<MuonOptions> {
  MuonOptions(double lr = 0.02) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 0.02;       // step size of the NS5 update
  TORCH_ARG(double, momentum) = 0.9;  // heavy-ball, undamped
  TORCH_ARG(int64_t, ns_steps) = 5;   // Newton-Schulz iterations
  TORCH_ARG(bool, use_muon) = true;   // false: Adam with the fields below
  TORCH_ARG(double, adam_lr) = 1e-3;  // Adam on non-matrix parameters
  TORCH_ARG(betas_t, adam_betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, adam_eps) = 1e-8;

 public:
  // Every hyperparameter but the step size, for the result record.
  Hparams hparams() const {
    return {{"momentum", momentum()},
            {"nesterov", 0},
            {"ns_steps", double(ns_steps())},
            {"ns_a", kNewtonSchulzA},
            {"ns_b", kNewtonSchulzB},
            {"ns_c", kNewtonSchulzC},
            {"ns_eps", kNewtonSchulzEps},
            {"adam_lr", adam_lr()},
            {"adam_beta1", std::get<0>(adam_betas())},
            {"adam_beta2", std::get<1>(adam_betas())},
            {"adam_eps", adam_eps()}};
  }

 public:
  double get_lr() const override { return use_muon() ? lr() : adam_lr(); }
  void set_lr(const double lr) override {
    if (use_muon()) {
      this->lr(lr);
    } else {
      adam_lr(lr);
    }
  }
};

struct MuonParamState
    : public torch::optim::OptimizerCloneableParamState<MuonParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, momentum_buffer);  // Muon groups
  TORCH_ARG(torch::Tensor, exp_avg);          // Adam groups
  TORCH_ARG(torch::Tensor, exp_avg_sq);       // Adam groups
};

class Muon : public StatefulOptimizer {
 public:
  // matrices: 2-D parameters for the NS5 rule; others: Adam at adam_lr.
  Muon(std::vector<torch::Tensor> matrices, std::vector<torch::Tensor> others,
       MuonOptions defaults = {});

  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace optim
