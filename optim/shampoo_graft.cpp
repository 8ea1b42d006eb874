#include "optim/shampoo_graft.h"

#include <cmath>

#include "optim/shampoo.h"

namespace optim {

namespace {

// The reference's floor under the direction's norm.
constexpr double kGraftNormFloor = 1e-16;

}  // namespace

Hparams ShampooGraftOptions::rule_hparams() const {
  return {{"damping", damping()},
          {"root_every", double(root_every())},
          {"graft_beta2", graft_beta2()},
          {"graft_eps", graft_eps()}};
}

void ShampooGraftOptions::check() const {
  check_shampoo_options(damping(), root_every());
  TORCH_CHECK(0 < graft_beta2() && graft_beta2() < 1.0,
              "Invalid grafting beta2 value: ", graft_beta2());
  TORCH_CHECK(graft_eps() > 0, "Invalid grafting epsilon value: ", graft_eps());
}

torch::Tensor adam_graft(const torch::Tensor& direction,
                         const torch::Tensor& grad, const torch::Tensor& v,
                         int64_t step, double beta2, double eps) {
  v.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const torch::Tensor graft =
      grad / (v / bias_correction2).sqrt().add(eps);  // Adam's diagonal step
  return direction * (graft.norm() / direction.norm().add(kGraftNormFloor));
}

ShampooGraft::ShampooGraft(std::vector<torch::Tensor> matrices,
                           std::vector<torch::Tensor> others,
                           ShampooGraftOptions defaults)
    : HybridOptimizer("ShampooGraft", std::move(matrices), std::move(others),
                      defaults) {}

void ShampooGraft::start(const torch::Tensor& p, ParamState& state,
                         const ShampooGraftOptions&) const {
  start_shampoo_statistics(state, p);
  state.set("graft_v", torch::zeros_like(p));
}

void ShampooGraft::update(const torch::Tensor& p, const torch::Tensor& grad,
                          ParamState& state,
                          const ShampooGraftOptions& options) {
  const torch::Tensor direction = shampoo_step_direction_(
      grad, state, state.step, options.root_every(), options.damping());
  p.add_(adam_graft(direction, grad, state.at("graft_v"), state.step,
                    options.graft_beta2(), options.graft_eps()),
         -options.lr());
}

}  // namespace optim
