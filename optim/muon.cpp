#include "optim/muon.h"

namespace optim {

Hparams MuonOptions::rule_hparams() const {
  return {{"momentum", momentum()},         {"nesterov", 0},
          {"ns_steps", double(ns_steps())}, {"ns_a", kNewtonSchulzA},
          {"ns_b", kNewtonSchulzB},         {"ns_c", kNewtonSchulzC},
          {"ns_eps", kNewtonSchulzEps}};
}

void MuonOptions::check() const {
  TORCH_CHECK(0 <= momentum() && momentum() < 1.0,
              "Invalid momentum value: ", momentum());
  check_newton_schulz_steps(ns_steps());
}

Muon::Muon(std::vector<torch::Tensor> matrices,
           std::vector<torch::Tensor> others, MuonOptions defaults)
    : HybridOptimizer("Muon", std::move(matrices), std::move(others),
                      defaults) {}

void Muon::start(const torch::Tensor& p, ParamState& state,
                 const MuonOptions&) const {
  state.set("momentum_buffer", torch::zeros_like(p));
}

void Muon::update(const torch::Tensor& p, const torch::Tensor& grad,
                  ParamState& state, const MuonOptions& options) {
  const torch::Tensor& b =
      state.at("momentum_buffer").mul_(options.momentum()).add_(grad);
  p.add_(newton_schulz5(b, options.ns_steps()), -options.lr());
}

}  // namespace optim
