#include "optim/lion.h"

namespace optim {

namespace {

void check_options(const LionOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(0 <= std::get<0>(o.betas()) && std::get<0>(o.betas()) < 1.0,
              "Invalid beta parameter at index 0: ", std::get<0>(o.betas()));
  TORCH_CHECK(0 <= std::get<1>(o.betas()) && std::get<1>(o.betas()) < 1.0,
              "Invalid beta parameter at index 1: ", std::get<1>(o.betas()));
}

}  // namespace

void lion_update_(const torch::Tensor& p, const torch::Tensor& grad,
                  const torch::Tensor& m, double lr, double beta1,
                  double beta2) {
  p.add_((m * beta1).add_(grad, 1 - beta1).sign_(), -lr);
  m.mul_(beta2).add_(grad, 1 - beta2);
}

Lion::Lion(std::vector<torch::optim::OptimizerParamGroup> groups,
           LionOptions defaults)
    : StatefulOptimizer(std::move(groups),
                        std::make_unique<LionOptions>(defaults)) {
  check_options(defaults);
}

torch::Tensor Lion::step(LossClosure closure) {
  return step_each<LionOptions>(
      closure, [](const LionOptions& o) { check_options(o); },
      [&](const torch::Tensor& p, LionOptions& o) {
        const auto [beta1, beta2] = o.betas();
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("exp_avg",
                    torch::zeros_like(p, torch::MemoryFormat::Preserve));
        });
        s.step += 1;
        lion_update_(p, p.grad(), s.at("exp_avg"), o.lr(), beta1, beta2);
      });
}

}  // namespace optim
