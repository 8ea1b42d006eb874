#include "optim/muon_torch.h"

#include <algorithm>
#include <cmath>

namespace optim {

namespace {

void check_muon_torch_options(const MuonTorchOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(0 <= o.momentum() && o.momentum() < 1.0,
              "Invalid momentum value: ", o.momentum());
  TORCH_CHECK(o.eps() > 0, "Invalid epsilon value: ", o.eps());
  TORCH_CHECK(o.ns_steps() >= 1 && o.ns_steps() < 100,
              "Invalid Newton-Schulz steps: ", o.ns_steps());
  check_adam_options(o.adam_lr(), o.adam_betas(), o.adam_eps());
}

MuonTorchOptions with_use_muon(MuonTorchOptions o, bool on) {
  o.use_muon(on);
  return o;
}

}  // namespace

Hparams MuonTorchOptions::hparams() const {
  return {{"momentum", momentum()},
          {"nesterov", double(nesterov())},
          {"ns_a", ns_a()},
          {"ns_b", ns_b()},
          {"ns_c", ns_c()},
          {"eps", eps()},
          {"ns_steps", double(ns_steps())},
          {"shape_scale", double(shape_scale())},
          {"adam_lr", adam_lr()},
          {"adam_beta1", std::get<0>(adam_betas())},
          {"adam_beta2", std::get<1>(adam_betas())},
          {"adam_eps", adam_eps()},
          {"weight_decay", 0.0}};
}

torch::Tensor newton_schulz_torch(const torch::Tensor& G, double a, double b,
                                  double c, int64_t steps, double eps) {
  TORCH_CHECK(G.dim() == 2, "newton_schulz_torch needs a matrix, got shape ",
              G.sizes());
  const bool tall = G.size(0) > G.size(1);
  torch::Tensor X = tall ? G.t() : G;
  X = X / X.norm().clamp_min(eps);
  for (int64_t i = 0; i < steps; ++i) {
    const torch::Tensor A = X.mm(X.t());
    X = a * X + (b * A + c * A.mm(A)).mm(X);
  }
  return tall ? X.t() : X;
}

torch::Tensor muon_torch_direction(const torch::Tensor& grad,
                                   const torch::Tensor& momentum_buffer,
                                   const MuonTorchOptions& o) {
  momentum_buffer.lerp_(grad, 1 - o.momentum());
  const torch::Tensor u =
      o.nesterov() ? grad.lerp(momentum_buffer, o.momentum()) : momentum_buffer;
  torch::Tensor d = newton_schulz_torch(u, o.ns_a(), o.ns_b(), o.ns_c(),
                                        o.ns_steps(), o.eps());
  if (o.shape_scale()) {
    d = d * std::sqrt(std::max(1.0, double(grad.size(0)) / grad.size(1)));
  }
  return d;
}

MuonTorch::MuonTorch(std::vector<torch::Tensor> matrices,
                     std::vector<torch::Tensor> others,
                     MuonTorchOptions defaults)
    : StatefulOptimizer(
          hybrid_groups("MuonTorch", std::move(matrices), std::move(others),
                        defaults, with_use_muon),
          std::make_unique<MuonTorchOptions>(defaults)) {
  check_muon_torch_options(defaults);
}

torch::Tensor MuonTorch::step(LossClosure closure) {
  return step_each<MuonTorchOptions>(
      closure, [](const MuonTorchOptions& o) { check_muon_torch_options(o); },
      [&](const torch::Tensor& p, MuonTorchOptions& o) {
        const torch::Tensor& grad = p.grad();
        auto& state = state_for<MuonTorchParamState>(p, [&] {
          auto s = std::make_unique<MuonTorchParamState>();
          if (o.use_muon()) {
            s->momentum_buffer(torch::zeros_like(p));
          } else {
            start_adam_moments(*s, p);
          }
          return s;
        });
        state.step(state.step() + 1);
        if (o.use_muon()) {
          p.add_(muon_torch_direction(grad, state.momentum_buffer(), o),
                 -o.lr());
        } else {
          hybrid_adam_update_(p, grad, state, o);
        }
      });
}

}  // namespace optim
