// Hybrid NorMuon (Li et al., 2025, "NorMuon: Making Muon more efficient and
// scalable"; reference zichongli5/NorMuon normuon.py,
// SingleDeviceNorMuonWithAuxAdam). On the hidden matrices, Muon's
// orthogonalised Nesterov momentum normalised per row by an EMA of its mean
// square, then rescaled back to its own Frobenius norm:
//   b = beta b + (1 - beta) g,  u = (1 - beta) g + beta b,  O = NS5(u),
//   s = beta2 s + (1 - beta2) mean_row(O^2)       (one entry per row),
//   O' = O / (sqrt(s) + 1e-10),  O'' = O' ||O||_F / (||O'||_F + 1e-10),
//   p -= lr sqrt(max(1, rows / cols)) O''.
// Every other parameter takes the reference's auxiliary Adam: lr 3e-4,
// betas (0.9, 0.95), eps 1e-10 (bias-corrected, eps outside the root).
// Defaults are the reference's: lr 0.02, beta 0.95, beta2 0.95, Nesterov,
// 5 Newton-Schulz steps, weight decay 0. Departure: NS5 runs in the
// parameter's dtype (bfloat16 there), with the project's newton_schulz5
// (the same coefficients, normalisation X / (||X||_F + 1e-7) and
// transposition as the reference's).
//
// Gauge: NS5(B u) = B NS5(u) (B block-diagonal orthogonal on W_Q / W_K's
// rows). Were O exactly orthogonal (W_Q, W_K are square), all its rows would
// have norm 1, the per-row normalisation would be a scalar and the rule
// equivariant. NS5 leaves O's singular values spread over about [0.7, 1.2],
// so its rows differ in norm, and B O's rows differ differently: the rule is
// basis-dependent by a defect of the order of NS5's deviation from
// orthogonality (measured in tests/test_modern_optim.cpp).
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

struct NorMuonOptions : public HybridOptions<NorMuonOptions> {
  // The reference's auxiliary Adam: 3e-4, betas (0.9, 0.95), eps 1e-10.
  NorMuonOptions(double lr = 0.02)
      : HybridOptions(lr, AuxAdam{3e-4, {0.9, 0.95}, 1e-10}) {}
  TORCH_ARG(double, momentum) = 0.95;  // EMA of g (beta)
  TORCH_ARG(bool, nesterov) = true;
  TORCH_ARG(double, beta2) = 0.95;      // EMA of the row mean of O^2
  TORCH_ARG(double, eps) = 1e-10;       // in both divisions of the norm
  TORCH_ARG(int64_t, ns_steps) = 5;     // Newton-Schulz iterations
  TORCH_ARG(bool, shape_scale) = true;  // sqrt(max(1, rows / cols))

 public:
  Hparams rule_hparams() const;
  void check() const;
};

// Buffers per matrix: "momentum_buffer" (b), "second_moment" (s, rows x 1).
class NorMuon : public HybridOptimizer<NorMuonOptions> {
 public:
  // matrices: 2-D parameters for the NorMuon rule; others: Adam at adam_lr.
  NorMuon(std::vector<torch::Tensor> matrices,
          std::vector<torch::Tensor> others, NorMuonOptions defaults = {});

 private:
  void start(const torch::Tensor& p, ParamState& state,
             const NorMuonOptions& options) const override;
  void update(const torch::Tensor& p, const torch::Tensor& grad,
              ParamState& state, const NorMuonOptions& options) override;
};

// The row normalisation of an orthogonalised O (rows, cols), updating the
// row statistic s (rows, 1) in place: O / (sqrt(s) + eps), rescaled to
// ||O||_F. Separate from NS5 so that a test can feed an exact polar factor.
torch::Tensor normuon_normalize(const torch::Tensor& O,
                                const torch::Tensor& second_moment,
                                double beta2, double eps);

// The matrix direction (before lr) in place on the momentum and the row
// statistic: Nesterov momentum, NS5, the row normalisation and the shape
// factor.
torch::Tensor normuon_direction(const torch::Tensor& grad,
                                const torch::Tensor& momentum_buffer,
                                const torch::Tensor& second_moment,
                                const NorMuonOptions& options);

}  // namespace optim
