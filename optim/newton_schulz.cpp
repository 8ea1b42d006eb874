#include "optim/newton_schulz.h"

namespace optim {

void check_newton_schulz_steps(int64_t steps) {
  TORCH_CHECK(steps >= kMinNewtonSchulzSteps && steps <= kMaxNewtonSchulzSteps,
              "Invalid Newton-Schulz steps: ", steps, " (must be in [",
              kMinNewtonSchulzSteps, ", ", kMaxNewtonSchulzSteps, "])");
}

torch::Tensor newton_schulz5(const torch::Tensor& G, int64_t steps) {
  TORCH_CHECK(G.dim() == 2, "newton_schulz5 needs a matrix, got shape ",
              G.sizes());
  check_newton_schulz_steps(steps);
  torch::Tensor X = G / (G.norm() + kNewtonSchulzEps);
  const bool tall = G.size(0) > G.size(1);
  if (tall)
    X = X.t();  // (small, large): A is the small Gram matrix
  for (int64_t i = 0; i < steps; ++i) {
    torch::Tensor A = torch::mm(X, X.t());
    torch::Tensor B = kNewtonSchulzB * A + kNewtonSchulzC * torch::mm(A, A);
    X = kNewtonSchulzA * X + torch::mm(B, X);
  }
  return tall ? X.t() : X;
}

}  // namespace optim
