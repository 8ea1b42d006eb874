#include "optim/signum.h"

namespace optim {

namespace {

void check_options(const SignumOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(0 <= o.momentum() && o.momentum() < 1.0,
              "Invalid momentum value: ", o.momentum());
}

}  // namespace

void signum_update_(const torch::Tensor& p, const torch::Tensor& grad,
                    const torch::Tensor& m, double lr, double beta) {
  m.mul_(beta).add_(grad, 1 - beta);
  p.add_(m.sign(), -lr);
}

Signum::Signum(std::vector<torch::optim::OptimizerParamGroup> groups,
               SignumOptions defaults)
    : StatefulOptimizer(std::move(groups),
                        std::make_unique<SignumOptions>(defaults)) {
  check_options(defaults);
}

torch::Tensor Signum::step(LossClosure closure) {
  return step_each<SignumOptions>(
      closure, [](const SignumOptions& o) { check_options(o); },
      [&](const torch::Tensor& p, SignumOptions& o) {
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("momentum_buffer",
                    torch::zeros_like(p, torch::MemoryFormat::Preserve));
        });
        s.step += 1;
        signum_update_(p, p.grad(), s.at("momentum_buffer"), o.lr(),
                       o.momentum());
      });
}

}  // namespace optim
