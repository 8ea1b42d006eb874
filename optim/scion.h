// Hybrid Scion (Pethick et al., 2025, "Training Deep Learning Models with
// Norm-Constrained LMOs"; reference LIONS-EPFL/scion scion.py). The hidden
// matrices step along the linear minimisation oracle (LMO) of a norm ball at
// the averaged gradient:
//   b = (1 - alpha) b + alpha g,  p -= lr scale lmo(b),
// (alpha is the reference's "momentum", one minus the usual momentum), with
// the column-wise or the row-wise norm of a (rows, cols) weight:
//   ColNorm: lmo(X)[:, j] = X[:, j] / (||X[:, j]|| / sqrt(rows) * cols + eps)
//   RowNorm: lmo(X)[i, :] = X[i, :] / (||X[i, :]|| * sqrt(cols) + eps)
// (the reference's normalized forms). Defaults: lr 1e-3 (Scion's own); for
// the hidden matrices the reference's ColNorm / RowNorm transformer
// configurations (examples/shallow-nanogpt model.py): alpha 0.1 (1 - beta1
// 0.9, also the reference's suggested default), scale 3, normalized, eps
// 1e-8.
// Departures: hybrid, as the zoo's Muon: embedding, positional, gains and
// head take Adam (1e-3), where the reference gives the embedding and head
// the same norm family (scale 1 and 10); unconstrained: the reference's
// default constrained variant also shrinks p by (1 - lr) every step, a weight
// decay, which the zoo has nowhere.
//
// Gauge: a column of W_Q or W_K runs over all rows, and B = diag(A_h) keeps
// its norm, so ColNorm(B X) = B ColNorm(X): scion-col is equivariant. A row
// of B X mixes the rows of its head and its norm changes: scion-row is
// basis-dependent. The same rule, opposite verdicts by orientation.
#pragma once

#include <vector>

#include "optim/base.h"

namespace optim {

enum class ScionNorm { kColumn, kRow };

struct ScionOptions : public HybridOptions<ScionOptions> {
  // Adam at 1e-3, betas (0.9, 0.999), eps 1e-8 on the rest.
  ScionOptions(double lr = 1e-3) : HybridOptions(lr, AuxAdam{}) {}
  TORCH_ARG(double, alpha) = 0.1;  // b = (1 - alpha) b + alpha g
  TORCH_ARG(double, scale) = 3.0;  // radius of the hidden layers
  TORCH_ARG(ScionNorm, norm) = ScionNorm::kColumn;
  TORCH_ARG(bool, normalized) = true;  // the reference's normalized LMO
  TORCH_ARG(double, eps) = 1e-8;       // added to each norm

 public:
  // norm: 0 column, 1 row.
  Hparams rule_hparams() const;
  void check() const;
};

// Buffer "momentum_buffer" (b) per matrix.
class Scion : public HybridOptimizer<ScionOptions> {
 public:
  // matrices: 2-D parameters for the LMO rule; others: Adam at adam_lr.
  Scion(std::vector<torch::Tensor> matrices, std::vector<torch::Tensor> others,
        ScionOptions defaults = {});

 private:
  void start(const torch::Tensor& p, ParamState& state,
             const ScionOptions& options) const override;
  void update(const torch::Tensor& p, const torch::Tensor& grad,
              ParamState& state, const ScionOptions& options) override;
};

// The reference's ColNorm / RowNorm LMOs of a (rows, cols) matrix.
torch::Tensor scion_col_lmo(const torch::Tensor& X, bool normalized,
                            double eps);
torch::Tensor scion_row_lmo(const torch::Tensor& X, bool normalized,
                            double eps);

}  // namespace optim
