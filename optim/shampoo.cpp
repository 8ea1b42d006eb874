#include "optim/shampoo.h"

namespace optim {

namespace {

void check_shampoo_options(const ShampooOptions& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(o.damping() > 0, "Invalid damping value: ", o.damping());
  TORCH_CHECK(o.root_every() >= 1,
              "Invalid root refresh interval: ", o.root_every());
  check_adam_options(o.adam_lr(), o.adam_betas(), o.adam_eps());
}

// The rule's own options with its matrix-update flag set.
ShampooOptions with_use_shampoo(ShampooOptions o, bool on) {
  o.use_shampoo(on);
  return o;
}

}  // namespace

torch::Tensor inverse_fourth_root(const torch::Tensor& A, double damping) {
  TORCH_CHECK(A.dim() == 2 && A.size(0) == A.size(1),
              "inverse_fourth_root: expected a square matrix, got ", A.sizes());
  auto [w, V] = torch::linalg_eigh(A.to(torch::kDouble), "L");
  const torch::Tensor s = (w.clamp_min(0) + damping).pow(-0.25);
  return (V * s.unsqueeze(0)).mm(V.t()).to(A.scalar_type());
}

torch::Tensor shampoo_direction_(const torch::Tensor& grad,
                                 const torch::Tensor& left,
                                 const torch::Tensor& right,
                                 const torch::Tensor& left_root,
                                 const torch::Tensor& right_root, bool refresh,
                                 double damping) {
  left.add_(grad.mm(grad.t()));
  right.add_(grad.t().mm(grad));
  if (refresh) {
    left_root.copy_(inverse_fourth_root(left, damping));
    right_root.copy_(inverse_fourth_root(right, damping));
  }
  return left_root.mm(grad).mm(right_root);
}

void shampoo_update_(const torch::Tensor& p, const torch::Tensor& grad,
                     const torch::Tensor& left, const torch::Tensor& right,
                     const torch::Tensor& left_root,
                     const torch::Tensor& right_root, bool refresh, double lr,
                     double damping) {
  p.add_(shampoo_direction_(grad, left, right, left_root, right_root, refresh,
                            damping),
         -lr);
}

Shampoo::Shampoo(std::vector<torch::Tensor> matrices,
                 std::vector<torch::Tensor> others, ShampooOptions defaults)
    : StatefulOptimizer(
          hybrid_groups("Shampoo", std::move(matrices), std::move(others),
                        defaults, with_use_shampoo),
          std::make_unique<ShampooOptions>(defaults)) {
  check_shampoo_options(defaults);
}

torch::Tensor Shampoo::step(LossClosure closure) {
  return step_each<ShampooOptions>(
      closure, [](const ShampooOptions& o) { check_shampoo_options(o); },
      [&](const torch::Tensor& p, ShampooOptions& o) {
        const torch::Tensor& grad = p.grad();
        auto& state = state_for<ShampooParamState>(p, [&] {
          auto s = std::make_unique<ShampooParamState>();
          if (o.use_shampoo()) {
            s->left(torch::zeros({p.size(0), p.size(0)}, p.options()));
            s->right(torch::zeros({p.size(1), p.size(1)}, p.options()));
            s->left_root(torch::empty({p.size(0), p.size(0)}, p.options()));
            s->right_root(torch::empty({p.size(1), p.size(1)}, p.options()));
          } else {
            start_adam_moments(*s, p);
          }
          return s;
        });
        state.step(state.step() + 1);
        if (o.use_shampoo()) {
          const bool refresh = (state.step() - 1) % o.root_every() == 0;
          shampoo_update_(p, grad, state.left(), state.right(),
                          state.left_root(), state.right_root(), refresh,
                          o.lr(), o.damping());
        } else {
          hybrid_adam_update_(p, grad, state, o);
        }
      });
}

}  // namespace optim
