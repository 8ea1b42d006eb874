#include "optim/muon.h"

#include "optim/newton_schulz.h"

namespace optim {

namespace {

void check_muon_options(const MuonOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(0 <= o.momentum() && o.momentum() < 1.0,
              "Invalid momentum value: ", o.momentum());
  TORCH_CHECK(o.ns_steps() >= 1, "Invalid Newton-Schulz steps: ", o.ns_steps());
  check_adam_options(o.adam_lr(), o.adam_betas(), o.adam_eps());
}

// The rule's own options with its matrix-update flag set.
MuonOptions with_use_muon(MuonOptions o, bool on) {
  o.use_muon(on);
  return o;
}

}  // namespace

Muon::Muon(std::vector<torch::Tensor> matrices,
           std::vector<torch::Tensor> others, MuonOptions defaults)
    : StatefulOptimizer(
          hybrid_groups("Muon", std::move(matrices), std::move(others),
                        defaults, with_use_muon),
          std::make_unique<MuonOptions>(defaults)) {
  check_muon_options(defaults);
}

torch::Tensor Muon::step(LossClosure closure) {
  return step_each<MuonOptions>(
      closure, [](const MuonOptions& o) { check_muon_options(o); },
      [&](const torch::Tensor& p, MuonOptions& o) {
        const torch::Tensor& grad = p.grad();
        auto& state = state_for<MuonParamState>(p, [&] {
          auto s = std::make_unique<MuonParamState>();
          if (o.use_muon()) {
            s->momentum_buffer(torch::zeros_like(p));
          } else {
            start_adam_moments(*s, p);
          }
          return s;
        });
        state.step(state.step() + 1);
        if (o.use_muon()) {
          state.momentum_buffer().mul_(o.momentum()).add_(grad);
          p.add_(newton_schulz5(state.momentum_buffer(), o.ns_steps()),
                 -o.lr());
        } else {
          hybrid_adam_update_(p, grad, state, o);
        }
      });
}

}  // namespace optim
