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
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

struct ShampooOptions : public HybridOptions<ShampooOptions> {
  // Adam at 1e-3, betas (0.9, 0.999), eps 1e-8 on the rest.
  ShampooOptions(double lr = 0.5) : HybridOptions(lr, AuxAdam{}) {}
  TORCH_ARG(double, damping) = 1.0;     // lambda added to L and R
  TORCH_ARG(int64_t, root_every) = 20;  // steps between root refreshes

 public:
  static constexpr bool kRecordsWeightDecay = false;
  Hparams rule_hparams() const;
  void check() const;
};

// Buffers per matrix: "left" L = sum G G^T (m, m), "right" R = sum G^T G
// (n, n), "left_root" (L + lambda I)^(-1/4), "right_root" likewise.
class Shampoo : public HybridOptimizer<ShampooOptions> {
 public:
  // matrices: 2-D parameters for the Shampoo rule; others: Adam at adam_lr.
  Shampoo(std::vector<torch::Tensor> matrices,
          std::vector<torch::Tensor> others, ShampooOptions defaults = {});

 private:
  void start(const torch::Tensor& p, ParamState& state,
             const ShampooOptions& options) const override;
  void update(const torch::Tensor& p, const torch::Tensor& grad,
              ParamState& state, const ShampooOptions& options) override;
};

// The statistics and roots above for a matrix p, L and R zero (the roots
// are written at the first step).
void start_shampoo_statistics(ParamState& state, const torch::Tensor& p);

// Checks damping > 0 and root_every >= 1.
void check_shampoo_options(double damping, int64_t root_every);

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

// shampoo_direction_ on the buffers of start_shampoo_statistics, the
// roots refreshed at steps 1, 1 + root_every, ... (`step` counts from 1).
torch::Tensor shampoo_step_direction_(const torch::Tensor& grad,
                                      ParamState& state, int64_t step,
                                      int64_t root_every, double damping);

}  // namespace optim
