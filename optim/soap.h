// SOAP (Vyas et al., 2024, "SOAP: Improving and Stabilizing Shampoo using
// Adam"; reference nikhilvyas/SOAP soap.py): Adam run in the eigenbasis of
// Shampoo's preconditioner. A parameter with two or more dimensions keeps one
// statistic per dimension k, an EMA of the gradient's Gram matrix along k,
//   GG_k = shampoo_beta GG_k + (1 - shampoo_beta) G_(k) G_(k)^T
// (for a matrix: L = EMA of G G^T, R = EMA of G^T G), and its eigenbasis Q_k
// (eigh, eigenvalues descending, at the first call; then every
// precondition_frequency updates one power-iteration step and QR from the
// previous basis). Adam's m, v run on the projected gradient G' = G x_k Q_k^T
// (Q_L^T G Q_R for a matrix):
//   p -= lr sqrt(1 - beta2^t) / (1 - beta1^t) Q_L (m / (sqrt(v) + eps)) Q_R^T
// with t counting the updates. As in the reference the first call only
// builds GG and Q and does not move p (the projection never uses the current
// gradient), every parameter (1-D ones without a basis: plain Adam of the
// same form) goes through it, and eps is added to sqrt(v) before the bias
// correction.
//
// Defaults are the reference's: lr 3e-3, betas (0.95, 0.95), shampoo_beta =
// beta2, eps 1e-8, precondition_frequency 10, max_precond_dim 10000
// (merge_dims, precondition_1d and normalize_grads off, as there).
// Departures: no weight decay (0.01 there; docs/protocol.md §5); GG, Q and
// the eigh / QR in the parameter's dtype (the reference keeps GG in float32
// and solves in float32 whatever the parameter's dtype); m stays in the
// current basis and is moved only when the basis changes (the reference
// projects it back and forth every step: the same up to round-off).
//
// Gauge (W_Q, W_K rows in per-head blocks, B = diag(A_h) from the left):
// G -> B G, L -> B L B^T, so Q_L -> B Q_L (up to each column's sign, which
// cancels between projection and back-projection), R and Q_R unchanged. Then
// G', m and v are unchanged and the update maps to B times itself:
// equivariant, as long as L's eigenvalues are distinct: within a degenerate
// eigenspace eigh's basis is arbitrary, not B's image of the other twin's.
// With precondition_left off ("soap-right", the control) only Q_R is used:
// Adam's per-entry v then runs on G Q_R, whose rows are the rotated rows, so
// the rule is basis-dependent.
#pragma once

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "optim/base.h"

namespace optim {

struct SoapOptions
    : public torch::optim::OptimizerCloneableOptions<SoapOptions> {
  SoapOptions(double lr = 3e-3) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 3e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.95, 0.95);  // Adam's m, v
  TORCH_ARG(double, shampoo_beta) = -1;  // EMA of GG; < 0: betas' second
  TORCH_ARG(double, eps) = 1e-8;         // added to sqrt(v)
  TORCH_ARG(int64_t, precondition_frequency) = 10;  // updates per refresh
  TORCH_ARG(int64_t, max_precond_dim) = 10000;      // larger dims: no basis
  TORCH_ARG(bool, precondition_left) = true;        // false: dim 0 has no basis
  TORCH_ARG(bool, correct_bias) = true;             // Adam's bias correction

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
  // Every hyperparameter as a name/value pair (booleans as 0 / 1).
  Hparams hparams() const;
  // shampoo_beta, or betas' second when it is negative.
  double gram_beta() const;
};

// Buffers per parameter: "exp_avg" (m) and "exp_avg_sq" (v), in the current
// basis; for each dimension k with a basis "stat_k" (GG_k, n_k x n_k) and
// "basis_k" (Q_k). The state's step counts calls: the first builds the
// statistics and makes no update, so the updates number step - 1.
class Soap : public StatefulOptimizer {
 public:
  explicit Soap(std::vector<torch::Tensor> params, SoapOptions defaults = {});

  torch::Tensor step(LossClosure closure = nullptr) override;
};

// G x_k Q_k^T over the dimensions k with a basis (Q_L^T G Q_R for a matrix);
// `bases` holds one entry per dimension of g, undefined for none.
torch::Tensor soap_project(const torch::Tensor& g,
                           const std::vector<torch::Tensor>& bases);

// The inverse: G' x_k Q_k (Q_L G' Q_R^T for a matrix).
torch::Tensor soap_project_back(const torch::Tensor& g,
                                const std::vector<torch::Tensor>& bases);

// GG_k <- beta GG_k + (1 - beta) G_(k) G_(k)^T for every defined GG_k, the
// Gram matrix contracting every dimension of grad but k.
void soap_accumulate_(const std::vector<torch::Tensor>& stats,
                      const torch::Tensor& grad, double beta);

// Eigenvectors of the symmetric `stat` as columns, eigenvalues descending.
torch::Tensor soap_eigenbasis(const torch::Tensor& stat);

// The reference's refresh: the columns of `basis` sorted by their Rayleigh
// quotients diag(Q^T S Q), descending, then QR(S Q) (one power-iteration
// step). Returns the new basis and permutes `exp_avg_sq` along `dim` the same
// way (v is kept, only reordered, across a refresh).
torch::Tensor soap_refresh_basis(const torch::Tensor& stat,
                                 const torch::Tensor& basis,
                                 torch::Tensor& exp_avg_sq, int64_t dim);

// One call of the rule on p with its state: the first call builds the
// statistics and bases and leaves p as it is; every later one is an update
// (t = state.step - 1 after the call is counted), followed by the
// statistics' update and, every precondition_frequency updates, a refresh
// of the bases.
void soap_step_(const torch::Tensor& p, const torch::Tensor& grad,
                ParamState& state, const SoapOptions& options);

}  // namespace optim
