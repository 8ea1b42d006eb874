#include "optim/scion.h"

#include <cmath>

namespace optim {

Hparams ScionOptions::rule_hparams() const {
  return {{"alpha", alpha()},
          {"scale", scale()},
          {"norm", norm() == ScionNorm::kColumn ? 0.0 : 1.0},
          {"normalized", double(normalized())},
          {"eps", eps()}};
}

void ScionOptions::check() const {
  TORCH_CHECK(0 < alpha() && alpha() <= 1.0, "Invalid alpha value: ", alpha());
  TORCH_CHECK(scale() > 0, "Invalid scale value: ", scale());
  TORCH_CHECK(eps() >= 0, "Invalid epsilon value: ", eps());
}

torch::Tensor scion_col_lmo(const torch::Tensor& X, bool normalized,
                            double eps) {
  TORCH_CHECK(X.dim() == 2, "scion_col_lmo needs a matrix, got ", X.sizes());
  torch::Tensor rms = X.norm(2, {0}, /*keepdim=*/true) / std::sqrt(X.size(0));
  if (normalized)
    rms = rms * double(X.size(1));
  return X / (rms + eps);
}

torch::Tensor scion_row_lmo(const torch::Tensor& X, bool normalized,
                            double eps) {
  TORCH_CHECK(X.dim() == 2, "scion_row_lmo needs a matrix, got ", X.sizes());
  torch::Tensor rms = X.norm(2, {1}, /*keepdim=*/true);
  if (normalized)
    rms = rms * std::sqrt(double(X.size(1)));
  return X / (rms + eps);
}

Scion::Scion(std::vector<torch::Tensor> matrices,
             std::vector<torch::Tensor> others, ScionOptions defaults)
    : HybridOptimizer("Scion", std::move(matrices), std::move(others),
                      defaults) {}

void Scion::start(const torch::Tensor& p, ParamState& state,
                  const ScionOptions&) const {
  state.set("momentum_buffer", torch::zeros_like(p));
}

void Scion::update(const torch::Tensor& p, const torch::Tensor& grad,
                   ParamState& state, const ScionOptions& options) {
  const torch::Tensor& b = state.at("momentum_buffer")
                               .mul_(1 - options.alpha())
                               .add_(grad, options.alpha());
  const torch::Tensor lmo =
      options.norm() == ScionNorm::kColumn
          ? scion_col_lmo(b, options.normalized(), options.eps())
          : scion_row_lmo(b, options.normalized(), options.eps());
  p.add_(lmo, -options.lr() * options.scale());
}

}  // namespace optim
