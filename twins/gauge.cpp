#include "twins/gauge.h"

#include <ATen/CPUGeneratorImpl.h>

namespace twins {

std::vector<std::vector<torch::Tensor>> gauge_matrices(int64_t depth,
                                                       int64_t heads,
                                                       int64_t head_dim,
                                                       uint64_t seed,
                                                       torch::Dtype draw) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<std::vector<torch::Tensor>> A(depth);
  for (int64_t l = 0; l < depth; ++l) {
    for (int64_t h = 0; h < heads; ++h) {
      torch::Tensor g =
          torch::randn({head_dim, head_dim}, gen, torch::TensorOptions(draw));
      A[l].push_back(std::get<0>(torch::linalg_qr(g)));
    }
  }
  return A;
}

void rotate_heads(model::Transformer& model,
                  const std::vector<std::vector<torch::Tensor>>& A) {
  torch::NoGradGuard no_grad;
  const auto& cfg = model->config();
  TORCH_CHECK(static_cast<int64_t>(A.size()) == cfg.depth,
              "rotate_heads: ", A.size(), " layers of matrices for depth ",
              cfg.depth);
  for (int64_t l = 0; l < cfg.depth; ++l) {
    TORCH_CHECK(static_cast<int64_t>(A[l].size()) == cfg.heads,
                "rotate_heads: ", A[l].size(), " matrices for ", cfg.heads,
                " heads");
    for (int64_t h = 0; h < cfg.heads; ++h) {
      torch::Tensor q = model->query_block(l, h);  // (hd, d) view
      torch::Tensor k = model->key_block(l, h);
      torch::Tensor a = A[l][h].to(q.device(), q.scalar_type());
      q.copy_(torch::mm(a, q));
      k.copy_(torch::mm(a, k));
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
  const auto& cfg = model->config();
  switch (kind) {
    case TwinKind::kGauge:
      rotate_heads(model, gauge_matrices(cfg.depth, cfg.heads, cfg.head_dim(),
                                         seed, draw));
      return;
    case TwinKind::kIdentity: {
      std::vector<std::vector<torch::Tensor>> I(
          cfg.depth,
          std::vector<torch::Tensor>(
              cfg.heads, torch::eye(cfg.head_dim(), torch::kDouble)));
      rotate_heads(model, I);
      return;
    }
    case TwinKind::kNoise:
      add_qk_noise(model, seed, noise_scale, draw);
      return;
  }
}

}  // namespace twins
