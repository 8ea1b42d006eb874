// PyTorch's Muon (torch.optim.Muon, torch/optim/_muon.py, PyTorch >= 2.9)
// with its defaults, made hybrid like the zoo's muon. On the hidden
// matrices:
//   b = beta b + (1 - beta) g,  u = (1 - beta) g + beta b   (Nesterov),
//   X = u / max(||u||_F, eps) (worked on transposed when rows > cols), then
//   5 times A = X X^T, X = a X + (b A + c A A) X (Jordan's coefficients),
//   p -= lr sqrt(max(1, rows / cols)) X           (adjust_lr_fn "original").
// Every other parameter takes Adam (1e-3), as in the zoo's muon: PyTorch
// leaves them to the user ("should be optimized by a standard method such as
// AdamW"). Defaults are PyTorch's: lr 1e-3, momentum 0.95, Nesterov, eps
// 1e-7, 5 steps. Departures: Newton-Schulz in the parameter's dtype
// (bfloat16 in PyTorch); no weight decay (0.1 there). Unlike the zoo's muon
// (docs/protocol.md §5: undamped momentum, X / (||X|| + 1e-7), no shape
// factor) it keeps all of PyTorch's choices.
//
// Gauge: B = diag(A_h) on W_Q / W_K's rows commutes with the momentum, keeps
// ||u||_F, and NS(B X) = B NS(X) (every iteration is a polynomial in X X^T
// times X, or X times X^T X); the shape factor depends on the shape only:
// equivariant.
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

struct MuonTorchOptions : public HybridOptions<MuonTorchOptions> {
  // Adam at 1e-3, betas (0.9, 0.999), eps 1e-8 on the rest.
  MuonTorchOptions(double lr = 1e-3) : HybridOptions(lr, AuxAdam{}) {}
  TORCH_ARG(double, momentum) = 0.95;  // EMA of g (lerp)
  TORCH_ARG(bool, nesterov) = true;
  TORCH_ARG(double, ns_a) = 3.4445;  // Newton-Schulz coefficients
  TORCH_ARG(double, ns_b) = -4.7750;
  TORCH_ARG(double, ns_c) = 2.0315;
  TORCH_ARG(double, eps) = 1e-7;  // floor of ||u||_F
  TORCH_ARG(int64_t, ns_steps) = 5;
  TORCH_ARG(bool, shape_scale) = true;  // sqrt(max(1, rows / cols))

 public:
  Hparams rule_hparams() const;
  void check() const;
};

// Buffer "momentum_buffer" (b) per matrix.
class MuonTorch : public HybridOptimizer<MuonTorchOptions> {
 public:
  // matrices: 2-D parameters for the Muon rule; others: Adam at adam_lr.
  MuonTorch(std::vector<torch::Tensor> matrices,
            std::vector<torch::Tensor> others, MuonTorchOptions defaults = {});

 private:
  void start(const torch::Tensor& p, ParamState& state,
             const MuonTorchOptions& options) const override;
  void update(const torch::Tensor& p, const torch::Tensor& grad,
              ParamState& state, const MuonTorchOptions& options) override;
};

// PyTorch's _zeropower_via_newtonschulz in G's dtype: G / max(||G||_F, eps),
// the small Gram side, `steps` quintic iterations.
torch::Tensor newton_schulz_torch(const torch::Tensor& G, double a, double b,
                                  double c, int64_t steps, double eps);

// The matrix direction (before lr) in place on the momentum: Nesterov
// momentum, Newton-Schulz and the shape factor.
torch::Tensor muon_torch_direction(const torch::Tensor& grad,
                                   const torch::Tensor& momentum_buffer,
                                   const MuonTorchOptions& options);

}  // namespace optim
