#include "optim/normuon.h"

#include <algorithm>
#include <cmath>

#include "optim/newton_schulz.h"

namespace optim {

Hparams NorMuonOptions::rule_hparams() const {
  return {{"momentum", momentum()},
          {"nesterov", double(nesterov())},
          {"beta2", beta2()},
          {"eps", eps()},
          {"ns_steps", double(ns_steps())},
          {"shape_scale", double(shape_scale())}};
}

void NorMuonOptions::check() const {
  TORCH_CHECK(0 <= momentum() && momentum() < 1.0,
              "Invalid momentum value: ", momentum());
  TORCH_CHECK(0 <= beta2() && beta2() < 1.0, "Invalid beta2 value: ", beta2());
  TORCH_CHECK(eps() >= 0, "Invalid epsilon value: ", eps());
  check_newton_schulz_steps(ns_steps());
}

torch::Tensor normuon_normalize(const torch::Tensor& O,
                                const torch::Tensor& second_moment,
                                double beta2, double eps) {
  second_moment.lerp_(O.square().mean(1, /*keepdim=*/true), 1 - beta2);
  torch::Tensor scaled = O / second_moment.sqrt().add(eps);
  return scaled.mul_(O.norm() / scaled.norm().add(eps));
}

torch::Tensor normuon_direction(const torch::Tensor& grad,
                                const torch::Tensor& momentum_buffer,
                                const torch::Tensor& second_moment,
                                const NorMuonOptions& options) {
  const torch::Tensor u = muon_momentum_(
      grad, momentum_buffer, options.momentum(), options.nesterov());
  torch::Tensor d =
      normuon_normalize(newton_schulz5(u, options.ns_steps()), second_moment,
                        options.beta2(), options.eps());
  if (options.shape_scale()) {
    d.mul_(std::sqrt(std::max(1.0, double(grad.size(0)) / grad.size(1))));
  }
  return d;
}

NorMuon::NorMuon(std::vector<torch::Tensor> matrices,
                 std::vector<torch::Tensor> others, NorMuonOptions defaults)
    : HybridOptimizer("NorMuon", std::move(matrices), std::move(others),
                      defaults) {}

void NorMuon::start(const torch::Tensor& p, ParamState& state,
                    const NorMuonOptions&) const {
  state.set("momentum_buffer", torch::zeros_like(p));
  state.set("second_moment", torch::zeros({p.size(0), 1}, p.options()));
}

void NorMuon::update(const torch::Tensor& p, const torch::Tensor& grad,
                     ParamState& state, const NorMuonOptions& options) {
  p.add_(normuon_direction(grad, state.at("momentum_buffer"),
                           state.at("second_moment"), options),
         -options.lr());
}

}  // namespace optim
