#include "optim/shampoo_graft.h"

#include <cmath>

#include "optim/shampoo.h"

namespace optim {

namespace {

// The reference's floor under the direction's norm.
constexpr double kGraftNormFloor = 1e-16;

void check_shampoo_graft_options(const ShampooGraftOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(o.damping() > 0, "Invalid damping value: ", o.damping());
  TORCH_CHECK(o.root_every() >= 1,
              "Invalid root refresh interval: ", o.root_every());
  TORCH_CHECK(0 < o.graft_beta2() && o.graft_beta2() < 1.0,
              "Invalid grafting beta2 value: ", o.graft_beta2());
  TORCH_CHECK(o.graft_eps() > 0,
              "Invalid grafting epsilon value: ", o.graft_eps());
  check_adam_options(o.adam_lr(), o.adam_betas(), o.adam_eps());
}

ShampooGraftOptions with_use_shampoo(ShampooGraftOptions o, bool on) {
  o.use_shampoo(on);
  return o;
}

}  // namespace

Hparams ShampooGraftOptions::hparams() const {
  return {{"damping", damping()},
          {"root_every", double(root_every())},
          {"graft_beta2", graft_beta2()},
          {"graft_eps", graft_eps()},
          {"adam_lr", adam_lr()},
          {"adam_beta1", std::get<0>(adam_betas())},
          {"adam_beta2", std::get<1>(adam_betas())},
          {"adam_eps", adam_eps()},
          {"weight_decay", 0.0}};
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
    : StatefulOptimizer(
          hybrid_groups("ShampooGraft", std::move(matrices), std::move(others),
                        defaults, with_use_shampoo),
          std::make_unique<ShampooGraftOptions>(defaults)) {
  check_shampoo_graft_options(defaults);
}

torch::Tensor ShampooGraft::step(LossClosure closure) {
  return step_each<ShampooGraftOptions>(
      closure,
      [](const ShampooGraftOptions& o) { check_shampoo_graft_options(o); },
      [&](const torch::Tensor& p, ShampooGraftOptions& o) {
        const torch::Tensor& grad = p.grad();
        auto& state = state_for<ShampooGraftParamState>(p, [&] {
          auto s = std::make_unique<ShampooGraftParamState>();
          if (o.use_shampoo()) {
            s->left(torch::zeros({p.size(0), p.size(0)}, p.options()));
            s->right(torch::zeros({p.size(1), p.size(1)}, p.options()));
            s->left_root(torch::empty({p.size(0), p.size(0)}, p.options()));
            s->right_root(torch::empty({p.size(1), p.size(1)}, p.options()));
            s->graft_v(torch::zeros_like(p));
          } else {
            start_adam_moments(*s, p);
          }
          return s;
        });
        state.step(state.step() + 1);
        if (o.use_shampoo()) {
          const bool refresh = (state.step() - 1) % o.root_every() == 0;
          const torch::Tensor direction = shampoo_direction_(
              grad, state.left(), state.right(), state.left_root(),
              state.right_root(), refresh, o.damping());
          p.add_(adam_graft(direction, grad, state.graft_v(), state.step(),
                            o.graft_beta2(), o.graft_eps()),
                 -o.lr());
        } else {
          hybrid_adam_update_(p, grad, state, o);
        }
      });
}

}  // namespace optim
