#include "optim/lion.h"

namespace optim {

namespace {

void check_options(const LionOptions& options) {
  TORCH_CHECK(options.lr() >= 0, "Invalid learning rate: ", options.lr());
  TORCH_CHECK(
      0 <= std::get<0>(options.betas()) && std::get<0>(options.betas()) < 1.0,
      "Invalid beta parameter at index 0: ", std::get<0>(options.betas()));
  TORCH_CHECK(
      0 <= std::get<1>(options.betas()) && std::get<1>(options.betas()) < 1.0,
      "Invalid beta parameter at index 1: ", std::get<1>(options.betas()));
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
      closure, [](const LionOptions& options) { check_options(options); },
      [&](const torch::Tensor& p, LionOptions& options) {
        const auto [beta1, beta2] = options.betas();
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("exp_avg",
                    torch::zeros_like(p, torch::MemoryFormat::Preserve));
        });
        s.step += 1;
        lion_update_(p, p.grad(), s.at("exp_avg"), options.lr(), beta1, beta2);
      });
}

}  // namespace optim
