// Hybrid Muon (docs/protocol.md §5; Jordan et al., 2024): the hidden matrices
// (W_Q, W_K, W_V, W_O, W1, W2) take b = momentum * b + g (undamped) and
// p -= lr * NS5(b); every other parameter (embedding, positional, gains,
// head) takes Adam at adam_lr, as in the reference MuonWithAuxAdam. The gauge
// acts only on matrices and NS5 is orthogonally equivariant, so the hybrid
// is gauge-equivariant.
#pragma once

#include <vector>

#include "optim/base.h"
#include "optim/newton_schulz.h"

namespace optim {

struct MuonOptions : public HybridOptions<MuonOptions> {
  // Adam at 1e-3, betas (0.9, 0.999), eps 1e-8 on the rest.
  MuonOptions(double lr = 0.02) : HybridOptions(lr, AuxAdam{}) {}
  TORCH_ARG(double, momentum) = 0.9;  // heavy-ball, undamped
  TORCH_ARG(int64_t, ns_steps) = 5;   // Newton-Schulz iterations

 public:
  static constexpr bool kRecordsWeightDecay = false;
  Hparams rule_hparams() const;
  void check() const;
};

// Buffer "momentum_buffer" (b) per matrix.
class Muon : public HybridOptimizer<MuonOptions> {
 public:
  // matrices: 2-D parameters for the NS5 rule; others: Adam at adam_lr.
  Muon(std::vector<torch::Tensor> matrices, std::vector<torch::Tensor> others,
       MuonOptions defaults = {});

 private:
  void start(const torch::Tensor& p, ParamState& state,
             const MuonOptions& options) const override;
  void update(const torch::Tensor& p, const torch::Tensor& grad,
              ParamState& state, const MuonOptions& options) override;
};

}  // namespace optim
