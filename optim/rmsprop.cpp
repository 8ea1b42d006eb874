#include "optim/rmsprop.h"

namespace optim {

namespace {

void check_options(const RMSpropOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(0 <= o.alpha() && o.alpha() < 1.0,
              "Invalid alpha value: ", o.alpha());
  TORCH_CHECK(o.eps() >= 0, "Invalid epsilon value: ", o.eps());
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
      closure, [](const RMSpropOptions& o) { check_options(o); },
      [&](const torch::Tensor& p, RMSpropOptions& o) {
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("square_avg",
                    torch::zeros_like(p, torch::MemoryFormat::Preserve));
        });
        s.step += 1;
        rmsprop_update_(p, p.grad(), s.at("square_avg"), o.lr(), o.alpha(),
                        o.eps());
      });
}

}  // namespace optim
