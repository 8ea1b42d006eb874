// optim/: the update rules of docs/protocol.md §5 against their formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/base.h"
#include "optim/muon.h"
#include "optim/newton_schulz.h"
#include "optim/registry.h"
#include "optim/scalar_adam.h"
#include "twins/defaults.h"

namespace {

torch::Tensor randn64(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape, torch::kDouble);
}

torch::Tensor random_orthogonal(int64_t n, uint64_t seed) {
  return std::get<0>(torch::linalg_qr(randn64({n, n}, seed)));
}

TEST(NewtonSchulz, SingularValuesOfRandomInputsLieInHalfToThreeHalves) {
  int seed = 0;
  for (auto shape : std::vector<std::vector<int64_t>>{
           {64, 256}, {256, 64}, {16, 48}, {48, 16}, {32, 96}, {10, 40}}) {
    auto X = optim::newton_schulz5(randn64(shape, ++seed));
    auto s = torch::linalg_svdvals(X);
    EXPECT_GE(s.min().item<double>(), 0.5) << shape[0] << "x" << shape[1];
    EXPECT_LE(s.max().item<double>(), 1.5) << shape[0] << "x" << shape[1];
  }
}

TEST(NewtonSchulz, IsOrthogonallyEquivariantOnBothSides) {
  for (auto shape : std::vector<std::vector<int64_t>>{{16, 48}, {48, 16}}) {
    auto G = randn64(shape, 7);
    auto Qr = random_orthogonal(shape[1], 8);
    auto Ql = random_orthogonal(shape[0], 9);
    auto ns = optim::newton_schulz5(G);
    auto right = optim::newton_schulz5(G.mm(Qr));
    auto left = optim::newton_schulz5(Ql.mm(G));
    EXPECT_LE((right - ns.mm(Qr)).abs().max().item<double>(), 1e-13);
    EXPECT_LE((left - Ql.mm(ns)).abs().max().item<double>(), 1e-13);
  }
}

TEST(NewtonSchulz, ZeroInputGivesZeroAndNonMatrixThrows) {
  auto z = optim::newton_schulz5(torch::zeros({4, 6}, torch::kDouble));
  EXPECT_TRUE(torch::equal(z, torch::zeros({4, 6}, torch::kDouble)));
  EXPECT_THROW(optim::newton_schulz5(torch::zeros({4}, torch::kDouble)),
               c10::Error);
}

// scalar-Adam on a hand-made two-parameter model, two steps:
//   m_t = 0.9 m + 0.1 g, v_t = 0.999 v + 0.001 g^2,
//   s = sqrt(mean over all 3 entries of v_t / (1 - 0.999^t)) + eps,
//   p -= lr / (1 - 0.9^t) * m_t / s.
TEST(ScalarAdam, TwoStepsOnTwoParametersMatchTheFormula) {
  auto a = torch::tensor({1.0, -2.0}, torch::kDouble).requires_grad_();
  auto b = torch::tensor({0.5}, torch::kDouble).requires_grad_();
  const double lr = 0.01, eps = 1e-8;
  optim::ScalarAdam opt({a, b}, optim::ScalarAdamOptions(lr));
  const double g1[2][3] = {{0.3, -0.4, 2.0}, {-1.0, 0.25, 0.5}};
  double pa[2] = {1.0, -2.0}, pb = 0.5;
  double m[3] = {0, 0, 0}, v[3] = {0, 0, 0};
  for (int t = 1; t <= 2; ++t) {
    a.mutable_grad() =
        torch::tensor({g1[t - 1][0], g1[t - 1][1]}, torch::kDouble);
    b.mutable_grad() = torch::tensor({g1[t - 1][2]}, torch::kDouble);
    opt.step();
    double mean_vhat = 0;
    for (int i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g1[t - 1][i];
      v[i] = 0.999 * v[i] + 0.001 * g1[t - 1][i] * g1[t - 1][i];
      mean_vhat += v[i] / (1 - std::pow(0.999, t)) / 3;
    }
    const double s = std::sqrt(mean_vhat) + eps;
    const double step = lr / (1 - std::pow(0.9, t)) / s;
    pa[0] -= step * m[0];
    pa[1] -= step * m[1];
    pb -= step * m[2];
    EXPECT_NEAR(a[0].item<double>(), pa[0], 1e-15) << "step " << t;
    EXPECT_NEAR(a[1].item<double>(), pa[1], 1e-15) << "step " << t;
    EXPECT_NEAR(b[0].item<double>(), pb, 1e-15) << "step " << t;
  }
  // Step 1 with a single shared denominator: the update direction is the
  // gradient itself (a scalar times g), unlike Adam's sign-like step.
}

TEST(Adam, OurAdamUpdateIsBitwiseLibTorchAdam) {
  auto p1 = randn64({5, 7}, 1).requires_grad_();
  auto p2 = p1.detach().clone();
  auto m = torch::zeros_like(p2), v = torch::zeros_like(p2);
  torch::optim::Adam ref({p1}, torch::optim::AdamOptions(1e-2));
  for (int t = 1; t <= 5; ++t) {
    auto g = randn64({5, 7}, 100 + t);
    p1.mutable_grad() = g.clone();
    ref.step();
    torch::NoGradGuard no_grad;
    optim::adam_update_(p2, g, m, v, t, 1e-2, 0.9, 0.999, 1e-8);
    ASSERT_TRUE(torch::equal(p1.detach(), p2)) << "step " << t;
  }
}

TEST(Adam, FirstStepIsLrTimesGradOverAbsGradPlusEps) {
  auto p = randn64({6}, 3).requires_grad_();
  auto p0 = p.detach().clone();
  auto g = randn64({6}, 4);
  p.mutable_grad() = g.clone();
  auto opt = optim::make_optimizer("adam", {{}, {p}}, 1e-3);
  opt->step();
  auto expected = p0 - 1e-3 * g / (g.abs() + 1e-8);
  EXPECT_LE((p.detach() - expected).abs().max().item<double>(), 1e-17);
}

TEST(Sgd, IsUndampedHeavyBall) {
  auto p = torch::tensor({1.0, 2.0}, torch::kDouble).requires_grad_();
  auto opt = optim::make_optimizer("sgd", {{}, {p}}, 0.5);
  const double g[3][2] = {{1, -1}, {0.5, 2}, {-3, 0}};
  double b[2] = {0, 0}, x[2] = {1, 2};
  for (auto& gt : g) {
    p.mutable_grad() = torch::tensor({gt[0], gt[1]}, torch::kDouble);
    opt->step();
    for (int i = 0; i < 2; ++i) {
      b[i] = 0.9 * b[i] + gt[i];
      x[i] -= 0.5 * b[i];
      EXPECT_DOUBLE_EQ(p[i].item<double>(), x[i]);
    }
  }
}

TEST(Muon, MatricesTakeNewtonSchulzOfMomentumOthersTakeAdam) {
  auto W = randn64({6, 10}, 11).requires_grad_();
  auto e = randn64({4}, 12).requires_grad_();
  auto W0 = W.detach().clone(), e0 = e.detach().clone();
  optim::Muon opt({W}, {e}, optim::MuonOptions(0.02));
  auto gW1 = randn64({6, 10}, 13), gW2 = randn64({6, 10}, 14);
  auto ge1 = randn64({4}, 15), ge2 = randn64({4}, 16);
  W.mutable_grad() = gW1.clone();
  e.mutable_grad() = ge1.clone();
  opt.step();
  W.mutable_grad() = gW2.clone();
  e.mutable_grad() = ge2.clone();
  opt.step();
  auto b1 = gW1, b2 = 0.9 * gW1 + gW2;
  auto W_expected =
      W0 - 0.02 * optim::newton_schulz5(b1) - 0.02 * optim::newton_schulz5(b2);
  EXPECT_LE((W.detach() - W_expected).abs().max().item<double>(), 1e-14);
  // The non-matrix parameter follows Adam at 1e-3, bitwise.
  auto e_ref = e0.clone().requires_grad_();
  torch::optim::Adam adam({e_ref}, torch::optim::AdamOptions(1e-3));
  e_ref.mutable_grad() = ge1.clone();
  adam.step();
  e_ref.mutable_grad() = ge2.clone();
  adam.step();
  EXPECT_TRUE(torch::equal(e.detach(), e_ref.detach()));
}

// Invalid options throw with the offending value in the message.
template <class F>
void expect_throw_naming(F&& f, const std::string& value) {
  try {
    f();
    FAIL() << "no exception; expected one naming " << value;
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(value), std::string::npos) << e.what();
  }
}

TEST(OptimizerOptions, InvalidValuesThrowNamingTheValue) {
  auto p = torch::zeros({2, 2}, torch::kDouble).requires_grad_();
  expect_throw_naming(
      [&] { optim::ScalarAdam({p}, optim::ScalarAdamOptions(-0.25)); },
      "-0.25");
  expect_throw_naming(
      [&] {
        optim::ScalarAdam({p}, optim::ScalarAdamOptions(1e-3).betas(
                                   std::make_tuple(1.5, 0.999)));
      },
      "1.5");
  expect_throw_naming(
      [&] { optim::Muon({p}, {}, optim::MuonOptions(0.02).momentum(1.25)); },
      "1.25");
  expect_throw_naming(
      [&] { optim::Muon({p}, {}, optim::MuonOptions(0.02).ns_steps(0)); }, "0");
  expect_throw_naming(
      [&] {
        auto v = torch::zeros({3}, torch::kDouble).requires_grad_();
        optim::Muon({v}, {}, optim::MuonOptions(0.02));
      },
      "[3]");
  expect_throw_naming(
      [&] {
        optim::make_optimizer("adamw", {{p}, {}}, 1e-3);
      },
      "'adamw'");
  expect_throw_naming(
      [&] {
        optim::make_optimizer("adam", {{p}, {}}, -2.5);
      },
      "-2.5");
}

TEST(Registry, ProtocolLearningRatesAndPredictedClasses) {
  EXPECT_EQ(twins::default_lr("adam", "mod47"), 1e-3);
  EXPECT_EQ(twins::default_lr("sgd", "mod47"), 0.5);
  EXPECT_EQ(twins::default_lr("sgd", "charlm"), 0.1);
  EXPECT_EQ(twins::default_lr("scalar-adam", "mod47"), 3e-3);
  EXPECT_EQ(twins::default_lr("muon", "charlm"), 0.02);
  EXPECT_EQ(optim::find_optimizer("adam").predicted,
            optim::Equivariance::kBasisDependent);
  EXPECT_EQ(optim::find_optimizer("muon").predicted,
            optim::Equivariance::kEquivariant);
}

// A record carries every hyperparameter the factory used: the registry's
// list is the options the optimizer is built with.
TEST(Registry, HyperparametersAreThoseTheOptimizerIsBuiltWith) {
  auto has = [](const optim::Hparams& h, const std::string& name,
                double value) {
    for (const auto& [n, v] : h) {
      if (n == name)
        return v == value;
    }
    return false;
  };
  const auto& adam = optim::find_optimizer("adam").hparams;
  EXPECT_TRUE(has(adam, "beta1", 0.9));
  EXPECT_TRUE(has(adam, "beta2", 0.999));
  EXPECT_TRUE(has(adam, "eps", 1e-8));
  const auto& muon = optim::find_optimizer("muon").hparams;
  EXPECT_TRUE(has(muon, "momentum", 0.9));
  EXPECT_TRUE(has(muon, "ns_steps", 5));
  EXPECT_TRUE(has(muon, "ns_a", optim::kNewtonSchulzA));
  EXPECT_TRUE(has(muon, "adam_lr", 1e-3));
  EXPECT_TRUE(has(optim::find_optimizer("adam-p0.25").hparams, "p", 0.25));
  EXPECT_TRUE(has(optim::find_optimizer("sgd").hparams, "dampening", 0));
  // The built optimizer reads the same values.
  auto p = torch::zeros({2, 2}, torch::kDouble).requires_grad_();
  auto opt = optim::make_optimizer("adam", {{p}, {}}, 1e-3);
  const auto& o = static_cast<const torch::optim::AdamOptions&>(
      opt->param_groups()[0].options());
  EXPECT_EQ(std::get<1>(o.betas()), 0.999);
  EXPECT_EQ(o.lr(), 1e-3);
}

}  // namespace
