// Hybrid Shampoo with Adam grafting (layer-wise grafting: Agarwal et al.,
// 2020, "Disentangling Adaptive Gradient Methods from Learning Rates";
// reference facebookresearch/optimizers distributed_shampoo with
// grafting_config = AdamPreconditionerConfig). The zoo's Shampoo direction
// (optim/shampoo.h) S = (L + I)^(-1/4) G (R + I)^(-1/4) keeps its direction
// and takes the Frobenius norm of Adam's diagonal step, per parameter:
//   v = beta2 v + (1 - beta2) g^2,  P = g / (sqrt(v / (1 - beta2^t)) + eps),
//   p -= lr ||P||_F / (||S||_F + 1e-16) S.
// Grafting defaults are the reference's AdamPreconditionerConfig: beta2
// 0.999, eps 1e-10, bias correction on, norm floor 1e-16; each of our
// matrices is one block (max_preconditioner_dim 1024 there). Every other
// parameter takes Adam (1e-3), as in the zoo's shampoo.
// Departures, all to keep the zoo's Shampoo underneath: sum statistics with
// damping 1 and roots every 20 steps (the reference: sum statistics, betas[1]
// = 1, with epsilon 1e-12 and its own root schedule); no first-moment filter
// (the reference filters g with betas[0] = 0.9 for both directions, the
// zoo's Shampoo has no momentum); Shampoo from step 1 (the reference runs the
// grafted method alone before start_preconditioning_step); no weight decay.
//
// Gauge: S is equivariant (optim/shampoo.h), ||S||_F is invariant, but
// ||P||_F is not: P divides entry by entry in the head basis. Basis-dependent
// through the step size only, the direction stays equivariant.
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

struct ShampooGraftOptions : public HybridOptions<ShampooGraftOptions> {
  // Adam at 1e-3, betas (0.9, 0.999), eps 1e-8 on the rest.
  ShampooGraftOptions(double lr = 1e-2) : HybridOptions(lr, AuxAdam{}) {}
  TORCH_ARG(double, damping) = 1.0;        // lambda added to L and R
  TORCH_ARG(int64_t, root_every) = 20;     // steps between root refreshes
  TORCH_ARG(double, graft_beta2) = 0.999;  // Adam's v for the step norm
  TORCH_ARG(double, graft_eps) = 1e-10;

 public:
  Hparams rule_hparams() const;
  void check() const;
};

// Buffers per matrix: Shampoo's (start_shampoo_statistics) and "graft_v",
// the grafting's v, shaped as p.
class ShampooGraft : public HybridOptimizer<ShampooGraftOptions> {
 public:
  // matrices: 2-D parameters for the grafted rule; others: Adam at adam_lr.
  ShampooGraft(std::vector<torch::Tensor> matrices,
               std::vector<torch::Tensor> others,
               ShampooGraftOptions defaults = {});

 private:
  void start(const torch::Tensor& p, ParamState& state,
             const ShampooGraftOptions& options) const override;
  void update(const torch::Tensor& p, const torch::Tensor& grad,
              ParamState& state, const ShampooGraftOptions& options) override;
};

// `direction` rescaled to the norm of Adam's diagonal step on `grad`,
// updating the grafting's v in place; `step` counts from 1.
torch::Tensor adam_graft(const torch::Tensor& direction,
                         const torch::Tensor& grad, const torch::Tensor& v,
                         int64_t step, double beta2, double eps);

}  // namespace optim
