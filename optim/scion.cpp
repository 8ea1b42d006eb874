#include "optim/scion.h"

#include <cmath>

namespace optim {

namespace {

void check_scion_options(const ScionOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(0 < o.alpha() && o.alpha() <= 1.0,
              "Invalid alpha value: ", o.alpha());
  TORCH_CHECK(o.scale() > 0, "Invalid scale value: ", o.scale());
  TORCH_CHECK(o.eps() >= 0, "Invalid epsilon value: ", o.eps());
  check_adam_options(o.adam_lr(), o.adam_betas(), o.adam_eps());
}

ScionOptions with_use_scion(ScionOptions o, bool on) {
  o.use_scion(on);
  return o;
}

}  // namespace

Hparams ScionOptions::hparams() const {
  return {{"alpha", alpha()},
          {"scale", scale()},
          {"norm", norm() == ScionNorm::kColumn ? 0.0 : 1.0},
          {"normalized", double(normalized())},
          {"eps", eps()},
          {"adam_lr", adam_lr()},
          {"adam_beta1", std::get<0>(adam_betas())},
          {"adam_beta2", std::get<1>(adam_betas())},
          {"adam_eps", adam_eps()},
          {"weight_decay", 0.0}};
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
    : StatefulOptimizer(
          hybrid_groups("Scion", std::move(matrices), std::move(others),
                        defaults, with_use_scion),
          std::make_unique<ScionOptions>(defaults)) {
  check_scion_options(defaults);
}

torch::Tensor Scion::step(LossClosure closure) {
  return step_each<ScionOptions>(
      closure, [](const ScionOptions& o) { check_scion_options(o); },
      [&](const torch::Tensor& p, ScionOptions& o) {
        const torch::Tensor& grad = p.grad();
        auto& state = state_for<ScionParamState>(p, [&] {
          auto s = std::make_unique<ScionParamState>();
          if (o.use_scion()) {
            s->momentum_buffer(torch::zeros_like(p));
          } else {
            start_adam_moments(*s, p);
          }
          return s;
        });
        state.step(state.step() + 1);
        if (o.use_scion()) {
          const torch::Tensor& b =
              state.momentum_buffer().mul_(1 - o.alpha()).add_(grad, o.alpha());
          const torch::Tensor lmo =
              o.norm() == ScionNorm::kColumn
                  ? scion_col_lmo(b, o.normalized(), o.eps())
                  : scion_row_lmo(b, o.normalized(), o.eps());
          p.add_(lmo, -o.lr() * o.scale());
        } else {
          hybrid_adam_update_(p, grad, state, o);
        }
      });
}

}  // namespace optim
