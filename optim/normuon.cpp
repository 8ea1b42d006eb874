#include "optim/normuon.h"

#include <algorithm>
#include <cmath>

#include "optim/newton_schulz.h"

namespace optim {

namespace {

void check_normuon_options(const NorMuonOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(0 <= o.momentum() && o.momentum() < 1.0,
              "Invalid momentum value: ", o.momentum());
  TORCH_CHECK(0 <= o.beta2() && o.beta2() < 1.0,
              "Invalid beta2 value: ", o.beta2());
  TORCH_CHECK(o.eps() >= 0, "Invalid epsilon value: ", o.eps());
  TORCH_CHECK(o.ns_steps() >= 1, "Invalid Newton-Schulz steps: ", o.ns_steps());
  check_adam_options(o.adam_lr(), o.adam_betas(), o.adam_eps());
}

NorMuonOptions with_use_normuon(NorMuonOptions o, bool on) {
  o.use_normuon(on);
  return o;
}

}  // namespace

Hparams NorMuonOptions::hparams() const {
  return {{"momentum", momentum()},
          {"nesterov", double(nesterov())},
          {"beta2", beta2()},
          {"eps", eps()},
          {"ns_steps", double(ns_steps())},
          {"shape_scale", double(shape_scale())},
          {"adam_lr", adam_lr()},
          {"adam_beta1", std::get<0>(adam_betas())},
          {"adam_beta2", std::get<1>(adam_betas())},
          {"adam_eps", adam_eps()},
          {"weight_decay", 0.0}};
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
                                const NorMuonOptions& o) {
  momentum_buffer.lerp_(grad, 1 - o.momentum());
  const torch::Tensor u =
      o.nesterov() ? grad.lerp(momentum_buffer, o.momentum()) : momentum_buffer;
  torch::Tensor d = normuon_normalize(newton_schulz5(u, o.ns_steps()),
                                      second_moment, o.beta2(), o.eps());
  if (o.shape_scale()) {
    d.mul_(std::sqrt(std::max(1.0, double(grad.size(0)) / grad.size(1))));
  }
  return d;
}

NorMuon::NorMuon(std::vector<torch::Tensor> matrices,
                 std::vector<torch::Tensor> others, NorMuonOptions defaults)
    : StatefulOptimizer(
          hybrid_groups("NorMuon", std::move(matrices), std::move(others),
                        defaults, with_use_normuon),
          std::make_unique<NorMuonOptions>(defaults)) {
  check_normuon_options(defaults);
}

torch::Tensor NorMuon::step(LossClosure closure) {
  return step_each<NorMuonOptions>(
      closure, [](const NorMuonOptions& o) { check_normuon_options(o); },
      [&](const torch::Tensor& p, NorMuonOptions& o) {
        const torch::Tensor& grad = p.grad();
        auto& state = state_for<NorMuonParamState>(p, [&] {
          auto s = std::make_unique<NorMuonParamState>();
          if (o.use_normuon()) {
            s->momentum_buffer(torch::zeros_like(p));
            s->second_moment(torch::zeros({p.size(0), 1}, p.options()));
          } else {
            start_adam_moments(*s, p);
          }
          return s;
        });
        state.step(state.step() + 1);
        if (o.use_normuon()) {
          p.add_(normuon_direction(grad, state.momentum_buffer(),
                                   state.second_moment(), o),
                 -o.lr());
        } else {
          hybrid_adam_update_(p, grad, state, o);
        }
      });
}

}  // namespace optim
