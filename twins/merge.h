// Head merging at a checkpoint (docs/protocol.md §9): per-head orthogonal
// Procrustes alignment of copy 2 to copy 1 (Zhang et al., ICML 2025), the
// validation loss along the linear path between the copies and its barrier
// (Theus et al., NeurIPS 2025), naive and after alignment.
//
// Every quantity is computed in float64 whatever the models' dtype, like the
// drift metrics. The models passed in are never modified: the aligned copy
// and the interpolated points live in scratch models of the same shape.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "data/task.h"
#include "model/transformer.h"
#include "twins/metrics.h"
#include "twins/spec.h"

namespace twins {

// One hd x hd matrix per layer and head: [layer][head].
using HeadMatrices = std::vector<std::vector<torch::Tensor>>;

// ---------------------------------------------------------------------------
// Alignment

// The orthogonal R maximising tr(R^T M), i.e. minimising ||X - R Y||_F for
// M = X Y^T: R = U V^T from the SVD M = U S V^T (float64, CPU). M square.
//
// R is unique when M is nonsingular. When M is singular every R that maps
// the right null space of M onto its left null space completes an optimum;
// among those we return the one closest to the identity (largest tr R): the
// null-space part is the Procrustes rotation of U0^T V0 (U0, V0 the null
// bases), found by the same rule, so the choice does not depend on the bases
// the SVD happens to return unless U0^T V0 is itself singular (then the rule
// recurses and stays deterministic). Consequences: M = 0 gives I; a symmetric
// positive semidefinite M (M = W W^T: two equal heads) gives I exactly, not
// U V^T with its round-off.
torch::Tensor procrustes(const torch::Tensor& M);

// The per-head alignment of copy 2 to copy 1.
struct Alignment {
  HeadMatrices rotation;  // R_h (hd x hd, float64, CPU)
  // ||W_h^(1) - R_h W_h^(2)||_F / ||W_h^(1)||_F per head (layer-major),
  // W_h = [W_Q,h | W_K,h] (hd x 2d); and its mean / max over heads.
  std::vector<double> residual;
  double residual_mean = 0;
  double residual_max = 0;
  // The same with R_h = I: how far apart the heads were before alignment.
  double unaligned_residual_mean = 0;
  double unaligned_residual_max = 0;
  // ||R_h - A_h^T||_F per head when the twin's A_h were given (empty
  // otherwise), and its mean / max (NaN without A_h).
  std::vector<double> rotation_error;
  double rotation_error_mean = 0;
  double rotation_error_max = 0;
};

// For every layer and head: M_h = W_h^(1) W_h^(2)T, R_h = procrustes(M_h).
// `gauge`: the A_h that made copy 2 (gauge_matrices), or null.
Alignment align_heads(const model::Transformer& m1,
                      const model::Transformer& m2,
                      const HeadMatrices* gauge = nullptr);

// W_Q,h <- R_h W_Q,h and W_K,h <- R_h W_K,h for every layer and head, in
// place (computed in float64, cast back); nothing else changes. Apply it to
// a copy of model 2.
void apply_alignment(model::Transformer& model, const HeadMatrices& rotation);

// The A_h of a gauge twin of `spec` (gauge_matrices with its twin seed);
// empty for identity and noise twins.
HeadMatrices twin_gauge(const PairSpec& spec);

// Throws a one-line error unless head merging (§9) is measured for `spec`:
// the QK gauge (or an identity or noise twin) of the paper's attention.
// Merging under the VO gauge, grouped-query attention or rotary positions
// is not built yet.
void check_mergeable(const PairSpec& spec);

// ---------------------------------------------------------------------------
// Interpolation and the loss barrier

// out <- (1 - lambda) m1 + lambda m2, every parameter, computed in float64
// and cast to out's dtype. Exact at lambda 0 and 1 (out is then bitwise m1
// or m2). All three models have the same shape.
void interpolate(const model::Transformer& m1, const model::Transformer& m2,
                 double lambda, model::Transformer& out);

// lambda = 0, 0.1, ..., 1 (i / 10, so both ends are exact).
std::vector<double> merge_lambdas();

// max over the grid of L(lambda) - ((1 - lambda) L(0) + lambda L(1)); NaN if
// any loss is not finite. Never negative: the ends contribute 0.
double loss_barrier(const std::vector<double>& lambdas,
                    const std::vector<double>& losses);

// The validation loss and accuracy along the linear path m1 -> m2.
struct LossPath {
  std::vector<double> loss;  // one per merge_lambdas()
  std::vector<double> acc;
  double barrier = 0;
};

// At lambda 0 and 1 the models themselves are evaluated, so the ends are
// bitwise each model's own loss; inside, a scratch model.
LossPath loss_path(model::Transformer& m1, model::Transformer& m2,
                   const data::Task& task);

// ---------------------------------------------------------------------------
// One checkpoint

// Everything the merge measurement records at one checkpoint.
struct MergePoint {
  int64_t step = 0;
  std::vector<double> lambdas;  // merge_lambdas()
  LossPath naive;               // copy 1 -> copy 2 as trained
  LossPath aligned;             // copy 1 -> copy 2 after align_heads
  Alignment alignment;          // R_h are not recorded, only their summary
  double qk_drift_mean = 0;     // W_Q^T W_K drift (no rotation changes it)
  double qk_drift_max = 0;
};

// Aligns a copy of m2 to m1, walks both paths and records the summary
// (its record: twins/record.h). The
// models are not modified. `gauge`: the twin's A_h, or null (then the
// rotation errors are NaN).
MergePoint measure_merge(model::Transformer& m1, model::Transformer& m2,
                         const data::Task& task, int64_t step,
                         const HeadMatrices* gauge = nullptr);

}  // namespace twins
