// Hybrid Shampoo (Gupta, Koren & Singer, 2018, Algorithm 1 for a matrix
// parameter, without momentum or grafting), as the optimizer zoo fixes it
// (docs/protocol.md §5). For a hidden matrix G (m x n):
//   L += G G^T,   R += G^T G,
//   p -= lr (L + lambda I)^(-1/4) G (R + lambda I)^(-1/4),
// damping lambda = 1, L and R accumulated from zero, the inverse fourth
// roots recomputed at steps 1, 1 + k, 1 + 2k, ... (k = 20, after that step's
// G is added) and reused in between. Every other parameter (embedding,
// positional, gains, head) takes Adam at adam_lr, as in hybrid Muon.
//
// The roots come from an eigendecomposition of the symmetric L, R in
// float64 (eigenvalues floored at 0 before the damping), cast back to the
// parameter's dtype: torch::linalg_eigh exists in LibTorch 1.13 and 2.x,
// and float64 keeps a float32 run's preconditioner at float32 accuracy.
//
// The gauge left-multiplies W_Q, W_K by an orthogonal block-diagonal B:
// G -> B G, L -> B L B^T, (L + I)^(-1/4) -> B (L + I)^(-1/4) B^T, R fixed, so
// the update maps to B times itself: gauge-equivariant (paper §4).
//
// Parameter group 0 holds the matrices, group 1 (optional) the rest; the
// group's options say which rule it gets (use_shampoo).
#pragma once

#include <tuple>
#include <vector>

#include "optim/base.h"

namespace optim {

struct ShampooOptions
    : public torch::optim::OptimizerCloneableOptions<ShampooOptions> {
  ShampooOptions(double lr = 0.5) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 0.5;          // step size of the matrix update
  TORCH_ARG(double, damping) = 1.0;     // lambda added to L and R
  TORCH_ARG(int64_t, root_every) = 20;  // steps between root refreshes
  TORCH_ARG(bool, use_shampoo) = true;  // false: Adam with the fields below
  TORCH_ARG(double, adam_lr) = 1e-3;    // Adam on non-matrix parameters
  TORCH_ARG(betas_t, adam_betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, adam_eps) = 1e-8;

 public:
  // Every hyperparameter but the step size, for the result record.
  Hparams hparams() const {
    return {{"damping", damping()},
            {"root_every", double(root_every())},
            {"adam_lr", adam_lr()},
            {"adam_beta1", std::get<0>(adam_betas())},
            {"adam_beta2", std::get<1>(adam_betas())},
            {"adam_eps", adam_eps()}};
  }

 public:
  double get_lr() const override { return use_shampoo() ? lr() : adam_lr(); }
  void set_lr(const double lr) override {
    if (use_shampoo()) {
      this->lr(lr);
    } else {
      adam_lr(lr);
    }
  }
};

struct ShampooParamState
    : public torch::optim::OptimizerCloneableParamState<ShampooParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, left);        // L = sum G G^T  (m, m)
  TORCH_ARG(torch::Tensor, right);       // R = sum G^T G  (n, n)
  TORCH_ARG(torch::Tensor, left_root);   // (L + lambda I)^(-1/4)
  TORCH_ARG(torch::Tensor, right_root);  // (R + lambda I)^(-1/4)
  TORCH_ARG(torch::Tensor, exp_avg);     // Adam groups
  TORCH_ARG(torch::Tensor, exp_avg_sq);  // Adam groups
};

class Shampoo : public StatefulOptimizer {
 public:
  // matrices: 2-D parameters for the Shampoo rule; others: Adam at adam_lr.
  Shampoo(std::vector<torch::Tensor> matrices,
          std::vector<torch::Tensor> others, ShampooOptions defaults = {});

  torch::Tensor step(LossClosure closure = nullptr) override;
};

// (A + damping I)^(-1/4) for a symmetric positive semi-definite A, by
// eigendecomposition in float64 (lower triangle read, eigenvalues floored
// at 0); returned in A's dtype and device.
torch::Tensor inverse_fourth_root(const torch::Tensor& A, double damping);

// The statistics' update (and with `refresh` the roots' recomputation from
// the updated L, R) in place, then the direction (L + lambda I)^(-1/4) G
// (R + lambda I)^(-1/4) that a step subtracts lr times.
torch::Tensor shampoo_direction_(const torch::Tensor& grad,
                                 const torch::Tensor& left,
                                 const torch::Tensor& right,
                                 const torch::Tensor& left_root,
                                 const torch::Tensor& right_root, bool refresh,
                                 double damping);

// One Shampoo step in place on p and the statistics; with `refresh` the
// roots are recomputed from the updated L, R first.
void shampoo_update_(const torch::Tensor& p, const torch::Tensor& grad,
                     const torch::Tensor& left, const torch::Tensor& right,
                     const torch::Tensor& left_root,
                     const torch::Tensor& right_root, bool refresh, double lr,
                     double damping);

}  // namespace optim
