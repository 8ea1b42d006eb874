// The quintic Newton-Schulz iteration of Muon (Jordan et al., 2024;
// KellerJordan/Muon zeropower_via_newtonschulz5), as docs/protocol.md §5 fixes
// it: X = G / (||G||_F + 1e-7); work on X^T when rows > cols; 5 times A = X
// X^T, B = b A + c A A, X = a X + B X; transpose back. Unlike the reference it
// runs in the input's dtype (not bfloat16) and does not scale by sqrt(max(1,
// rows/cols)): the protocol's Muon has neither.
#pragma once

#include <torch/torch.h>

namespace optim {

// Coefficients chosen by Jordan et al. to push singular values towards 1.
constexpr double kNewtonSchulzA = 3.4445;
constexpr double kNewtonSchulzB = -4.7750;
constexpr double kNewtonSchulzC = 2.0315;
// Added to ||G||_F before the first division (a zero gradient stays zero).
constexpr double kNewtonSchulzEps = 1e-7;

// How many iterations a rule may run: at least one (zero would return the
// normalised gradient, not an orthogonalisation), and below 100, the bound
// PyTorch's Muon sets for cost.
constexpr int64_t kMinNewtonSchulzSteps = 1;
constexpr int64_t kMaxNewtonSchulzSteps = 99;

// Throws "Invalid Newton-Schulz steps: 0 (must be in [1, 99])" for a count
// outside that range: the one bound every rule and both iterations use.
void check_newton_schulz_steps(int64_t steps);

// G: a 2-D tensor. Returns approximately U V^T of G's SVD (singular values
// pushed into roughly [0.7, 1.2]); equivariant: NS(G Q) = NS(G) Q and
// NS(Q G) = Q NS(G) for orthogonal Q.
torch::Tensor newton_schulz5(const torch::Tensor& G, int64_t steps = 5);

}  // namespace optim
