#include "optim/shampoo.h"

namespace optim {

Hparams ShampooOptions::rule_hparams() const {
  return {{"damping", damping()}, {"root_every", double(root_every())}};
}

void ShampooOptions::check() const {
  check_shampoo_options(damping(), root_every());
}

void check_shampoo_options(double damping, int64_t root_every) {
  TORCH_CHECK(damping > 0, "Invalid damping value: ", damping);
  TORCH_CHECK(root_every >= 1, "Invalid root refresh interval: ", root_every);
}

void start_shampoo_statistics(ParamState& state, const torch::Tensor& p) {
  const int64_t m = p.size(0), n = p.size(1);
  state.set("left", torch::zeros({m, m}, p.options()));
  state.set("right", torch::zeros({n, n}, p.options()));
  state.set("left_root", torch::empty({m, m}, p.options()));
  state.set("right_root", torch::empty({n, n}, p.options()));
}

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

torch::Tensor shampoo_step_direction_(const torch::Tensor& grad,
                                      ParamState& state, int64_t step,
                                      int64_t root_every, double damping) {
  const bool refresh = (step - 1) % root_every == 0;
  return shampoo_direction_(grad, state.at("left"), state.at("right"),
                            state.at("left_root"), state.at("right_root"),
                            refresh, damping);
}

Shampoo::Shampoo(std::vector<torch::Tensor> matrices,
                 std::vector<torch::Tensor> others, ShampooOptions defaults)
    : HybridOptimizer("Shampoo", std::move(matrices), std::move(others),
                      defaults) {}

void Shampoo::start(const torch::Tensor& p, ParamState& state,
                    const ShampooOptions&) const {
  start_shampoo_statistics(state, p);
}

void Shampoo::update(const torch::Tensor& p, const torch::Tensor& grad,
                     ParamState& state, const ShampooOptions& options) {
  p.add_(shampoo_step_direction_(grad, state, state.step, options.root_every(),
                                 options.damping()),
         -options.lr());
}

}  // namespace optim
