// Hybrid AdaMuon (Si, Zhang & Shen, 2025, "AdaMuon: Adaptive Muon
// Optimizer"; reference Chongjie-Si/AdaMuon gpt2/models/optimizers/
// adamuon.py and the GPT-2 script's configure_optimizers). On the hidden
// matrices, an Adam-style per-entry second moment of Muon's orthogonalised
// sign of the Nesterov momentum, rescaled to a fixed RMS:
//   b = beta b + (1 - beta) g,  u = (1 - beta) g + beta b,
//   O = NS5(sign(u)),  v = beta v + (1 - beta) O^2   (per entry, no bias
//   correction, the same beta as the momentum),
//   O' = O / (sqrt(v) + eps),
//   p -= lr 0.2 sqrt(rows cols) O' / (||O'||_F + eps).
// Every other parameter takes Adam at the same learning rate with betas
// (0.9, 0.95), eps 1e-8, as the reference's training script runs AdamW
// beside it with one learning rate (the 0.2 RMS factor exists to match
// Adam's step size). Defaults are the reference's: lr 0.02, beta 0.95,
// Nesterov, 5 Newton-Schulz steps, eps 1e-8, the sign before NS5 (both the
// GPT-2 and the Megatron code take it; the paper's summary omits it).
// Departures: no weight decay (0.01 / 0.1 there); NS5 in the parameter's
// dtype (bfloat16 there) with the project's newton_schulz5.
//
// Gauge: sign(u) and the per-entry v are taken entry by entry in the head
// basis that the gauge rotates: basis-dependent from the first step.
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

struct AdaMuonOptions : public HybridOptions<AdaMuonOptions> {
  // Adam on the rest: betas (0.9, 0.95), eps 1e-8, and adam_lr 0, meaning
  // lr, as the reference, which has one learning rate for both.
  AdaMuonOptions(double lr = 0.02)
      : HybridOptions(lr, AuxAdam{0, {0.9, 0.95}, 1e-8}) {}
  TORCH_ARG(double, momentum) = 0.95;  // EMA of g, and of O^2
  TORCH_ARG(bool, nesterov) = true;
  TORCH_ARG(bool, sign) = true;      // NS5 of sign(u) (the reference's)
  TORCH_ARG(int64_t, ns_steps) = 5;  // Newton-Schulz iterations
  TORCH_ARG(double, eps) = 1e-8;     // in both divisions
  TORCH_ARG(double, rms) = 0.2;      // RMS of the matrix update / lr

 public:
  Hparams rule_hparams() const;
  void check() const;
};

// Buffers per matrix: "momentum_buffer" (b), "v_buffer" (v of O).
class AdaMuon : public HybridOptimizer<AdaMuonOptions> {
 public:
  // matrices: 2-D parameters for the AdaMuon rule; others: Adam at adam_lr.
  AdaMuon(std::vector<torch::Tensor> matrices,
          std::vector<torch::Tensor> others, AdaMuonOptions defaults = {});

 private:
  void start(const torch::Tensor& p, ParamState& state,
             const AdaMuonOptions& options) const override;
  void update(const torch::Tensor& p, const torch::Tensor& grad,
              ParamState& state, const AdaMuonOptions& options) override;
};

// The matrix direction (before lr) in place on the momentum and v.
torch::Tensor adamuon_direction(const torch::Tensor& grad,
                                const torch::Tensor& momentum_buffer,
                                const torch::Tensor& v_buffer,
                                const AdaMuonOptions& options);

}  // namespace optim
