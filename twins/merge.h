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
#include <optional>
#include <vector>

#include "data/task.h"
#include "model/transformer.h"
#include "twins/gauge.h"
#include "twins/metrics.h"
#include "twins/spec.h"

namespace twins {

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

// The same maximum over the rotations that commute with rotary positions
// (docs/protocol.md §2): R block-diagonal, pair (2i, 2i+1) turned by the
// angle atan2(M_10 - M_01, M_00 + M_11) of M's 2 x 2 block on that pair
// (float64, CPU). M square with an even side; a block with both terms 0
// (M = 0, or two equal heads) gives that pair I exactly.
torch::Tensor pair_procrustes(const torch::Tensor& M);

// The group an alignment of the query/key side is fitted in.
enum class QkFit {
  kOrthogonal,  // all of O(hd): the gauge of the paper's attention
  kRopePairs,   // SO(2)^(hd/2): the gauge under rotary positions
};

// The alignment of one side (query/key or value/output) of copy 2 to copy 1.
// Its units are the key/value heads: under grouped-query attention one
// rotation serves a key/value head and each of its query heads.
struct Alignment {
  HeadMatrices rotation;  // R_j (hd x hd, float64, CPU)
  // ||W_j^(1) - R_j W_j^(2)||_F / ||W_j^(1)||_F per key/value head
  // (layer-major), W_j the side's stacked block of head j (align_heads,
  // align_values); and its mean / max over heads.
  std::vector<double> residual;
  double residual_mean = 0;
  double residual_max = 0;
  // The same with R_j = I: how far apart the heads were before alignment.
  double unaligned_residual_mean = 0;
  double unaligned_residual_max = 0;
  // ||R_j - A_j^T||_F per head when the twin's A_j were given (empty
  // otherwise), and its mean / max (NaN without A_j).
  std::vector<double> rotation_error;
  double rotation_error_mean = 0;
  double rotation_error_max = 0;
};

// The query/key side. For every layer and key head j: W_j = [W_Q,h ... |
// W_K,j] (hd x (g + 1) d, the rows of its g query heads in order, then its
// own), M_j = W_j^(1) W_j^(2)T and R_j = procrustes(M_j), or
// pair_procrustes(M_j) under QkFit::kRopePairs. `gauge`: the A_j that made
// copy 2, or null.
Alignment align_heads(const model::Transformer& m1,
                      const model::Transformer& m2,
                      const HeadMatrices* gauge = nullptr,
                      QkFit fit = QkFit::kOrthogonal);

// The value/output side. For every layer and value head j: W_j = [W_V,j |
// W_O,h^T ...] (hd x (g + 1) d: its rows of W_V, then the transposed W_O
// columns of each of its query heads), R_j = procrustes(W_j^(1) W_j^(2)T).
// `gauge`: the B_j that made copy 2, or null.
Alignment align_values(const model::Transformer& m1,
                       const model::Transformer& m2,
                       const HeadMatrices* gauge = nullptr);

// W_K,j <- R_j W_K,j and W_Q,h <- R_j W_Q,h for each query head h of key
// head j, every layer, in place (computed in float64, cast back); nothing
// else changes. Apply it to a copy of model 2.
void apply_alignment(model::Transformer& model, const HeadMatrices& rotation);

// W_V,j <- R_j W_V,j and W_O,h <- W_O,h R_j^T for each query head h of
// value head j, every layer, in place (float64, cast back).
void apply_value_alignment(model::Transformer& model,
                           const HeadMatrices& rotation);

// What a merge aligns for a pair, and the rotations that made its copy 2.
struct MergeGauge {
  bool values = false;  // align the value/output side too
  GaugeDraw twin;       // the twin's own matrices; empty sides: none
};

// The merge of a pair of `spec`: the query/key side is always aligned, the
// value/output side when the twin rotated it (gauge-vo, gauge-all), with the
// twin's own gauge_draw for the rotation errors (empty for identity and
// noise twins).
MergeGauge twin_gauge(const PairSpec& spec);

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
  LossPath aligned;             // copy 1 -> copy 2 after every alignment
  Alignment alignment;  // query/key side; R_j are not recorded, only summary
  std::optional<Alignment> values;  // value/output side, when aligned
  double qk_drift_mean = 0;         // W_Q^T W_K drift (no rotation changes it)
  double qk_drift_max = 0;
  double vo_drift_mean = 0;  // W_O W_V drift, with `values` only
  double vo_drift_max = 0;
  // Under rotary positions, the comparison: the query/key side fitted in all
  // of O(hd) (not a symmetry there), the value/output side as in `aligned`.
  struct Unrestricted {
    LossPath path;
    Alignment alignment;
  };
  std::optional<Unrestricted> unrestricted;
};

// Aligns a copy of m2 to m1 (the query/key side in the group the models'
// attention keeps, the value/output side when `gauge.values`), walks both
// paths and records the summary (its record: twins/record.h). The models
// are not modified. Rotation errors are NaN for a side `gauge.twin` leaves
// empty.
MergePoint measure_merge(model::Transformer& m1, model::Transformer& m2,
                         const data::Task& task, int64_t step,
                         const MergeGauge& gauge = {});

}  // namespace twins
