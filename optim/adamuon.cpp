#include "optim/adamuon.h"

#include <cmath>

#include "optim/newton_schulz.h"

namespace optim {

namespace {

void check_adamuon_options(const AdaMuonOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(0 <= o.momentum() && o.momentum() < 1.0,
              "Invalid momentum value: ", o.momentum());
  TORCH_CHECK(o.eps() >= 0, "Invalid epsilon value: ", o.eps());
  TORCH_CHECK(o.rms() > 0, "Invalid rms value: ", o.rms());
  TORCH_CHECK(o.ns_steps() >= 1, "Invalid Newton-Schulz steps: ", o.ns_steps());
  check_adam_options(o.adam_lr(), o.adam_betas(), o.adam_eps());
}

AdaMuonOptions with_use_adamuon(AdaMuonOptions o, bool on) {
  o.use_adamuon(on);
  return o;
}

}  // namespace

Hparams AdaMuonOptions::hparams() const {
  return {{"momentum", momentum()},
          {"nesterov", double(nesterov())},
          {"sign", double(sign())},
          {"ns_steps", double(ns_steps())},
          {"eps", eps()},
          {"rms", rms()},
          {"adam_lr", adam_lr()},
          {"adam_beta1", std::get<0>(adam_betas())},
          {"adam_beta2", std::get<1>(adam_betas())},
          {"adam_eps", adam_eps()},
          {"weight_decay", 0.0}};
}

torch::Tensor adamuon_direction(const torch::Tensor& grad,
                                const torch::Tensor& momentum_buffer,
                                const torch::Tensor& v_buffer,
                                const AdaMuonOptions& o) {
  momentum_buffer.lerp_(grad, 1 - o.momentum());
  torch::Tensor u =
      o.nesterov() ? grad.lerp(momentum_buffer, o.momentum()) : momentum_buffer;
  if (o.sign())
    u = u.sign();
  const torch::Tensor O = newton_schulz5(u, o.ns_steps());
  v_buffer.mul_(o.momentum()).addcmul_(O, O, 1 - o.momentum());
  torch::Tensor d = O / v_buffer.sqrt().add(o.eps());
  const double size = std::sqrt(double(grad.size(0)) * grad.size(1));
  return d.mul_(o.rms() * size / d.norm().add(o.eps()));
}

namespace {

// adam_lr 0 means "the matrix rate" (the reference's one learning rate).
AdaMuonOptions resolved(AdaMuonOptions o) {
  if (o.adam_lr() == 0)
    o.adam_lr(o.lr());
  return o;
}

}  // namespace

AdaMuon::AdaMuon(std::vector<torch::Tensor> matrices,
                 std::vector<torch::Tensor> others, AdaMuonOptions defaults)
    : StatefulOptimizer(
          hybrid_groups("AdaMuon", std::move(matrices), std::move(others),
                        resolved(defaults), with_use_adamuon),
          std::make_unique<AdaMuonOptions>(resolved(defaults))) {
  check_adamuon_options(resolved(defaults));
}

torch::Tensor AdaMuon::step(LossClosure closure) {
  return step_each<AdaMuonOptions>(
      closure, [](const AdaMuonOptions& o) { check_adamuon_options(o); },
      [&](const torch::Tensor& p, AdaMuonOptions& o) {
        const torch::Tensor& grad = p.grad();
        auto& state = state_for<AdaMuonParamState>(p, [&] {
          auto s = std::make_unique<AdaMuonParamState>();
          if (o.use_adamuon()) {
            s->momentum_buffer(torch::zeros_like(p));
            s->v_buffer(torch::zeros_like(p));
          } else {
            start_adam_moments(*s, p);
          }
          return s;
        });
        state.step(state.step() + 1);
        if (o.use_adamuon()) {
          p.add_(adamuon_direction(grad, state.momentum_buffer(),
                                   state.v_buffer(), o),
                 -o.lr());
        } else {
          hybrid_adam_update_(p, grad, state, o);
        }
      });
}

}  // namespace optim
