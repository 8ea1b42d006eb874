#include "optim/rmsprop.h"

namespace optim {

namespace {

void check_options(const RMSpropOptions& options) {
  TORCH_CHECK(options.lr() >= 0, "Invalid learning rate: ", options.lr());
  TORCH_CHECK(0 <= options.alpha() && options.alpha() < 1.0,
              "Invalid alpha value: ", options.alpha());
  TORCH_CHECK(options.eps() >= 0, "Invalid epsilon value: ", options.eps());
}

}  // namespace

void rmsprop_update_(const torch::Tensor& p, const torch::Tensor& grad,
                     const torch::Tensor& square_avg, double lr, double alpha,
                     double eps) {
  square_avg.mul_(alpha).addcmul_(grad, grad, 1 - alpha);
  p.addcdiv_(grad, square_avg.sqrt().add_(eps), -lr);
}

RMSprop::RMSprop(std::vector<torch::optim::OptimizerParamGroup> groups,
                 RMSpropOptions defaults)
    : StatefulOptimizer(std::move(groups),
                        std::make_unique<RMSpropOptions>(defaults)) {
  check_options(defaults);
}

torch::Tensor RMSprop::step(LossClosure closure) {
  return step_each<RMSpropOptions>(
      closure, [](const RMSpropOptions& options) { check_options(options); },
      [&](const torch::Tensor& p, RMSpropOptions& options) {
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("square_avg",
                    torch::zeros_like(p, torch::MemoryFormat::Preserve));
        });
        s.step += 1;
        rmsprop_update_(p, p.grad(), s.at("square_avg"), options.lr(),
                        options.alpha(), options.eps());
      });
}

}  // namespace optim
