#include "twins/merge.h"

#include <cfloat>
#include <cmath>
#include <limits>

#include "model/loss.h"
#include "twins/gauge.h"
#include "twins/metrics.h"

namespace twins {

namespace {

constexpr int kLambdaSteps = 10;  // lambda = i / 10, docs/protocol.md §9

// Symmetric bitwise and without an eigenvalue below round-off of zero.
bool symmetric_psd(const torch::Tensor& M) {
  if (!torch::equal(M, M.t()))
    return false;
  const torch::Tensor ev = torch::linalg_eigvalsh(M, "L");
  const double scale = ev.abs().max().item<double>();
  const double tol = double(M.size(0)) * DBL_EPSILON * scale;
  return ev.min().item<double>() >= -tol;
}

// The query heads that share key/value head j: g of them, in order.
std::vector<int64_t> query_heads_of(const model::ModelConfig& config,
                                    int64_t j) {
  const int64_t group = config.group();
  std::vector<int64_t> heads;
  for (int64_t h = j * group; h < (j + 1) * group; ++h)
    heads.push_back(h);
  return heads;
}

// [W_Q,h ... | W_K,j] of key head j: (hd, (g + 1) d) in float64 on the CPU.
torch::Tensor stacked_qk(const model::Transformer& model, int64_t layer,
                         int64_t j) {
  std::vector<torch::Tensor> blocks;
  for (int64_t h : query_heads_of(model->config(), j))
    blocks.push_back(model->query_block(layer, h));
  blocks.push_back(model->key_block(layer, j));
  return torch::cat(blocks, 1).to(torch::kCPU, torch::kDouble);
}

// [W_V,j | W_O,h^T ...] of value head j: (hd, (g + 1) d), float64, CPU.
torch::Tensor stacked_vo(const model::Transformer& model, int64_t layer,
                         int64_t j) {
  std::vector<torch::Tensor> blocks{model->value_block(layer, j)};
  for (int64_t h : query_heads_of(model->config(), j))
    blocks.push_back(model->output_block(layer, h).t());
  return torch::cat(blocks, 1).to(torch::kCPU, torch::kDouble);
}

using Stack = torch::Tensor (*)(const model::Transformer&, int64_t, int64_t);
using Fit = torch::Tensor (*)(const torch::Tensor&);

// One side's alignment: per layer and key/value head, the stacked blocks
// W^(1), W^(2), R = fit(W^(1) W^(2)T), the residuals and, given the twin's
// matrices, the rotation errors.
Alignment align_side(const model::Transformer& m1, const model::Transformer& m2,
                     Stack stack, Fit fit, const HeadMatrices* gauge,
                     const char* what) {
  torch::NoGradGuard no_grad;
  const auto& cfg = m1->config();
  const auto& cfg2 = m2->config();
  TORCH_CHECK(cfg.depth == cfg2.depth && cfg.heads == cfg2.heads &&
                  cfg.d_model == cfg2.d_model &&
                  cfg.kv_head_count() == cfg2.kv_head_count(),
              what, ": the two models have different shapes");
  const int64_t kv = cfg.kv_head_count();
  if (gauge != nullptr)
    check_head_matrices(*gauge, cfg, what);
  Alignment a;
  std::vector<double> unaligned;
  for (int64_t l = 0; l < cfg.depth; ++l) {
    a.rotation.emplace_back();
    for (int64_t j = 0; j < kv; ++j) {
      const torch::Tensor w1 = stack(m1, l, j);  // (hd, (g + 1) d)
      const torch::Tensor w2 = stack(m2, l, j);
      const torch::Tensor R = fit(w1.mm(w2.t()));  // (hd, hd)
      const double n1 = w1.norm().item<double>();
      a.residual.push_back((w1 - R.mm(w2)).norm().item<double>() / n1);
      unaligned.push_back((w1 - w2).norm().item<double>() / n1);
      if (gauge != nullptr) {
        const torch::Tensor A = (*gauge)[l][j].to(torch::kCPU, torch::kDouble);
        a.rotation_error.push_back((R - A.t()).norm().item<double>());
      }
      a.rotation.back().push_back(R);
    }
  }
  summarise(a.residual, &a.residual_mean, &a.residual_max);
  summarise(unaligned, &a.unaligned_residual_mean, &a.unaligned_residual_max);
  summarise(a.rotation_error, &a.rotation_error_mean, &a.rotation_error_max);
  return a;
}

// w <- R w (rotate_rows) or w <- w R^T (rotate_columns), computed in
// float64 and cast back to w's dtype, in place.
void rotate_rows(torch::Tensor w, const torch::Tensor& R) {
  w.copy_(R.to(w.device(), torch::kDouble)
              .mm(w.to(torch::kDouble))
              .to(w.scalar_type()));
}

void rotate_columns(torch::Tensor w, const torch::Tensor& R) {
  w.copy_(w.to(torch::kDouble)
              .mm(R.to(w.device(), torch::kDouble).t())
              .to(w.scalar_type()));
}

const HeadMatrices* side_or_null(const HeadMatrices& side) {
  return side.empty() ? nullptr : &side;
}

// A fresh model of m's shape, dtype and device; its weights are overwritten
// by the caller. model::build serialises on the global generator, so pairs
// built on other threads meanwhile keep their seed's weights.
model::Transformer scratch_like(const model::Transformer& model) {
  const torch::Tensor& p = model->tok_emb;
  return model::build(model->config(), 0, p.scalar_type(), p.device());
}

}  // namespace

// ---------------------------------------------------------------------------
// Alignment

torch::Tensor procrustes(const torch::Tensor& M_in) {
  TORCH_CHECK(M_in.dim() == 2 && M_in.size(0) == M_in.size(1),
              "procrustes: M must be square, got ", M_in.sizes());
  const torch::Tensor M = M_in.detach().to(torch::kCPU, torch::kDouble);
  TORCH_CHECK(torch::isfinite(M).all().item<bool>(),
              "procrustes: M has non-finite entries");
  const int64_t n = M.size(0);
  // I maximises tr(R^T M) = tr M when M is symmetric PSD, and is the
  // closest-to-I optimum when M is also singular (M = 0 included).
  if (n == 0 || symmetric_psd(M)) {
    return torch::eye(n, torch::kDouble);
  }
  auto [U, S, Vh] = torch::linalg_svd(M, /*full_matrices=*/true);
  // Numerical rank as numpy.linalg.matrix_rank: s > n * eps * s_max.
  const double tol = double(n) * DBL_EPSILON * S[0].item<double>();
  const int64_t r = (S > tol).sum().item<int64_t>();
  torch::Tensor R = U.narrow(1, 0, r).mm(Vh.narrow(0, 0, r));
  if (r == n)
    return R;
  // Null spaces: U0 spans ker M^T, V0 spans ker M. Any R0 = U0 Q V0^T with Q
  // orthogonal completes an optimum; tr(U0 Q V0^T) = tr(Q^T (U0^T V0)) is
  // largest for Q = procrustes(U0^T V0).
  const torch::Tensor U0 = U.narrow(1, r, n - r);       // (n, k)
  const torch::Tensor V0 = Vh.narrow(0, r, n - r).t();  // (n, k)
  const torch::Tensor Q = procrustes(U0.t().mm(V0));    // (k, k)
  return R + U0.mm(Q).mm(V0.t());
}

torch::Tensor pair_procrustes(const torch::Tensor& M_in) {
  TORCH_CHECK(
      M_in.dim() == 2 && M_in.size(0) == M_in.size(1) && M_in.size(0) % 2 == 0,
      "pair_procrustes: M must be square with an even side, got ",
      M_in.sizes());
  const torch::Tensor M = M_in.detach().to(torch::kCPU, torch::kDouble);
  TORCH_CHECK(torch::isfinite(M).all().item<bool>(),
              "pair_procrustes: M has non-finite entries");
  const auto m = M.accessor<double, 2>();
  torch::Tensor R = torch::zeros_like(M);
  auto r = R.accessor<double, 2>();
  for (int64_t i = 0; i + 1 < M.size(0); i += 2) {
    // tr(R^T M) over the pair = cos t (M00 + M11) + sin t (M10 - M01).
    const double t =
        std::atan2(m[i + 1][i] - m[i][i + 1], m[i][i] + m[i + 1][i + 1]);
    const double c = std::cos(t), s = std::sin(t);
    r[i][i] = c;
    r[i][i + 1] = -s;
    r[i + 1][i] = s;
    r[i + 1][i + 1] = c;
  }
  return R;
}

Alignment align_heads(const model::Transformer& m1,
                      const model::Transformer& m2, const HeadMatrices* gauge,
                      QkFit fit) {
  return align_side(m1, m2, stacked_qk,
                    fit == QkFit::kRopePairs ? pair_procrustes : procrustes,
                    gauge, "align_heads");
}

Alignment align_values(const model::Transformer& m1,
                       const model::Transformer& m2,
                       const HeadMatrices* gauge) {
  return align_side(m1, m2, stacked_vo, procrustes, gauge, "align_values");
}

void apply_alignment(model::Transformer& model, const HeadMatrices& rotation) {
  torch::NoGradGuard no_grad;
  const auto& cfg = model->config();
  check_head_matrices(rotation, cfg, "apply_alignment");
  for (int64_t l = 0; l < cfg.depth; ++l) {
    for (int64_t j = 0; j < cfg.kv_head_count(); ++j) {
      for (int64_t h : query_heads_of(cfg, j))
        rotate_rows(model->query_block(l, h), rotation[l][j]);
      rotate_rows(model->key_block(l, j), rotation[l][j]);
    }
  }
}

void apply_value_alignment(model::Transformer& model,
                           const HeadMatrices& rotation) {
  torch::NoGradGuard no_grad;
  const auto& cfg = model->config();
  check_head_matrices(rotation, cfg, "apply_value_alignment");
  for (int64_t l = 0; l < cfg.depth; ++l) {
    for (int64_t j = 0; j < cfg.kv_head_count(); ++j) {
      rotate_rows(model->value_block(l, j), rotation[l][j]);
      for (int64_t h : query_heads_of(cfg, j))
        rotate_columns(model->output_block(l, h), rotation[l][j]);
    }
  }
}

MergeGauge twin_gauge(const PairSpec& spec) {
  MergeGauge g;
  g.values = acts_on_vo(spec.twin);
  if (is_gauge(spec.twin)) {
    model::ModelConfig shape;  // what gauge_draw reads of the model
    shape.depth = spec.depth;
    shape.d_model = spec.d_model;
    shape.heads = spec.heads;
    shape.kv_heads = spec.kv_heads;
    shape.rope = spec.rope;
    g.twin =
        gauge_draw(shape, spec.twin, spec.twin_seed, draw_dtype(spec.protocol));
  }
  return g;
}

// ---------------------------------------------------------------------------
// Interpolation and the loss barrier

void interpolate(const model::Transformer& m1, const model::Transformer& m2,
                 double lambda, model::Transformer& out) {
  torch::NoGradGuard no_grad;
  const auto p1 = m1->parameters(), p2 = m2->parameters();
  auto po = out->parameters();
  TORCH_CHECK(p1.size() == p2.size() && p1.size() == po.size(),
              "interpolate: ", p1.size(), ", ", p2.size(), " and ", po.size(),
              " parameters");
  for (size_t i = 0; i < po.size(); ++i) {
    TORCH_CHECK(
        p1[i].sizes() == p2[i].sizes() && p1[i].sizes() == po[i].sizes(),
        "interpolate: parameter ", i, " has shapes ", p1[i].sizes(), ", ",
        p2[i].sizes(), " and ", po[i].sizes());
    // (1 - 0) x + 0 y = x and 0 x + 1 y = y exactly for finite x, y.
    const torch::Tensor t = (1.0 - lambda) * p1[i].to(torch::kDouble) +
                            lambda * p2[i].to(torch::kDouble);
    po[i].copy_(t);
  }
}

std::vector<double> merge_lambdas() {
  std::vector<double> l;
  for (int i = 0; i <= kLambdaSteps; ++i)
    l.push_back(i / double(kLambdaSteps));
  return l;
}

double loss_barrier(const std::vector<double>& lambdas,
                    const std::vector<double>& losses) {
  TORCH_CHECK(lambdas.size() == losses.size() && lambdas.size() >= 2,
              "loss_barrier: ", lambdas.size(), " lambdas and ", losses.size(),
              " losses");
  const double l0 = losses.front(), l1 = losses.back();
  double b = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    if (!std::isfinite(losses[i]))
      return std::numeric_limits<double>::quiet_NaN();
    const double lam = lambdas[i];
    b = std::max(b, losses[i] - ((1 - lam) * l0 + lam * l1));
  }
  return b;
}

LossPath loss_path(model::Transformer& m1, model::Transformer& m2,
                   const data::Task& task) {
  const std::vector<double> lambdas = merge_lambdas();
  model::Transformer scratch = scratch_like(m1);
  LossPath p;
  for (size_t i = 0; i < lambdas.size(); ++i) {
    Evaluation e;
    if (i == 0) {
      e = evaluate(m1, task);
    } else if (i + 1 == lambdas.size()) {
      e = evaluate(m2, task);
    } else {
      interpolate(m1, m2, lambdas[i], scratch);
      e = evaluate(scratch, task);
    }
    p.loss.push_back(e.loss);
    p.acc.push_back(e.accuracy);
  }
  p.barrier = loss_barrier(lambdas, p.loss);
  return p;
}

// ---------------------------------------------------------------------------
// One checkpoint

MergePoint measure_merge(model::Transformer& m1, model::Transformer& m2,
                         const data::Task& task, int64_t step,
                         const MergeGauge& gauge) {
  const bool rope = m1->config().rope;
  MergePoint p;
  p.step = step;
  p.lambdas = merge_lambdas();
  p.naive = loss_path(m1, m2, task);
  p.alignment = align_heads(m1, m2, side_or_null(gauge.twin.qk),
                            rope ? QkFit::kRopePairs : QkFit::kOrthogonal);
  if (gauge.values)
    p.values = align_values(m1, m2, side_or_null(gauge.twin.vo));
  // Copy 2 with its value/output side aligned (when it is), then the
  // query/key side by `qk`: the path from copy 1 to it.
  auto aligned_path = [&](const Alignment& qk) {
    model::Transformer aligned = scratch_like(m2);
    model::copy_parameters(m2, aligned);
    if (p.values)
      apply_value_alignment(aligned, p.values->rotation);
    apply_alignment(aligned, qk.rotation);
    return loss_path(m1, aligned, task);
  };
  p.aligned = aligned_path(p.alignment);
  if (rope) {
    MergePoint::Unrestricted u;
    u.alignment = align_heads(m1, m2, side_or_null(gauge.twin.qk));
    u.path = aligned_path(u.alignment);
    p.unrestricted = std::move(u);
  }
  summarise(qk_drift_per_head(m1, m2), &p.qk_drift_mean, &p.qk_drift_max);
  if (p.values)
    summarise(vo_drift_per_head(m1, m2), &p.vo_drift_mean, &p.vo_drift_max);
  return p;
}

}  // namespace twins
