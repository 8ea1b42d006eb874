#include "optim/muon_torch.h"

#include <algorithm>
#include <cmath>

#include "optim/newton_schulz.h"

namespace optim {

Hparams MuonTorchOptions::rule_hparams() const {
  return {{"momentum", momentum()},
          {"nesterov", double(nesterov())},
          {"ns_a", ns_a()},
          {"ns_b", ns_b()},
          {"ns_c", ns_c()},
          {"eps", eps()},
          {"ns_steps", double(ns_steps())},
          {"shape_scale", double(shape_scale())}};
}

void MuonTorchOptions::check() const {
  TORCH_CHECK(0 <= momentum() && momentum() < 1.0,
              "Invalid momentum value: ", momentum());
  TORCH_CHECK(eps() > 0, "Invalid epsilon value: ", eps());
  check_newton_schulz_steps(ns_steps());
}

torch::Tensor newton_schulz_torch(const torch::Tensor& G, double a, double b,
                                  double c, int64_t steps, double eps) {
  TORCH_CHECK(G.dim() == 2, "newton_schulz_torch needs a matrix, got shape ",
              G.sizes());
  check_newton_schulz_steps(steps);
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
                                   const MuonTorchOptions& options) {
  const torch::Tensor u = muon_momentum_(
      grad, momentum_buffer, options.momentum(), options.nesterov());
  torch::Tensor d =
      newton_schulz_torch(u, options.ns_a(), options.ns_b(), options.ns_c(),
                          options.ns_steps(), options.eps());
  if (options.shape_scale()) {
    d = d * std::sqrt(std::max(1.0, double(grad.size(0)) / grad.size(1)));
  }
  return d;
}

MuonTorch::MuonTorch(std::vector<torch::Tensor> matrices,
                     std::vector<torch::Tensor> others,
                     MuonTorchOptions defaults)
    : HybridOptimizer("MuonTorch", std::move(matrices), std::move(others),
                      defaults) {}

void MuonTorch::start(const torch::Tensor& p, ParamState& state,
                      const MuonTorchOptions&) const {
  state.set("momentum_buffer", torch::zeros_like(p));
}

void MuonTorch::update(const torch::Tensor& p, const torch::Tensor& grad,
                       ParamState& state, const MuonTorchOptions& options) {
  p.add_(muon_torch_direction(grad, state.at("momentum_buffer"), options),
         -options.lr());
}

}  // namespace optim
