// Adafactor (Shazeer & Stern, 2018) reduced to its factored second moment,
// as the optimizer zoo fixes it (docs/protocol.md §5). For a parameter of 2 or
// more dimensions, EMAs of the row and column means of g^2 over the last two
// dimensions,
//   R = beta2 R + (1 - beta2) mean_cols(g^2),  C = beta2 C + (1 - beta2)
//   mean_rows(g^2),
// are recombined into V = R C^T / mean(R) (exact when g^2 has rank one);
// 1-D parameters keep the unfactored EMA V = beta2 V + (1 - beta2) g^2. Then
//   p -= lr g / (sqrt(V / (1 - beta2^t)) + eps),
// beta2 0.999, eps 1e-8. Choices where the issue is silent, all to keep the
// rule a plain second-moment method comparable with Adam: no first moment
// (the paper's beta1 = 0), the fixed beta2 with Adam's bias correction in
// place of the original's increasing decay 1 - t^-0.8, no update clipping,
// no relative step size, no parameter-scale factor, eps added to sqrt(V)
// (not to g^2). mean(R) is floored at FLT_MIN, so an all-zero gradient gives
// V = 0 (and a zero step), not 0 / 0.
//
// The row statistics of W_Q, W_K are taken in the head basis that the gauge
// rotates: basis-dependent for the attention-head gauge (paper §4).
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

struct AdafactorOptions
    : public torch::optim::OptimizerCloneableOptions<AdafactorOptions> {
  AdafactorOptions(double lr = 1e-3) : lr_(lr) {}
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(double, beta2) = 0.999;  // decay of the g^2 statistics
  TORCH_ARG(double, eps) = 1e-8;     // added to sqrt(V)

 public:
  // Every hyperparameter but the step size, for the result record.
  Hparams hparams() const {
    return {{"beta1", 0}, {"beta2", beta2()}, {"eps", eps()}};
  }

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// Buffers per parameter: "exp_avg_sq_row" (..., rows) and "exp_avg_sq_col"
// (..., cols) for dim >= 2, "exp_avg_sq" (shape of p) for dim < 2.
class Adafactor : public StatefulOptimizer {
 public:
  explicit Adafactor(std::vector<torch::optim::OptimizerParamGroup> groups,
                     AdafactorOptions defaults = {});
  explicit Adafactor(std::vector<torch::Tensor> params,
                     AdafactorOptions defaults = {})
      : Adafactor({torch::optim::OptimizerParamGroup(std::move(params))},
                  defaults) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
};

// V = R C^T / mean(R) over the last two dimensions: row (..., r) and
// col (..., c) give (..., r, c).
torch::Tensor factored_second_moment(const torch::Tensor& row,
                                     const torch::Tensor& col);

// One step of the factored rule (dim >= 2) in place on p, row, col; `step`
// counts from 1.
void adafactor_factored_update_(const torch::Tensor& p,
                                const torch::Tensor& grad,
                                const torch::Tensor& row,
                                const torch::Tensor& col, int64_t step,
                                double lr, double beta2, double eps);

// One step of the unfactored rule (dim < 2) in place on p and v.
void adafactor_unfactored_update_(const torch::Tensor& p,
                                  const torch::Tensor& grad,
                                  const torch::Tensor& v, int64_t step,
                                  double lr, double beta2, double eps);

}  // namespace optim
