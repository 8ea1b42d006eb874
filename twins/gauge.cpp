#include "twins/gauge.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace twins {

namespace {

// A_h: the Q of a Gaussian's QR decomposition, in `draw`.
torch::Tensor orthogonal(at::Generator& gen, int64_t hd, torch::Dtype draw) {
  torch::Tensor g = torch::randn({hd, hd}, gen, torch::TensorOptions(draw));
  return std::get<0>(torch::linalg_qr(g));
}

// Block-diagonal: pair (2i, 2i+1) turned by an angle uniform in [0, 2pi),
// computed in double and cast to `draw`.
torch::Tensor pair_rotation(at::Generator& gen, int64_t hd, torch::Dtype draw) {
  const auto in_double = torch::TensorOptions().dtype(torch::kDouble);
  const torch::Tensor angle =
      torch::rand({hd / 2}, gen, in_double) * (2 * M_PI);
  const torch::Tensor c = angle.cos(), s = angle.sin();
  torch::Tensor r = torch::zeros({hd, hd}, in_double);
  for (int64_t i = 0; i < hd / 2; ++i) {
    r.index_put_({2 * i, 2 * i}, c[i]);
    r.index_put_({2 * i, 2 * i + 1}, -s[i]);
    r.index_put_({2 * i + 1, 2 * i}, s[i]);
    r.index_put_({2 * i + 1, 2 * i + 1}, c[i]);
  }
  return r.to(draw);
}

template <typename Draw>
HeadMatrices per_head(int64_t depth, int64_t heads, Draw one) {
  HeadMatrices out(depth);
  for (int64_t l = 0; l < depth; ++l) {
    for (int64_t h = 0; h < heads; ++h)
      out[l].push_back(one());
  }
  return out;
}

// m in w's dtype and on its device, to multiply w's head block.
torch::Tensor like(const torch::Tensor& m, const torch::Tensor& w) {
  return m.to(w.device(), w.scalar_type());
}

}  // namespace

void check_head_matrices(const HeadMatrices& m,
                         const model::ModelConfig& config, const char* what) {
  TORCH_CHECK(static_cast<int64_t>(m.size()) == config.depth, what, ": ",
              m.size(), " layers of matrices for depth ", config.depth);
  for (const auto& layer : m) {
    TORCH_CHECK(static_cast<int64_t>(layer.size()) == config.kv_head_count(),
                what, ": ", layer.size(), " matrices for ",
                config.kv_head_count(), " key/value heads");
  }
}

HeadMatrices gauge_matrices(int64_t depth, int64_t heads, int64_t head_dim,
                            uint64_t seed, torch::Dtype draw) {
  auto gen = at::detail::createCPUGenerator(seed);
  return per_head(depth, heads,
                  [&] { return orthogonal(gen, head_dim, draw); });
}

GaugeDraw gauge_draw(const model::ModelConfig& config, TwinKind kind,
                     uint64_t seed, torch::Dtype draw) {
  GaugeDraw out;
  if (!acts_on_qk(kind) && !acts_on_vo(kind))
    return out;
  auto gen = at::detail::createCPUGenerator(seed);
  const int64_t depth = config.depth, kv = config.kv_head_count();
  const int64_t hd = config.head_dim();
  if (acts_on_qk(kind)) {
    const bool commuting = config.rope && kind != TwinKind::kGaugeFull;
    out.qk = per_head(depth, kv, [&] {
      return commuting ? pair_rotation(gen, hd, draw)
                       : orthogonal(gen, hd, draw);
    });
  }
  if (acts_on_vo(kind))
    out.vo = per_head(depth, kv, [&] { return orthogonal(gen, hd, draw); });
  return out;
}

void rotate_heads(model::Transformer& model, const HeadMatrices& A) {
  torch::NoGradGuard no_grad;
  const auto& config = model->config();
  check_head_matrices(A, config, "rotate_heads");
  const int64_t group = config.group();
  for (int64_t l = 0; l < config.depth; ++l) {
    for (int64_t h = 0; h < config.heads; ++h) {
      torch::Tensor q = model->query_block(l, h);  // (hd, d) view
      q.copy_(torch::mm(like(A[l][h / group], q), q));
    }
    for (int64_t j = 0; j < config.kv_head_count(); ++j) {
      torch::Tensor k = model->key_block(l, j);
      k.copy_(torch::mm(like(A[l][j], k), k));
    }
  }
}

void rotate_values(model::Transformer& model, const HeadMatrices& B) {
  torch::NoGradGuard no_grad;
  const auto& config = model->config();
  check_head_matrices(B, config, "rotate_values");
  const int64_t group = config.group();
  for (int64_t l = 0; l < config.depth; ++l) {
    for (int64_t j = 0; j < config.kv_head_count(); ++j) {
      torch::Tensor v = model->value_block(l, j);  // (hd, d) view
      v.copy_(torch::mm(like(B[l][j], v), v));
    }
    for (int64_t h = 0; h < config.heads; ++h) {
      torch::Tensor o = model->output_block(l, h);  // (d, hd) view
      o.copy_(torch::mm(o, like(B[l][h / group], o).t()));
    }
  }
}

void add_qk_noise(model::Transformer& model, uint64_t seed, double scale,
                  torch::Dtype draw) {
  TORCH_CHECK(scale >= 0 && std::isfinite(scale), "Invalid noise scale: ",
              scale);
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& block : model->blocks) {
    for (auto* w : {&block->attn->wq->weight, &block->attn->wk->weight}) {
      torch::Tensor n =
          torch::randn(w->sizes(), gen, torch::TensorOptions(draw));
      w->add_((n * scale).to(w->device(), w->scalar_type()));
    }
  }
}

void apply_twin(model::Transformer& model, TwinKind kind, uint64_t seed,
                double noise_scale, torch::Dtype draw) {
  const auto& config = model->config();
  switch (kind) {
    case TwinKind::kIdentity:
      rotate_heads(model,
                   HeadMatrices(config.depth, std::vector<torch::Tensor>(
                                                  config.kv_head_count(),
                                                  torch::eye(config.head_dim(),
                                                             torch::kDouble))));
      return;
    case TwinKind::kNoise:
      add_qk_noise(model, seed, noise_scale, draw);
      return;
    case TwinKind::kRoundTrip: {
      // gauge-all's rotations, each undone at once: A^T (A W_Q), B^T (B W_V)
      // and (W_O B^T) B, in the model's dtype.
      const GaugeDraw g = gauge_draw(config, TwinKind::kGaugeAll, seed, draw);
      rotate_heads(model, g.qk);
      rotate_heads(model, transposed(g.qk));
      rotate_values(model, g.vo);
      rotate_values(model, transposed(g.vo));
      return;
    }
    default:
      apply_gauge(model, gauge_draw(config, kind, seed, draw));
  }
}

HeadMatrices transposed(const HeadMatrices& m) {
  HeadMatrices out(m.size());
  for (size_t l = 0; l < m.size(); ++l) {
    for (const torch::Tensor& a : m[l])
      out[l].push_back(a.t().contiguous());
  }
  return out;
}

void apply_gauge(model::Transformer& model, const GaugeDraw& gauge) {
  if (!gauge.qk.empty())
    rotate_heads(model, gauge.qk);
  if (!gauge.vo.empty())
    rotate_values(model, gauge.vo);
}

}  // namespace twins
