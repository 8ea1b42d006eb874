#include "optim/adamuon.h"

#include <cmath>

#include "optim/newton_schulz.h"

namespace optim {

Hparams AdaMuonOptions::rule_hparams() const {
  return {{"momentum", momentum()}, {"nesterov", double(nesterov())},
          {"sign", double(sign())}, {"ns_steps", double(ns_steps())},
          {"eps", eps()},           {"rms", rms()}};
}

void AdaMuonOptions::check() const {
  TORCH_CHECK(0 <= momentum() && momentum() < 1.0,
              "Invalid momentum value: ", momentum());
  TORCH_CHECK(eps() >= 0, "Invalid epsilon value: ", eps());
  TORCH_CHECK(rms() > 0, "Invalid rms value: ", rms());
  check_newton_schulz_steps(ns_steps());
}

torch::Tensor adamuon_direction(const torch::Tensor& grad,
                                const torch::Tensor& momentum_buffer,
                                const torch::Tensor& v_buffer,
                                const AdaMuonOptions& options) {
  torch::Tensor u = muon_momentum_(grad, momentum_buffer, options.momentum(),
                                   options.nesterov());
  if (options.sign())
    u = u.sign();
  const torch::Tensor O = newton_schulz5(u, options.ns_steps());
  v_buffer.mul_(options.momentum()).addcmul_(O, O, 1 - options.momentum());
  torch::Tensor d = O / v_buffer.sqrt().add(options.eps());
  const double size = std::sqrt(double(grad.size(0)) * grad.size(1));
  return d.mul_(options.rms() * size / d.norm().add(options.eps()));
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
    : HybridOptimizer("AdaMuon", std::move(matrices), std::move(others),
                      resolved(defaults)) {}

void AdaMuon::start(const torch::Tensor& p, ParamState& state,
                    const AdaMuonOptions&) const {
  state.set("momentum_buffer", torch::zeros_like(p));
  state.set("v_buffer", torch::zeros_like(p));
}

void AdaMuon::update(const torch::Tensor& p, const torch::Tensor& grad,
                     ParamState& state, const AdaMuonOptions& options) {
  p.add_(adamuon_direction(grad, state.at("momentum_buffer"),
                           state.at("v_buffer"), options),
         -options.lr());
}

}  // namespace optim
