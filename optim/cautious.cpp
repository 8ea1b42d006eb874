#include "optim/cautious.h"

#include <cmath>

namespace optim {

namespace {

void check_floor(double floor) {
  TORCH_CHECK(floor > 0 && floor <= 1, "Invalid mask floor: ", floor);
}

void check_sgd_options(const CautiousSgdOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(0 <= o.momentum() && o.momentum() < 1.0,
              "Invalid momentum value: ", o.momentum());
  check_floor(o.mask_floor());
}

void check_adam(const CautiousAdamOptions& o) {
  check_adam_options(o.lr(), o.betas(), o.eps());
  check_floor(o.mask_floor());
}

}  // namespace

Hparams CautiousSgdOptions::hparams() const {
  return {{"momentum", momentum()},
          {"dampening", 0.0},
          {"mask_floor", mask_floor()},
          {"weight_decay", 0.0}};
}

Hparams CautiousAdamOptions::hparams() const {
  return {{"beta1", std::get<0>(betas())},
          {"beta2", std::get<1>(betas())},
          {"eps", eps()},
          {"mask_floor", mask_floor()},
          {"weight_decay", 0.0}};
}

torch::Tensor cautious_mask(const torch::Tensor& u, const torch::Tensor& g,
                            double floor) {
  const torch::Tensor mask = (u * g).gt(0).to(u.scalar_type());
  return mask / mask.mean().clamp_min(floor);
}

CautiousSgd::CautiousSgd(std::vector<torch::Tensor> params,
                         CautiousSgdOptions defaults)
    : StatefulOptimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                        std::make_unique<CautiousSgdOptions>(defaults)) {
  check_sgd_options(defaults);
}

torch::Tensor CautiousSgd::step(LossClosure closure) {
  return step_each<CautiousSgdOptions>(
      closure, [](const CautiousSgdOptions& o) { check_sgd_options(o); },
      [&](const torch::Tensor& p, CautiousSgdOptions& o) {
        const torch::Tensor& grad = p.grad();
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("exp_avg", torch::zeros_like(p));
        });
        s.step += 1;
        const torch::Tensor& b = s.at("exp_avg").mul_(o.momentum()).add_(grad);
        p.add_(b * cautious_mask(b, grad, o.mask_floor()), -o.lr());
      });
}

CautiousAdam::CautiousAdam(std::vector<torch::Tensor> params,
                           CautiousAdamOptions defaults)
    : StatefulOptimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                        std::make_unique<CautiousAdamOptions>(defaults)) {
  check_adam(defaults);
}

torch::Tensor CautiousAdam::step(LossClosure closure) {
  return step_each<CautiousAdamOptions>(
      closure, [](const CautiousAdamOptions& o) { check_adam(o); },
      [&](const torch::Tensor& p, CautiousAdamOptions& o) {
        const torch::Tensor& grad = p.grad();
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("exp_avg", torch::zeros_like(p));
          fresh.set("exp_avg_sq", torch::zeros_like(p));
        });
        s.step += 1;
        const auto [beta1, beta2] = o.betas();
        const torch::Tensor& m = s.at("exp_avg").lerp_(grad, 1 - beta1);
        const torch::Tensor& v =
            s.at("exp_avg_sq").mul_(beta2).addcmul_(grad, grad, 1 - beta2);
        const double bias_correction1 = 1 - std::pow(beta1, s.step);
        const double bias_correction2 = 1 - std::pow(beta2, s.step);
        const torch::Tensor denom =
            adam_denominator(v, bias_correction2, o.eps());
        p.addcdiv_(m * cautious_mask(m, grad, o.mask_floor()), denom,
                   -o.lr() / bias_correction1);
      });
}

}  // namespace optim
