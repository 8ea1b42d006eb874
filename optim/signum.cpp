#include "optim/signum.h"

namespace optim {

namespace {

void check_options(const SignumOptions& options) {
  TORCH_CHECK(options.lr() >= 0, "Invalid learning rate: ", options.lr());
  TORCH_CHECK(0 <= options.momentum() && options.momentum() < 1.0,
              "Invalid momentum value: ", options.momentum());
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
      closure, [](const SignumOptions& options) { check_options(options); },
      [&](const torch::Tensor& p, SignumOptions& options) {
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("momentum_buffer",
                    torch::zeros_like(p, torch::MemoryFormat::Preserve));
        });
        s.step += 1;
        signum_update_(p, p.grad(), s.at("momentum_buffer"), options.lr(),
                       options.momentum());
      });
}

}  // namespace optim
