#include "twins/merge.h"

#include <cfloat>
#include <cmath>
#include <limits>

#include "model/loss.h"
#include "twins/gauge.h"
#include "twins/metrics.h"

namespace twins {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
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

// [W_Q,h | W_K,h] of one head: (hd, 2d) in float64 on the CPU.
torch::Tensor stacked_head(const model::Transformer& model, int64_t layer,
                           int64_t head) {
  return torch::cat(
             {model->query_block(layer, head), model->key_block(layer, head)},
             1)
      .to(torch::kCPU, torch::kDouble);
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

Alignment align_heads(const model::Transformer& m1,
                      const model::Transformer& m2, const HeadMatrices* gauge) {
  torch::NoGradGuard no_grad;
  const auto& cfg = m1->config();
  const auto& cfg2 = m2->config();
  TORCH_CHECK(cfg.depth == cfg2.depth && cfg.heads == cfg2.heads &&
                  cfg.d_model == cfg2.d_model,
              "align_heads: the two models have different shapes");
  if (gauge != nullptr) {
    TORCH_CHECK(static_cast<int64_t>(gauge->size()) == cfg.depth,
                "align_heads: ", gauge->size(),
                " layers of gauge matrices for depth ", cfg.depth);
  }
  Alignment a;
  std::vector<double> unaligned;
  for (int64_t l = 0; l < cfg.depth; ++l) {
    a.rotation.emplace_back();
    if (gauge != nullptr) {
      TORCH_CHECK(static_cast<int64_t>((*gauge)[l].size()) == cfg.heads,
                  "align_heads: ", (*gauge)[l].size(), " gauge matrices for ",
                  cfg.heads, " heads");
    }
    for (int64_t h = 0; h < cfg.heads; ++h) {
      const torch::Tensor w1 = stacked_head(m1, l, h);  // (hd, 2d)
      const torch::Tensor w2 = stacked_head(m2, l, h);
      const torch::Tensor R = procrustes(w1.mm(w2.t()));  // (hd, hd)
      const double n1 = w1.norm().item<double>();
      a.residual.push_back((w1 - R.mm(w2)).norm().item<double>() / n1);
      unaligned.push_back((w1 - w2).norm().item<double>() / n1);
      if (gauge != nullptr) {
        const torch::Tensor A = (*gauge)[l][h].to(torch::kCPU, torch::kDouble);
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

void apply_alignment(model::Transformer& model, const HeadMatrices& rotation) {
  torch::NoGradGuard no_grad;
  const auto& cfg = model->config();
  TORCH_CHECK(static_cast<int64_t>(rotation.size()) == cfg.depth,
              "apply_alignment: ", rotation.size(), " layers of rotations for ",
              "depth ", cfg.depth);
  for (int64_t l = 0; l < cfg.depth; ++l) {
    TORCH_CHECK(static_cast<int64_t>(rotation[l].size()) == cfg.heads,
                "apply_alignment: ", rotation[l].size(), " rotations for ",
                cfg.heads, " heads");
    for (int64_t h = 0; h < cfg.heads; ++h) {
      for (torch::Tensor w :
           {model->query_block(l, h), model->key_block(l, h)}) {
        const torch::Tensor R = rotation[l][h].to(w.device(), torch::kDouble);
        w.copy_(R.mm(w.to(torch::kDouble)).to(w.scalar_type()));
      }
    }
  }
}

void check_mergeable(const PairSpec& spec) {
  const bool gauge_ok = spec.twin == TwinKind::kGauge || !is_gauge(spec.twin);
  TORCH_CHECK(gauge_ok && !spec.rope && spec.kv_head_count() == spec.heads,
              "head merging is measured for the QK gauge of the paper's "
              "attention; not yet for --twin ",
              to_string(spec.twin), spec.rope ? " with --rope" : "",
              spec.kv_head_count() != spec.heads ? " with --kv-heads" : "");
}

HeadMatrices twin_gauge(const PairSpec& spec) {
  if (spec.twin != TwinKind::kGauge)
    return {};
  return gauge_matrices(spec.depth, spec.heads, spec.d_model / spec.heads,
                        spec.twin_seed, draw_dtype(spec.protocol));
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
      return kNaN;
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
                         const HeadMatrices* gauge) {
  MergePoint p;
  p.step = step;
  p.lambdas = merge_lambdas();
  p.naive = loss_path(m1, m2, task);
  p.alignment = align_heads(m1, m2, gauge);
  model::Transformer aligned = scratch_like(m2);
  model::copy_parameters(m2, aligned);
  apply_alignment(aligned, p.alignment.rotation);
  p.aligned = loss_path(m1, aligned, task);
  summarise(qk_drift_per_head(m1, m2), &p.qk_drift_mean, &p.qk_drift_max);
  return p;
}

}  // namespace twins
