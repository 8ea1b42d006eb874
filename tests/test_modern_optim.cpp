// Optimizers in current use (optim/soap, adam_mini, normuon, adamuon, scion,
// shampoo_graft, muon_torch, cautious): each rule's first step(s) against
// its formula written out by hand; float64 commutation with a per-head
// orthogonal gauge B = diag(A_1, A_2) acting on the rows of a W_Q-like
// matrix, for the rules predicted equivariant (to 1e-12) and against it for
// the basis-dependent ones; NorMuon's defect next to NS5's deviation from
// orthogonality; every registered rule's prediction against its commutation,
// its recorded hyperparameters, a whole tiny pair for each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "helpers.h"
#include "optim/adam_mini.h"
#include "optim/adamuon.h"
#include "optim/cautious.h"
#include "optim/muon_torch.h"
#include "optim/newton_schulz.h"
#include "optim/normuon.h"
#include "optim/registry.h"
#include "optim/scion.h"
#include "optim/shampoo_graft.h"
#include "optim/soap.h"
#include "twins/defaults.h"
#include "twins/pair.h"

namespace {

using optim::Equivariance;
using testing_helpers::at;
using testing_helpers::expect_throw_naming;
using testing_helpers::max_abs;
using testing_helpers::randn64;
using testing_helpers::t64;

// The gauge of docs/protocol.md §2 on one W_Q / W_K: block-diagonal, one
// random orthogonal head_dim x head_dim block per head, acting on the rows.
torch::Tensor head_gauge(int64_t d, int64_t heads, uint64_t seed) {
  const int64_t hd = d / heads;
  torch::Tensor B = torch::zeros({d, d}, torch::kDouble);
  for (int64_t h = 0; h < heads; ++h) {
    torch::Tensor A =
        std::get<0>(torch::linalg_qr(randn64({hd, hd}, seed + h)));
    B.narrow(0, h * hd, hd).narrow(1, h * hd, hd).copy_(A);
  }
  return B;
}

constexpr int64_t kD = 8, kHeads = 2;

// ---------------------------------------------------------------------------
// Commutation with the gauge, through the registry's factories

struct Commutation {
  std::vector<double> defect;     // per step: ||d2 - B d1|| / ||d1||
  std::vector<double> direction;  // the same for d / ||d||
};

// Runs `name` (default mod learning rate) on W (kD x kD, a W_Q: matrix and
// qk with kHeads heads) and on its twin B W, feeding G_t and B G_t, for
// `steps` steps; measures each step's update d = W_t - W_{t-1} of the twin
// against B times the original's. A step that moves neither is recorded as
// 0 (SOAP's first).
Commutation commutation(const std::string& name, int steps, uint64_t seed = 1) {
  const torch::Tensor B = head_gauge(kD, kHeads, 100 + seed);
  auto W1 = randn64({kD, kD}, seed).requires_grad_();
  auto W2 = B.mm(W1.detach()).requires_grad_();
  const double lr = twins::default_lr(name, "mod47");
  auto o1 = optim::make_optimizer(name, {{W1}, {}, {W1}, kHeads}, lr);
  auto o2 = optim::make_optimizer(name, {{W2}, {}, {W2}, kHeads}, lr);
  Commutation c;
  for (int t = 1; t <= steps; ++t) {
    const torch::Tensor G = randn64({kD, kD}, 1000 * seed + t);
    const torch::Tensor before1 = W1.detach().clone();
    const torch::Tensor before2 = W2.detach().clone();
    W1.mutable_grad() = G.clone();
    W2.mutable_grad() = B.mm(G);
    o1->step();
    o2->step();
    const torch::Tensor d1 = W1.detach() - before1;
    const torch::Tensor d2 = W2.detach() - before2;
    const double n1 = d1.norm().item<double>();
    const double n2 = d2.norm().item<double>();
    if (n1 == 0) {
      EXPECT_EQ(n2, 0) << name << " step " << t << ": only the twin moved";
      c.defect.push_back(0);
      c.direction.push_back(0);
      continue;
    }
    const torch::Tensor Bd1 = B.mm(d1);
    c.defect.push_back((d2 - Bd1).norm().item<double>() / n1);
    c.direction.push_back((d2 / n2 - Bd1 / n1).norm().item<double>());
  }
  return c;
}

double max_of(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}

// 12 steps: SOAP's eigenbases are refreshed after update 10 (call 11).
constexpr int kCommutationSteps = 12;

// Every registered rule and three points of the Adam-p dial, by the class
// the registry predicts for it.
std::vector<std::string> rules_predicted(Equivariance cls) {
  std::vector<std::string> names = optim::optimizer_names();
  for (const char* dial : {"adam-p0", "adam-p0.125", "adam-p1"})
    names.push_back(dial);
  std::vector<std::string> out;
  for (const auto& name : names) {
    if (optim::find_optimizer(name).predicted == cls)
      out.push_back(name);
  }
  return out;
}

TEST(ModernCommutation, EquivariantRulesCommuteWithTheHeadGaugeTo1e12) {
  const auto names = rules_predicted(Equivariance::kEquivariant);
  EXPECT_GE(names.size(), 8u);  // sgd, scalar-adam, muon, shampoo, ...
  for (const auto& name : names) {
    for (uint64_t seed : {1, 2}) {
      const auto c = commutation(name, kCommutationSteps, seed);
      EXPECT_LE(max_of(c.defect), 1e-12) << name << " seed " << seed;
    }
  }
}

TEST(ModernCommutation, BasisDependentRulesDoNotCommute) {
  const auto names = rules_predicted(Equivariance::kBasisDependent);
  EXPECT_GE(names.size(), 8u);  // adam, rmsprop, signum, lion, ...
  for (const auto& name : names) {
    const auto c = commutation(name, 4);
    std::printf("[ commute ] %-14s defect per step:", name.c_str());
    for (double d : c.defect)
      std::printf(" %.2e", d);
    std::printf("\n");
    EXPECT_GE(max_of(c.defect), 1e-3) << name;
  }
}

// Its step 1 is sgd's (b = g, mask all ones): equivariant; step 2 masks.
TEST(ModernCommutation, CautiousSgdCommutesAtStepOneOnly) {
  const auto c = commutation("cautious-sgd", 2);
  EXPECT_LE(c.defect[0], 1e-14);
  EXPECT_GE(c.defect[1], 1e-2);
}

// SOAP skips its first update; soap-right's first real update splits.
TEST(ModernCommutation, SoapRightSplitsAtItsFirstUpdate) {
  const auto c = commutation("soap-right", 2);
  EXPECT_EQ(c.defect[0], 0);
  EXPECT_GE(c.defect[1], 1e-2);
}

// The grafted step keeps Shampoo's equivariant direction; only its length
// (Adam's step norm) depends on the basis, and not at step 1: Adam's first
// step is g / (|g| + eps), +-1 in every entry, of norm sqrt(numel) in any
// basis (up to eps / |g|).
TEST(ModernCommutation, ShampooGraftBreaksTheStepSizeNotTheDirection) {
  const auto c = commutation("shampoo-graft", 5);
  for (size_t t = 0; t < c.defect.size(); ++t) {
    EXPECT_LE(c.direction[t], 1e-12) << "step " << t + 1;
    if (t == 0) {
      EXPECT_LE(c.defect[t], 1e-10) << "step 1";
    } else {
      EXPECT_GE(c.defect[t], 1e-4) << "step " << t + 1;
    }
  }
}

// Adam-mini is equivariant because W_Q / W_K get one v per head; the same
// matrix treated as an ordinary weight (one v per row) is not.
TEST(ModernCommutation, AdamMiniNeedsTheHeadBlocks) {
  const torch::Tensor B = head_gauge(kD, kHeads, 7);
  auto W1 = randn64({kD, kD}, 8).requires_grad_();
  auto W2 = B.mm(W1.detach()).requires_grad_();
  optim::AdamMini o1({W1}, {}, kHeads), o2({W2}, {}, kHeads);
  const torch::Tensor G = randn64({kD, kD}, 9);
  const torch::Tensor before1 = W1.detach().clone();
  const torch::Tensor before2 = W2.detach().clone();
  W1.mutable_grad() = G.clone();
  W2.mutable_grad() = B.mm(G);
  o1.step();
  o2.step();
  const torch::Tensor d1 = W1.detach() - before1;
  const torch::Tensor d2 = W2.detach() - before2;
  EXPECT_GE(((d2 - B.mm(d1)).norm() / d1.norm()).item<double>(), 1e-2);
}

// ---------------------------------------------------------------------------
// NorMuon: the defect against NS5's deviation from orthogonality

// Rows of O O^T's diagonal minus one: how far each row of O is from norm 1.
torch::Tensor row_norm_deviation(const torch::Tensor& O) {
  return O.square().sum(1) - 1;
}

// The step-1 row normalisation of O (s starts at zero).
torch::Tensor normalize_once(const torch::Tensor& O) {
  auto s = torch::zeros({O.size(0), 1}, torch::kDouble);
  return optim::normuon_normalize(O, s, 0.95, 1e-10);
}

// To first order in Delta = diag(O O^T) - 1, the normalisation is
// U = O - (Delta - mean Delta) O / 2, so the twin's defect is
// (Delta' B - B Delta) O / 2, Delta' the diagonal for B O: NS5's row-norm
// deviation predicts the defect. Moving O from the exact polar factor P
// (rows of norm 1, no defect) towards NS5's output, O_t = P + t (O - P), the
// defect shrinks with t and its ratio to the prediction goes to 1.
struct DefectPoint {
  double defect, predicted;
};

DefectPoint normuon_defect(const torch::Tensor& O, const torch::Tensor& Og,
                           const torch::Tensor& B) {
  const torch::Tensor U = normalize_once(O);
  const torch::Tensor D = normalize_once(Og) - B.mm(U);
  const torch::Tensor dev = row_norm_deviation(O);
  const torch::Tensor dev_g = row_norm_deviation(Og);
  const torch::Tensor predicted =
      0.5 * (dev_g.unsqueeze(1) * B - B * dev.unsqueeze(0)).mm(O);
  return {(D.norm() / U.norm()).item<double>(),
          (predicted.norm() / O.norm()).item<double>()};
}

TEST(NorMuonDefect, IsNS5sRowNormDeviationAndVanishesWhenOrthogonal) {
  const torch::Tensor I = torch::eye(kD, torch::kDouble);
  for (uint64_t seed : {11, 12, 13}) {
    const torch::Tensor B = head_gauge(kD, kHeads, seed + 50);
    const torch::Tensor M = randn64({kD, kD}, seed);
    const torch::Tensor O = optim::newton_schulz5(M);
    const torch::Tensor Og = optim::newton_schulz5(B.mm(M));
    ASSERT_LE(max_abs(Og - B.mm(O)), 1e-13);  // NS5 itself commutes
    auto [Usvd, S, Vh] = torch::linalg_svd(M, /*full_matrices=*/false);
    const torch::Tensor P = Usvd.mm(Vh);  // exact polar factor
    const double spectral_dev =
        torch::linalg_matrix_norm(O.mm(O.t()) - I, 2).item<double>();
    std::printf(
        "[ normuon ] seed %d: ||O O^T - I||_2 %.3f, max_i | |o_i|^2 - 1 | "
        "%.3f for NS5's O\n",
        int(seed), spectral_dev, max_abs(row_norm_deviation(O)));
    const DefectPoint exact = normuon_defect(P, B.mm(P), B);
    EXPECT_LE(exact.defect, 1e-13);
    double previous = 0;
    for (double t : {0.01, 0.1, 1.0}) {
      const DefectPoint d =
          normuon_defect(P + t * (O - P), B.mm(P) + t * (Og - B.mm(P)), B);
      std::printf(
          "[ normuon ]   O = P + %.2f (NS5 - P): step-1 defect %.2e, "
          "first-order prediction %.2e (ratio %.2f)\n",
          t, d.defect, d.predicted, d.defect / d.predicted);
      EXPECT_GT(d.defect, 5 * previous) << "t " << t;  // grows ~ t
      EXPECT_NEAR(d.defect / d.predicted, 1.0, t < 0.05 ? 0.05 : 0.6)
          << "t " << t;
      previous = d.defect;
      if (t == 1.0) {
        EXPECT_GT(d.defect, 1e-2);
        EXPECT_LE(d.defect, spectral_dev);
      }
    }
  }
}

TEST(NorMuonDefect, FullOptimizerDefectPerStepIsPrinted) {
  const auto c = commutation("normuon", 5);
  for (size_t t = 0; t < c.defect.size(); ++t) {
    std::printf("[ normuon ] optimizer step %zu: defect %.4f\n", t + 1,
                c.defect[t]);
    EXPECT_GT(c.defect[t], 1e-3);
    EXPECT_LT(c.defect[t], 0.5);
  }
}

// ---------------------------------------------------------------------------
// One (or two) steps against the formula

// Diagonal gradients make SOAP's statistics diagonal, their eigenbases
// signed permutations, and Adam commutes with those: the second call is
// Adam (betas 0.95) entry by entry, with SOAP's bias correction
// lr sqrt(1 - 0.95) / (1 - 0.95) and eps inside it. The first call does not
// move p.
TEST(Soap, FirstCallBuildsSecondIsAdamForDiagonalGradients) {
  auto W = randn64({3, 4}, 21).requires_grad_();
  auto b = t64({0.5, -1.0}).requires_grad_();
  const torch::Tensor W0 = W.detach().clone(), b0 = b.detach().clone();
  const double lr = 3e-3, eps = 1e-8;
  optim::Soap opt({W, b}, optim::SoapOptions(lr));
  auto G1 = torch::zeros({3, 4}, torch::kDouble);
  G1[0][0] = 2.0;
  G1[1][1] = -0.5;
  G1[2][2] = 1.0;
  W.mutable_grad() = G1.clone();
  b.mutable_grad() = t64({0.3, -0.2});
  opt.step();
  EXPECT_TRUE(torch::equal(W.detach(), W0));
  EXPECT_TRUE(torch::equal(b.detach(), b0));
  const double g2[3] = {-1.5, 0.25, 3.0};
  auto G2 = torch::zeros({3, 4}, torch::kDouble);
  for (int i = 0; i < 3; ++i)
    G2[i][i] = g2[i];
  W.mutable_grad() = G2.clone();
  const double gb[2] = {0.1, -0.4};
  b.mutable_grad() = t64({gb[0], gb[1]});
  opt.step();
  const double step_size = lr * std::sqrt(0.05) / 0.05;
  for (int i = 0; i < 3; ++i) {
    const double m = 0.05 * g2[i], v = 0.05 * g2[i] * g2[i];
    EXPECT_NEAR(at(W, 5 * i),
                at(W0, 5 * i) - step_size * m / (std::sqrt(v) + eps), 1e-15)
        << i;
  }
  // Off-diagonal entries saw zero gradients throughout.
  EXPECT_EQ(at(W, 1), at(W0, 1));
  EXPECT_EQ(at(W, 4), at(W0, 4));
  for (int i = 0; i < 2; ++i) {
    const double m = 0.05 * gb[i], v = 0.05 * gb[i] * gb[i];
    EXPECT_NEAR(at(b, i), at(b0, i) - step_size * m / (std::sqrt(v) + eps),
                1e-15)
        << i;
  }
}

// The second call on a general matrix: L = 0.05 G1 G1^T, R = 0.05 G1^T G1,
// their eigenvectors, Adam on Q_L^T G2 Q_R, projected back. soap-right:
// Q_L = I.
TEST(Soap, SecondCallMatchesTheEigenbasisFormula) {
  for (bool left : {true, false}) {
    auto W = randn64({4, 5}, 22).requires_grad_();
    const torch::Tensor W0 = W.detach().clone();
    const double lr = 3e-3, eps = 1e-8;
    optim::Soap opt({W}, optim::SoapOptions(lr).precondition_left(left));
    const torch::Tensor G1 = randn64({4, 5}, 23), G2 = randn64({4, 5}, 24);
    W.mutable_grad() = G1.clone();
    opt.step();
    W.mutable_grad() = G2.clone();
    opt.step();
    const torch::Tensor QL =
        left ? std::get<1>(torch::linalg_eigh(0.05 * G1.mm(G1.t())))
             : torch::eye(4, torch::kDouble);
    const torch::Tensor QR =
        std::get<1>(torch::linalg_eigh(0.05 * G1.t().mm(G1)));
    const torch::Tensor Gp = QL.t().mm(G2).mm(QR);
    const torch::Tensor m = 0.05 * Gp, v = 0.05 * Gp.square();
    const torch::Tensor expected =
        W0 -
        lr * std::sqrt(0.05) / 0.05 * QL.mm(m / (v.sqrt() + eps)).mm(QR.t());
    EXPECT_LE(max_abs(W.detach() - expected), 1e-14) << "left " << left;
  }
}

TEST(Soap, ProjectionIsInvertibleAndRefreshKeepsAnEigenbasis) {
  const torch::Tensor G = randn64({3, 4, 5}, 25);
  std::vector<torch::Tensor> bases = {
      std::get<0>(torch::linalg_qr(randn64({3, 3}, 26))), torch::Tensor(),
      std::get<0>(torch::linalg_qr(randn64({5, 5}, 27)))};
  const torch::Tensor back =
      optim::soap_project_back(optim::soap_project(G, bases), bases);
  EXPECT_LE(max_abs(back - G), 1e-14);
  // A basis that already diagonalises S comes back (sorted, up to signs).
  const torch::Tensor X = randn64({4, 6}, 28);
  const torch::Tensor S = X.mm(X.t());
  const torch::Tensor Q = optim::soap_eigenbasis(S);
  torch::Tensor v = randn64({4, 2}, 29);
  const torch::Tensor v0 = v.clone();
  const torch::Tensor R = optim::soap_refresh_basis(S, Q.flip({1}), v, 0);
  EXPECT_LE(max_abs(R.abs() - Q.abs()), 1e-12);
  EXPECT_TRUE(torch::equal(v, v0.flip({0})));  // reordered to descending
}

// Two steps on a 4 x 3 W_Q with 2 heads (6 entries each), a 2 x 3 matrix
// (a block per row) and a gain (one block).
TEST(AdamMini, TwoStepsMatchTheFormulaPerBlock) {
  auto Q = randn64({4, 3}, 31).requires_grad_();
  auto M = randn64({2, 3}, 32).requires_grad_();
  auto g = t64({1.0, 0.5, -0.25}).requires_grad_();
  const double lr = 1e-2, eps = 1e-8;
  std::vector<torch::Tensor> x0 = {Q.detach().clone(), M.detach().clone(),
                                   g.detach().clone()};
  optim::AdamMini opt({Q, M, g}, {Q}, 2, optim::AdamMiniOptions(lr));
  std::vector<torch::Tensor> params = {Q, M, g};
  const int64_t blocks[3] = {2, 2, 1};
  std::vector<torch::Tensor> m, v, x;
  for (int k = 0; k < 3; ++k) {
    m.push_back(torch::zeros_like(x0[k]));
    v.push_back(torch::zeros({blocks[k]}, torch::kDouble));
    x.push_back(x0[k].clone());
  }
  for (int t = 1; t <= 2; ++t) {
    std::vector<torch::Tensor> grads = {
        randn64({4, 3}, 33 + t), randn64({2, 3}, 35 + t), randn64({3}, 37 + t)};
    for (int k = 0; k < 3; ++k)
      params[k].mutable_grad() = grads[k].clone();
    opt.step();
    const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t);
    for (int k = 0; k < 3; ++k) {
      const int64_t n = x0[k].numel(), per = n / blocks[k];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t blk = i / per;
        if (i % per == 0) {
          double mean = 0;
          for (int64_t j = 0; j < per; ++j) {
            const double gj = at(grads[k], blk * per + j);
            mean += gj * gj / per;
          }
          v[k][blk] = 0.999 * at(v[k], blk) + 0.001 * mean;
        }
        m[k].reshape({-1})[i] = 0.9 * at(m[k], i) + 0.1 * at(grads[k], i);
        const double denom = std::sqrt(at(v[k], blk) / bc2) + eps;
        x[k].reshape({-1})[i] = at(x[k], i) - lr / bc1 * at(m[k], i) / denom;
      }
      EXPECT_LE(max_abs(params[k].detach() - x[k]), 1e-15)
          << "param " << k << " step " << t;
    }
  }
  EXPECT_EQ(opt.blocks(Q), 2);
  EXPECT_EQ(opt.blocks(M), 2);
  EXPECT_EQ(opt.blocks(g), 1);
}

// A 6 x 4 matrix (tall: shape factor sqrt(1.5)): at step 1 the Nesterov
// input is (0.05 + 0.95 * 0.05) g and s = 0.05 mean_row(O^2). The other
// parameter is Adam (3e-4, betas 0.9 / 0.95, eps 1e-10), bitwise.
TEST(NorMuon, FirstStepMatchesTheFormulaOthersTakeItsAdam) {
  auto W = randn64({6, 4}, 41).requires_grad_();
  auto e = randn64({5}, 42).requires_grad_();
  const torch::Tensor W0 = W.detach().clone();
  auto e_ref = e.detach().clone().requires_grad_();
  const double lr = 0.02;
  optim::NorMuon opt({W}, {e}, optim::NorMuonOptions(lr));
  torch::optim::Adam adam(
      {e_ref}, torch::optim::AdamOptions(3e-4).betas({0.9, 0.95}).eps(1e-10));
  const torch::Tensor G = randn64({6, 4}, 43), ge = randn64({5}, 44);
  W.mutable_grad() = G.clone();
  e.mutable_grad() = ge.clone();
  e_ref.mutable_grad() = ge.clone();
  opt.step();
  adam.step();
  const torch::Tensor O = optim::newton_schulz5((0.05 + 0.95 * 0.05) * G);
  const torch::Tensor s = 0.05 * O.square().mean(1, true);
  torch::Tensor N = O / (s.sqrt() + 1e-10);
  N = N * O.norm() / (N.norm() + 1e-10);
  const torch::Tensor expected = W0 - lr * std::sqrt(6.0 / 4.0) * N;
  EXPECT_LE(max_abs(W.detach() - expected), 1e-15);
  EXPECT_TRUE(torch::equal(e.detach(), e_ref.detach()));
}

// Step 1: O = NS5(sign(g)), v = 0.05 O^2, O' = O / (sqrt(v) + eps),
// p -= lr 0.2 sqrt(rows cols) O' / (||O'|| + eps). The other parameter is
// Adam at the same lr with betas (0.9, 0.95), bitwise.
TEST(AdaMuon, FirstStepMatchesTheFormulaOthersTakeAdamAtItsLr) {
  auto W = randn64({4, 6}, 51).requires_grad_();
  auto e = randn64({3}, 52).requires_grad_();
  const torch::Tensor W0 = W.detach().clone();
  auto e_ref = e.detach().clone().requires_grad_();
  const double lr = 0.01, eps = 1e-8;
  optim::AdaMuon opt({W}, {e}, optim::AdaMuonOptions(lr).adam_lr(lr));
  torch::optim::Adam adam(
      {e_ref}, torch::optim::AdamOptions(lr).betas({0.9, 0.95}).eps(1e-8));
  const torch::Tensor G = randn64({4, 6}, 53), ge = randn64({3}, 54);
  W.mutable_grad() = G.clone();
  e.mutable_grad() = ge.clone();
  e_ref.mutable_grad() = ge.clone();
  opt.step();
  adam.step();
  const torch::Tensor O = optim::newton_schulz5(G.sign());
  const torch::Tensor v = 0.05 * O.square();
  const torch::Tensor Op = O / (v.sqrt() + eps);
  const torch::Tensor expected =
      W0 - lr * 0.2 * std::sqrt(24.0) * Op / (Op.norm() + eps);
  EXPECT_LE(max_abs(W.detach() - expected), 1e-15);
  EXPECT_TRUE(torch::equal(e.detach(), e_ref.detach()));
}

// Two steps on a 2 x 3 matrix: b = 0.9 b + 0.1 g; column norms over the 2
// rows (rms / sqrt(2) * 3 cols), row norms over the 3 columns (* sqrt(3)).
TEST(Scion, TwoStepsOfColumnAndRowLmoMatchTheFormula) {
  const double g[2][2][3] = {{{0.3, -0.4, 2.0}, {1.0, 0.5, -0.1}},
                             {{-1.0, 0.2, 0.6}, {0.3, -2.0, 0.7}}};
  const double lr = 0.05, eps = 1e-8, scale = 3.0;
  for (auto norm : {optim::ScionNorm::kColumn, optim::ScionNorm::kRow}) {
    auto W = t64({1.0, -2.0, 0.5, 0.0, 3.0, -1.0}).reshape({2, 3});
    W.requires_grad_();
    optim::Scion opt({W}, {}, optim::ScionOptions(lr).norm(norm));
    double x[2][3] = {{1.0, -2.0, 0.5}, {0.0, 3.0, -1.0}};
    double b[2][3] = {};
    for (int t = 0; t < 2; ++t) {
      W.mutable_grad() = t64({g[t][0][0], g[t][0][1], g[t][0][2], g[t][1][0],
                              g[t][1][1], g[t][1][2]})
                             .reshape({2, 3});
      opt.step();
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
          b[i][j] = 0.9 * b[i][j] + 0.1 * g[t][i][j];
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 3; ++j) {
          double n;
          if (norm == optim::ScionNorm::kColumn) {
            n = std::sqrt(b[0][j] * b[0][j] + b[1][j] * b[1][j]) /
                std::sqrt(2.0) * 3;
          } else {
            n = std::sqrt(b[i][0] * b[i][0] + b[i][1] * b[i][1] +
                          b[i][2] * b[i][2]) *
                std::sqrt(3.0);
          }
          x[i][j] -= lr * scale * b[i][j] / (n + eps);
        }
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
          EXPECT_NEAR(at(W, 3 * i + j), x[i][j], 1e-14)
              << "step " << t + 1 << " [" << i << "," << j << "]";
    }
  }
}

// "Diagonal" 2 x 3 gradient: Shampoo's direction is a / sqrt(a^2 + 1) at
// [0,0] and c / sqrt(c^2 + 1) at [1,1]; Adam's bias-corrected step 1 is
// g / (|g| + 1e-10), of norm ~sqrt(2). The step takes that norm.
TEST(ShampooGraft, FirstStepIsShampooDirectionAtAdamsNorm) {
  const double lr = 0.01, a = 2.0, c = -0.5;
  auto W = torch::zeros({2, 3}, torch::kDouble).requires_grad_();
  optim::ShampooGraft opt({W}, {}, optim::ShampooGraftOptions(lr));
  auto G = torch::zeros({2, 3}, torch::kDouble);
  G[0][0] = a;
  G[1][1] = c;
  W.mutable_grad() = G.clone();
  opt.step();
  const double s0 = a / std::sqrt(a * a + 1), s1 = c / std::sqrt(c * c + 1);
  const double p0 = std::abs(a) / (std::abs(a) + 1e-10);
  const double p1 = std::abs(c) / (std::abs(c) + 1e-10);
  const double ratio =
      std::sqrt(p0 * p0 + p1 * p1) / (std::sqrt(s0 * s0 + s1 * s1) + 1e-16);
  EXPECT_NEAR(at(W, 0), -lr * ratio * s0, 1e-17);
  EXPECT_NEAR(at(W, 4), -lr * ratio * s1, 1e-17);
  for (int64_t i : {1, 2, 3, 5})
    EXPECT_EQ(at(W, i), 0.0);
}

// Step 1 on a tall 6 x 4 matrix, PyTorch's Muon written out: u = (0.05 +
// 0.95 * 0.05) g, X = u^T / ||u||, five quintic iterations, transposed back,
// times lr sqrt(6 / 4).
TEST(MuonTorch, FirstStepMatchesPyTorchsFormula) {
  auto W = randn64({6, 4}, 61).requires_grad_();
  const torch::Tensor W0 = W.detach().clone();
  const double lr = 0.01;
  optim::MuonTorch opt({W}, {}, optim::MuonTorchOptions(lr));
  const torch::Tensor G = randn64({6, 4}, 62);
  W.mutable_grad() = G.clone();
  opt.step();
  const torch::Tensor u = (0.05 + 0.95 * 0.05) * G;
  torch::Tensor X = u.t() / u.norm();
  for (int i = 0; i < 5; ++i) {
    const torch::Tensor A = X.mm(X.t());
    X = 3.4445 * X + (-4.7750 * A + 2.0315 * A.mm(A)).mm(X);
  }
  const torch::Tensor expected = W0 - lr * std::sqrt(1.5) * X.t();
  EXPECT_LE(max_abs(W.detach() - expected), 1e-15);
}

TEST(MuonTorch, ZeroGradientGivesZeroStep) {
  const auto X = optim::newton_schulz_torch(
      torch::zeros({3, 5}, torch::kDouble), 3.4445, -4.7750, 2.0315, 5, 1e-7);
  EXPECT_TRUE(torch::equal(X, torch::zeros({3, 5}, torch::kDouble)));
}

// Step 2's gradient flips the sign of entry 1 against b; the mask keeps
// 2 of 3 entries and rescales them by 3/2.
TEST(CautiousSgd, TwoStepsMatchTheFormula) {
  auto p = t64({1.0, -2.0, 0.5}).requires_grad_();
  const double lr = 0.1;
  optim::CautiousSgd opt({p}, optim::CautiousSgdOptions(lr));
  const double g[2][3] = {{0.3, -0.4, 2.0}, {0.1, 0.5, -0.2}};
  double x[3] = {1.0, -2.0, 0.5}, b[3] = {0, 0, 0};
  for (int t = 0; t < 2; ++t) {
    p.mutable_grad() = t64({g[t][0], g[t][1], g[t][2]});
    opt.step();
    double kept = 0;
    for (int i = 0; i < 3; ++i) {
      b[i] = 0.9 * b[i] + g[t][i];
      kept += (b[i] * g[t][i] > 0) / 3.0;
    }
    for (int i = 0; i < 3; ++i) {
      const double mask = (b[i] * g[t][i] > 0) / kept;
      x[i] -= lr * b[i] * mask;
      EXPECT_NEAR(at(p, i), x[i], 1e-15) << "step " << t + 1 << " i " << i;
    }
  }
  // Step 2: b = (0.37, 0.14, 1.6) against g = (0.1, 0.5, -0.2): entry 2 is
  // masked, entries 0 and 1 move by 3/2 of sgd's step.
  EXPECT_NEAR(at(p, 2), 0.5 - lr * 2.0, 1e-15);
}

TEST(CautiousAdam, TwoStepsMatchTheFormula) {
  auto p = t64({1.0, -2.0, 0.5, 0.25}).requires_grad_();
  const double lr = 1e-2, eps = 1e-6;
  optim::CautiousAdam opt({p}, optim::CautiousAdamOptions(lr));
  const double g[2][4] = {{0.3, -0.4, 2.0, -1.0}, {-1.0, -0.1, 0.5, 0.2}};
  double x[4] = {1.0, -2.0, 0.5, 0.25}, m[4] = {}, v[4] = {};
  for (int t = 1; t <= 2; ++t) {
    p.mutable_grad() =
        t64({g[t - 1][0], g[t - 1][1], g[t - 1][2], g[t - 1][3]});
    opt.step();
    const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t);
    double kept = 0;
    for (int i = 0; i < 4; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[t - 1][i];
      v[i] = 0.999 * v[i] + 0.001 * g[t - 1][i] * g[t - 1][i];
      kept += (m[i] * g[t - 1][i] > 0) / 4.0;
    }
    for (int i = 0; i < 4; ++i) {
      const double mask = (m[i] * g[t - 1][i] > 0) / kept;
      x[i] -= lr / bc1 * m[i] * mask / (std::sqrt(v[i] / bc2) + eps);
      EXPECT_NEAR(at(p, i), x[i], 1e-15) << "step " << t << " i " << i;
    }
  }
}

// ---------------------------------------------------------------------------
// Registry, hyperparameter lists, misuse, whole pairs

// What a record carries: every entry's hyperparameters are named once,
// finite, and leave lr to the record's own field.
TEST(ModernRegistry, EveryEntrysHyperparametersAreNamedOnceAndFinite) {
  for (const auto& name : optim::optimizer_names()) {
    std::set<std::string> seen;
    for (const auto& [k, v] : optim::find_optimizer(name).hparams) {
      EXPECT_TRUE(seen.insert(k).second) << name << ": duplicate " << k;
      EXPECT_TRUE(std::isfinite(v)) << name << ": " << k;
    }
    EXPECT_FALSE(seen.count("lr")) << name;
  }
  // shampoo_beta < 0 resolves to beta2.
  const auto h = optim::SoapOptions().hparams();
  EXPECT_EQ(h[2].first, "shampoo_beta");
  EXPECT_EQ(h[2].second, 0.95);
}

TEST(ModernRegistry, InvalidOptionsThrowNamingTheValue) {
  auto W = torch::zeros({4, 4}, torch::kDouble).requires_grad_();
  auto v = torch::zeros({3}, torch::kDouble).requires_grad_();
  expect_throw_naming(
      [&] {
        optim::Soap({W}, optim::SoapOptions(1e-3).precondition_frequency(0));
      },
      "0");
  expect_throw_naming([&] { optim::AdamMini({W}, {W}, 3); }, "3");
  expect_throw_naming(
      [&] { optim::NorMuon({W}, {}, optim::NorMuonOptions(0.02).beta2(1.5)); },
      "1.5");
  expect_throw_naming([&] { optim::AdaMuon({v}, {}); }, "[3]");
  expect_throw_naming(
      [&] { optim::Scion({W}, {}, optim::ScionOptions(0.1).alpha(2.5)); },
      "2.5");
  expect_throw_naming(
      [&] {
        optim::ShampooGraft({W}, {},
                            optim::ShampooGraftOptions(0.1).graft_eps(-4));
      },
      "-4");
  expect_throw_naming(
      [&] {
        optim::MuonTorch({W}, {}, optim::MuonTorchOptions(0.1).ns_steps(100));
      },
      "100");
  expect_throw_naming(
      [&] {
        optim::CautiousSgd({W}, optim::CautiousSgdOptions(0.1).momentum(-0.5));
      },
      "-0.5");
  expect_throw_naming(
      [&] {
        optim::CautiousAdam({W},
                            optim::CautiousAdamOptions(1e-3).mask_floor(2.5));
      },
      "2.5");
}

// Every registered rule through a whole tiny pair (mod11, 2 layers, 4 heads,
// the model's real parameter split: a 3-D positional parameter, gains, W_Q /
// W_K as qk): it runs, stays finite and moves the loss.
TEST(ModernPairs, EveryRuleTrainsATinyPair) {
  for (const auto& name : optim::optimizer_names()) {
    auto spec = testing_helpers::tiny_spec(name, twins::TwinKind::kGauge, 5,
                                           torch::kDouble);
    spec.lr = twins::default_lr(name, "mod47");
    const auto r = twins::run_pair(spec);
    ASSERT_TRUE(r.ok()) << name;
    EXPECT_TRUE(std::isfinite(r.curve.back().qk_drift_max)) << name;
    EXPECT_NE(r.curve.back().val_loss[0], r.curve.front().val_loss[0]) << name;
  }
}

// Why SOAP's twins can split at its first update (step 2) on the mod-p
// model: the step-1 gradients of layer 0's W_Q and W_K are rank-deficient
// (their inputs are the embeddings of 48 tokens at three positions), so
// L = G G^T, from which SOAP takes its left basis at step 1, has a
// zero eigenspace. eigh's basis inside it is arbitrary, not the gauge's
// image; step 2's gradient has components there, and Adam treats them per
// coordinate of that arbitrary basis until the next refresh.
TEST(ModernPairs, FirstLayerStepOneGradientIsRankDeficient) {
  twins::PairSpec spec;  // mod47, 2 layers, d 64, 4 heads
  spec.opt = "soap";
  spec.twin = twins::TwinKind::kIdentity;
  spec.steps = 1;
  spec.dtype = torch::kDouble;
  spec.protocol = twins::Protocol::kTwins;  // protocol §2a
  spec.lr = twins::default_lr("soap", "mod47");
  twins::Lockstep pair({spec});
  pair.train_to(1);
  const auto& blocks = pair.reference()->blocks;
  std::vector<int64_t> ranks;
  for (const auto& b : blocks) {
    for (const auto& w : {b->attn->wq->weight, b->attn->wk->weight}) {
      const torch::Tensor s = torch::linalg_svdvals(w.grad());
      ranks.push_back((s > 1e-10 * s[0]).sum().item<int64_t>());
    }
  }
  std::printf(
      "[ soap ] numerical rank of the step-1 gradient of W_Q0 %lld, W_K0 "
      "%lld, W_Q1 %lld, W_K1 %lld (of 64)\n",
      (long long)ranks[0], (long long)ranks[1], (long long)ranks[2],
      (long long)ranks[3]);
  EXPECT_LT(ranks[0], 64);
  EXPECT_LT(ranks[1], 64);
}

}  // namespace
