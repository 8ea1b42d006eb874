#include "optim/cautious.h"

#include <cmath>

namespace optim {

namespace {

void check_floor(double floor) {
  TORCH_CHECK(floor > 0 && floor <= 1, "Invalid mask floor: ", floor);
}

void check_sgd_options(const CautiousSgdOptions& options) {
  TORCH_CHECK(options.lr() >= 0, "Invalid learning rate: ", options.lr());
  TORCH_CHECK(0 <= options.momentum() && options.momentum() < 1.0,
              "Invalid momentum value: ", options.momentum());
  check_floor(options.mask_floor());
}

void check_adam(const CautiousAdamOptions& options) {
  check_adam_options(options.lr(), options.betas(), options.eps());
  check_floor(options.mask_floor());
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
      closure,
      [](const CautiousSgdOptions& options) { check_sgd_options(options); },
      [&](const torch::Tensor& p, CautiousSgdOptions& options) {
        const torch::Tensor& grad = p.grad();
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("exp_avg", torch::zeros_like(p));
        });
        s.step += 1;
        const torch::Tensor& b =
            s.at("exp_avg").mul_(options.momentum()).add_(grad);
        p.add_(b * cautious_mask(b, grad, options.mask_floor()), -options.lr());
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
      closure, [](const CautiousAdamOptions& options) { check_adam(options); },
      [&](const torch::Tensor& p, CautiousAdamOptions& options) {
        const torch::Tensor& grad = p.grad();
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("exp_avg", torch::zeros_like(p));
          fresh.set("exp_avg_sq", torch::zeros_like(p));
        });
        s.step += 1;
        const auto [beta1, beta2] = options.betas();
        const torch::Tensor& m = s.at("exp_avg").lerp_(grad, 1 - beta1);
        const torch::Tensor& v =
            s.at("exp_avg_sq").mul_(beta2).addcmul_(grad, grad, 1 - beta2);
        const double bias_correction1 = 1 - std::pow(beta1, s.step);
        const double bias_correction2 = 1 - std::pow(beta2, s.step);
        const torch::Tensor denom =
            adam_denominator(v, bias_correction2, options.eps());
        p.addcdiv_(m * cautious_mask(m, grad, options.mask_floor()), denom,
                   -options.lr() / bias_correction1);
      });
}

}  // namespace optim
