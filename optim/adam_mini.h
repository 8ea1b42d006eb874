// Adam-mini (Zhang et al., 2024, "Adam-mini: Use Fewer Learning Rates To Gain
// More"; reference zyushun/Adam-mini adam_mini.py, v1.1.1): Adam's first
// moment per entry, one second moment per block, the EMA of the block's mean
// of g^2:
//   m = beta1 m + (1 - beta1) g,  v_b = beta2 v_b + (1 - beta2) mean_b(g^2),
//   p_i -= lr / (1 - beta1^t) m_i / (sqrt(v_b / (1 - beta2^t)) + eps).
// Blocks follow the reference's partition of a transformer: W_Q and W_K one
// block per head (its d_model / heads rows); every other 2-D weight
// (embedding, W_V, W_O, the MLP, the output head) one block per row (an
// output neuron, or a token for the embedding and the head); everything else
// (gains, the positional parameter) one block for the whole tensor, the
// reference's default for parameters it does not recognise. The reference
// recognises W_Q / W_K by name; here they are ParamSplit::qk, matched by
// tensor identity. Defaults are the reference's code defaults: lr 1e-3,
// betas (0.9, 0.999), eps 1e-8 (its docstring says 1e-6), weight decay 0.
//
// Gauge: v of head h is ||G_h||_F^2 / numel(G_h), unchanged by
// G_h -> A_h G_h, and m is linear in g: the update maps to A_h times itself,
// equivariant.
#pragma once

#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "optim/base.h"

namespace optim {

struct AdamMiniOptions
    : public torch::optim::OptimizerCloneableOptions<AdamMiniOptions> {
  AdamMiniOptions(double lr = 1e-3) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
  // Every hyperparameter as a name/value pair.
  Hparams hparams() const;
};

// Buffers per parameter: "exp_avg" (m, blocks x entries per block),
// "exp_avg_sq" (v, blocks x 1).
class AdamMini : public StatefulOptimizer {
 public:
  // params: every parameter; qk: those of them that are W_Q / W_K, each 2-D
  // with rows in head blocks of (W_Q's rows) / heads (a W_K of grouped-query
  // attention has fewer of them than W_Q).
  AdamMini(std::vector<torch::Tensor> params, std::vector<torch::Tensor> qk,
           int64_t heads, AdamMiniOptions defaults = {});

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Blocks of p: its heads for a W_Q / W_K, rows for another 2-D tensor,
  // else 1.
  int64_t blocks(const torch::Tensor& p) const;

 private:
  std::unordered_set<const void*> qk_;  // TensorImpl of each W_Q / W_K
  int64_t heads_;
  int64_t head_rows_ = 1;  // rows of one head in W_Q / W_K
};

// One step in place; p, grad and exp_avg are viewed as (blocks, -1) and
// exp_avg_sq is (blocks, 1); `step` counts from 1.
void adam_mini_update_(const torch::Tensor& p, const torch::Tensor& grad,
                       const torch::Tensor& exp_avg,
                       const torch::Tensor& exp_avg_sq, int64_t step, double lr,
                       double beta1, double beta2, double eps);

}  // namespace optim
