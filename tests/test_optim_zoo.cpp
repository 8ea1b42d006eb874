// The optimizer zoo (optim/rmsprop, signum, lion, adafactor,
// shampoo, adam_p): each rule's first two steps against its formula written
// out by hand, float64 equivariance of the ones the theory calls
// equivariant, the step-1 split of the basis-dependent ones, Adam-p's two
// ends, the adam-p names, every rule's learning rates, and an optimizer
// registered by a user.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "helpers.h"
#include "optim/adafactor.h"
#include "optim/adam_p.h"
#include "optim/lion.h"
#include "optim/registry.h"
#include "optim/rmsprop.h"
#include "optim/scalar_adam.h"
#include "optim/shampoo.h"
#include "optim/signum.h"
#include "sweep/plan.h"
#include "twins/defaults.h"
#include "twins/pair.h"

// ---------------------------------------------------------------------------
// A user's optimizer: a torch::optim::Optimizer subclass and one
// registration line (the README's example).

namespace {

using testing_helpers::at;
using testing_helpers::mod47_float64;
using testing_helpers::t64;

// Plain gradient descent, p -= lr g.
class PlainGd : public torch::optim::Optimizer {
 public:
  PlainGd(std::vector<torch::Tensor> params, double lr)
      : torch::optim::Optimizer(
            {torch::optim::OptimizerParamGroup(std::move(params))},
            std::make_unique<torch::optim::SGDOptions>(lr)) {}
  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups_) {
      const double lr = group.options().get_lr();
      for (auto& p : group.params()) {
        if (p.grad().defined())
          p.add_(p.grad(), -lr);
      }
    }
    return {};
  }
};

}  // namespace

namespace {

using testing_helpers::expect_throw_naming;
using testing_helpers::tiny_spec;
using twins::TwinKind;

double sign(double x) {
  return double((x > 0) - (x < 0));
}

// ---------------------------------------------------------------------------
// First two steps against the formula

TEST(RMSprop, TwoStepsMatchTheFormula) {
  auto p = t64({1.0, -2.0, 0.5}).requires_grad_();
  const double lr = 1e-2, eps = 1e-8;
  optim::RMSprop opt({p}, optim::RMSpropOptions(lr));
  const double g[2][3] = {{0.3, -0.4, 2.0}, {-1.0, 0.25, 0.0}};
  double x[3] = {1.0, -2.0, 0.5}, v[3] = {0, 0, 0};
  for (int t = 0; t < 2; ++t) {
    p.mutable_grad() = t64({g[t][0], g[t][1], g[t][2]});
    opt.step();
    for (int i = 0; i < 3; ++i) {
      v[i] = 0.99 * v[i] + 0.01 * g[t][i] * g[t][i];
      x[i] -= lr * g[t][i] / (std::sqrt(v[i]) + eps);
      EXPECT_NEAR(at(p, i), x[i], 1e-15) << "step " << t + 1 << " i " << i;
    }
  }
}

TEST(RMSprop, IsBitwiseLibTorchRMSpropWithoutMomentum) {
  torch::manual_seed(1);
  auto p1 = torch::randn({4, 5}, torch::kDouble).requires_grad_();
  auto p2 = p1.detach().clone().requires_grad_();
  optim::RMSprop ours({p1}, optim::RMSpropOptions(3e-3));
  torch::optim::RMSprop ref(
      {p2}, torch::optim::RMSpropOptions(3e-3).alpha(0.99).eps(1e-8));
  for (int t = 0; t < 4; ++t) {
    auto g = torch::randn({4, 5}, torch::kDouble);
    p1.mutable_grad() = g.clone();
    p2.mutable_grad() = g.clone();
    ours.step();
    ref.step();
    ASSERT_TRUE(torch::equal(p1, p2)) << "step " << t + 1;
  }
}

// sign(0) = 0: the zero entry of m does not move.
TEST(Signum, TwoStepsMatchTheFormula) {
  auto p = t64({1.0, -2.0, 0.5}).requires_grad_();
  const double lr = 1e-2;
  optim::Signum opt({p}, optim::SignumOptions(lr));
  const double g[2][3] = {{0.3, -0.4, 0.0}, {-1.0, 0.25, 0.0}};
  double x[3] = {1.0, -2.0, 0.5}, m[3] = {0, 0, 0};
  for (int t = 0; t < 2; ++t) {
    p.mutable_grad() = t64({g[t][0], g[t][1], g[t][2]});
    opt.step();
    for (int i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[t][i];
      x[i] -= lr * sign(m[i]);
      EXPECT_DOUBLE_EQ(at(p, i), x[i]) << "step " << t + 1 << " i " << i;
    }
  }
  // Step 2: m = 0.9 * 0.03 - 0.1 = -0.073 < 0, so entry 0 moved back.
  EXPECT_DOUBLE_EQ(at(p, 0), 1.0);
  EXPECT_DOUBLE_EQ(at(p, 2), 0.5);
}

// Step 2 is chosen so that sign(0.9 m + 0.1 g) differs from sign(g): Lion's
// interpolated sign, not signSGD.
TEST(Lion, TwoStepsMatchTheFormula) {
  auto p = t64({1.0, -2.0}).requires_grad_();
  const double lr = 1e-2;
  optim::Lion opt({p}, optim::LionOptions(lr));
  const double g[2][2] = {{10.0, -3.0}, {-0.5, 0.5}};
  double x[2] = {1.0, -2.0}, m[2] = {0, 0};
  for (int t = 0; t < 2; ++t) {
    p.mutable_grad() = t64({g[t][0], g[t][1]});
    opt.step();
    for (int i = 0; i < 2; ++i) {
      x[i] -= lr * sign(0.9 * m[i] + 0.1 * g[t][i]);
      m[i] = 0.99 * m[i] + 0.01 * g[t][i];
      EXPECT_DOUBLE_EQ(at(p, i), x[i]) << "step " << t + 1 << " i " << i;
    }
  }
  // 0.9 * 0.1 + 0.1 * (-0.5) = 0.04 > 0 although g < 0: p[0] fell twice.
  EXPECT_DOUBLE_EQ(at(p, 0), 1.0 - 2 * lr);
}

// A 2 x 3 matrix (factored) and a 2-vector (unfactored), two steps.
TEST(Adafactor, TwoStepsMatchTheFormula) {
  auto W = t64({1.0, -2.0, 0.5, 0.0, 3.0, -1.0}).reshape({2, 3});
  W.requires_grad_();
  auto b = t64({0.25, -0.75}).requires_grad_();
  const double lr = 1e-2, eps = 1e-8, beta2 = 0.999;
  optim::Adafactor opt({W, b}, optim::AdafactorOptions(lr));
  const double gW[2][2][3] = {{{0.3, -0.4, 2.0}, {1.0, 0.5, -0.1}},
                              {{-1.0, 0.2, 0.6}, {0.3, -2.0, 0.7}}};
  const double gb[2][2] = {{0.5, -0.2}, {0.1, 0.4}};
  double x[2][3] = {{1.0, -2.0, 0.5}, {0.0, 3.0, -1.0}}, y[2] = {0.25, -0.75};
  double R[2] = {0, 0}, C[3] = {0, 0, 0}, v[2] = {0, 0};
  for (int t = 0; t < 2; ++t) {
    W.mutable_grad() = torch::tensor({gW[t][0][0], gW[t][0][1], gW[t][0][2],
                                      gW[t][1][0], gW[t][1][1], gW[t][1][2]},
                                     torch::kDouble)
                           .reshape({2, 3});
    b.mutable_grad() = t64({gb[t][0], gb[t][1]});
    opt.step();
    const double bc2 = 1 - std::pow(beta2, t + 1);
    for (int i = 0; i < 2; ++i) {
      double row = 0;
      for (int j = 0; j < 3; ++j)
        row += gW[t][i][j] * gW[t][i][j] / 3;
      R[i] = beta2 * R[i] + (1 - beta2) * row;
    }
    for (int j = 0; j < 3; ++j) {
      double col = 0;
      for (int i = 0; i < 2; ++i)
        col += gW[t][i][j] * gW[t][i][j] / 2;
      C[j] = beta2 * C[j] + (1 - beta2) * col;
    }
    const double meanR = (R[0] + R[1]) / 2;
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 3; ++j) {
        const double V = R[i] * C[j] / meanR / bc2;
        x[i][j] -= lr * gW[t][i][j] / (std::sqrt(V) + eps);
        EXPECT_NEAR(at(W, 3 * i + j), x[i][j], 1e-14)
            << "step " << t + 1 << " W[" << i << "," << j << "]";
      }
      v[i] = beta2 * v[i] + (1 - beta2) * gb[t][i] * gb[t][i];
      y[i] -= lr * gb[t][i] / (std::sqrt(v[i] / bc2) + eps);
      EXPECT_NEAR(at(b, i), y[i], 1e-15) << "step " << t + 1 << " b " << i;
    }
  }
}

TEST(Adafactor, FactoredMomentIsExactForRankOneAndZeroForZero) {
  auto r = t64({1.0, 4.0}), c = t64({2.0, 0.5, 3.0});
  // g^2 = r c^T (rank one): row means r * mean(c), col means c * mean(r).
  auto g2 = r.unsqueeze(1) * c.unsqueeze(0);
  auto V = optim::factored_second_moment(g2.mean(1), g2.mean(0));
  EXPECT_LE((V - g2).abs().max().item<double>(), 1e-15);
  auto Z = optim::factored_second_moment(torch::zeros({2}, torch::kDouble),
                                         torch::zeros({3}, torch::kDouble));
  EXPECT_TRUE(torch::equal(Z, torch::zeros({2, 3}, torch::kDouble)));
}

// "Diagonal" 2 x 3 gradients make L, R diagonal, so the roots are
// (a^2 + 1)^(-1/4) by hand: step 1 moves W[0,0] by lr a / sqrt(a^2 + 1).
// Step 2 reuses step 1's roots (refresh every 20 steps); with refresh every
// step it uses the accumulated a^2 + c^2.
TEST(Shampoo, TwoStepsMatchTheFormula) {
  const double lr = 0.1, a = 2.0, bb = -0.5, c = 1.5, d = 0.25;
  for (int64_t every : {20, 1}) {
    auto W = torch::zeros({2, 3}, torch::kDouble).requires_grad_();
    auto e = t64({1.0, -1.0}).requires_grad_();
    auto e_ref = e.detach().clone().requires_grad_();
    optim::Shampoo opt({W}, {e}, optim::ShampooOptions(lr).root_every(every));
    torch::optim::Adam adam({e_ref}, torch::optim::AdamOptions(1e-3));
    auto G1 = torch::zeros({2, 3}, torch::kDouble);
    G1[0][0] = a;
    G1[1][1] = bb;
    auto G2 = torch::zeros({2, 3}, torch::kDouble);
    G2[0][0] = c;
    G2[1][1] = d;
    const double ge[2][2] = {{0.3, -0.2}, {0.1, 0.5}};
    for (int t = 0; t < 2; ++t) {
      W.mutable_grad() = (t == 0 ? G1 : G2).clone();
      e.mutable_grad() = t64({ge[t][0], ge[t][1]});
      e_ref.mutable_grad() = t64({ge[t][0], ge[t][1]});
      opt.step();
      adam.step();
    }
    // Root entries after step 1 (and after step 2 when refreshed).
    const double r0 = 1 / std::sqrt(a * a + 1), r1 = 1 / std::sqrt(bb * bb + 1);
    const double s0 = every == 1 ? 1 / std::sqrt(a * a + c * c + 1) : r0;
    const double s1 = every == 1 ? 1 / std::sqrt(bb * bb + d * d + 1) : r1;
    EXPECT_NEAR(at(W, 0), -lr * (a * r0 + c * s0), 1e-15) << every;
    EXPECT_NEAR(at(W, 4), -lr * (bb * r1 + d * s1), 1e-15) << every;
    for (int64_t i : {1, 2, 3, 5})
      EXPECT_EQ(at(W, i), 0.0) << every;
    // The non-matrix parameter is Adam at 1e-3, bitwise.
    EXPECT_TRUE(torch::equal(e, e_ref)) << every;
  }
}

TEST(Shampoo, InverseFourthRootIsSymmetricAndInvertsADampedMatrix) {
  torch::manual_seed(3);
  auto G = torch::randn({5, 7}, torch::kDouble);
  auto A = G.mm(G.t());
  auto X = optim::inverse_fourth_root(A, 1.0);
  auto I = torch::eye(5, torch::kDouble);
  auto X4 = X.mm(X).mm(X).mm(X);
  EXPECT_LE((X4.mm(A + I) - I).abs().max().item<double>(), 1e-12);
  EXPECT_LE((X - X.t()).abs().max().item<double>(), 1e-14);
  // A float32 matrix comes back in float32.
  EXPECT_EQ(optim::inverse_fourth_root(A.to(torch::kFloat), 1.0).scalar_type(),
            torch::kFloat);
}

// p = 0.5: denominator (sqrt(v_hat) + eps)^0.5 (s + eps)^0.5 + eps, s the
// RMS of v_hat over all three entries of both parameters.
TEST(AdamP, TwoStepsAtHalfMatchTheFormula) {
  auto a = t64({1.0, -2.0}).requires_grad_();
  auto b = t64({0.5}).requires_grad_();
  const double lr = 0.01, eps = 1e-8, dial = 0.5;
  optim::AdamP opt({a, b}, optim::AdamPOptions(lr).p(dial));
  const double g[2][3] = {{0.3, -0.4, 2.0}, {-1.0, 0.25, 0.5}};
  double x[3] = {1.0, -2.0, 0.5}, m[3] = {0, 0, 0}, v[3] = {0, 0, 0};
  for (int t = 1; t <= 2; ++t) {
    a.mutable_grad() = t64({g[t - 1][0], g[t - 1][1]});
    b.mutable_grad() = t64({g[t - 1][2]});
    opt.step();
    const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t);
    double mean_vhat = 0;
    for (int i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[t - 1][i];
      v[i] = 0.999 * v[i] + 0.001 * g[t - 1][i] * g[t - 1][i];
      mean_vhat += v[i] / bc2 / 3;
    }
    const double s = std::sqrt(mean_vhat);
    for (int i = 0; i < 3; ++i) {
      const double denom = std::pow(std::sqrt(v[i] / bc2) + eps, dial) *
                               std::pow(s + eps, 1 - dial) +
                           eps;
      x[i] -= lr / bc1 * m[i] / denom;
    }
    EXPECT_NEAR(a[0].item<double>(), x[0], 1e-15) << "step " << t;
    EXPECT_NEAR(a[1].item<double>(), x[1], 1e-15) << "step " << t;
    EXPECT_NEAR(b[0].item<double>(), x[2], 1e-15) << "step " << t;
  }
}

TEST(AdamP, AtOneIsBitwiseAdam) {
  torch::manual_seed(5);
  auto w1 = torch::randn({6, 4}, torch::kDouble).requires_grad_();
  auto v1 = torch::randn({4}, torch::kDouble).requires_grad_();
  auto w2 = w1.detach().clone().requires_grad_();
  auto v2 = v1.detach().clone().requires_grad_();
  auto ours = optim::make_optimizer("adam-p1", {{w1}, {v1}}, 1e-2);
  torch::optim::Adam ref({w2, v2}, torch::optim::AdamOptions(1e-2));
  for (int t = 0; t < 5; ++t) {
    auto gw = torch::randn({6, 4}, torch::kDouble);
    auto gv = torch::randn({4}, torch::kDouble);
    w1.mutable_grad() = gw.clone();
    v1.mutable_grad() = gv.clone();
    w2.mutable_grad() = gw.clone();
    v2.mutable_grad() = gv.clone();
    ours->step();
    ref.step();
    ASSERT_TRUE(torch::equal(w1, w2)) << "step " << t + 1;
    ASSERT_TRUE(torch::equal(v1, v2)) << "step " << t + 1;
  }
}

// The whole pair, float32: adam-p1 and adam give the same record numbers.
TEST(AdamP, AtOneGivesAdamsPairBitwise) {
  auto ra =
      twins::run_pair(tiny_spec("adam", TwinKind::kGauge, 10, torch::kFloat));
  auto rp = twins::run_pair(
      tiny_spec("adam-p1", TwinKind::kGauge, 10, torch::kFloat));
  ASSERT_EQ(ra.curve.size(), rp.curve.size());
  for (size_t i = 0; i < ra.curve.size(); ++i) {
    EXPECT_EQ(ra.curve[i].logit_drift, rp.curve[i].logit_drift) << i;
    EXPECT_EQ(ra.curve[i].val_loss, rp.curve[i].val_loss) << i;
  }
  EXPECT_EQ(ra.qk_per_head, rp.qk_per_head);
}

// p = 0 divides by s + 2 eps where scalar-Adam divides by s + eps: the
// parameters agree to a relative O(eps / s).
TEST(AdamP, AtZeroIsScalarAdamUpToOrderEps) {
  torch::manual_seed(6);
  auto w1 = torch::randn({6, 4}, torch::kDouble).requires_grad_();
  auto w2 = w1.detach().clone().requires_grad_();
  auto w0 = w1.detach().clone();
  auto ours = optim::make_optimizer("adam-p0", {{w1}, {}}, 1e-2);
  auto ref = optim::make_optimizer("scalar-adam", {{w2}, {}}, 1e-2);
  for (int t = 0; t < 5; ++t) {
    auto g = torch::randn({6, 4}, torch::kDouble);
    w1.mutable_grad() = g.clone();
    w2.mutable_grad() = g.clone();
    ours->step();
    ref->step();
  }
  const double moved = (w2 - w0).abs().max().item<double>();
  const double diff = (w1 - w2).abs().max().item<double>();
  EXPECT_GT(moved, 1e-3);
  EXPECT_LE(diff, 1e-7 * moved);  // gradients ~1: eps / s ~ 1e-8
  EXPECT_GT(diff, 0.0);           // the extra eps is there
}

TEST(AdamP, DenominatorAtZeroIsThePooledScalarPlusEps) {
  auto v = t64({4.0, 0.0, 9.0});
  auto pooled = torch::tensor(2.5, torch::kDouble);
  auto d = optim::adam_p_denominator(v, 1.0, pooled, 0.0, 1e-8);
  EXPECT_TRUE(torch::equal(d, torch::full({3}, 2.5 + 1e-8, torch::kDouble)));
}

// ---------------------------------------------------------------------------
// Gauge twins: float64 equivariance, step-1 split

TEST(ZooTwins, ShampooAndAdamPAtZeroStayBelow1e12QkDriftInFloat64) {
  for (const char* opt : {"shampoo", "adam-p0"}) {
    auto r = twins::run_pair(mod47_float64(opt, 5));
    ASSERT_EQ(r.status, twins::PairStatus::kOk) << opt;
    ASSERT_EQ(r.curve.back().step, 5) << opt;
    for (const auto& c : r.curve) {
      EXPECT_LE(c.qk_drift_max, 1e-12) << opt << " step " << c.step;
      EXPECT_LE(c.logit_drift, 1e-12) << opt << " step " << c.step;
    }
  }
}

TEST(ZooTwins, BasisDependentRulesSplitAtStep1InFloat64) {
  for (const char* opt :
       {"rmsprop", "signum", "lion", "adafactor", "adam-p0.5"}) {
    auto r = twins::run_pair(mod47_float64(opt, 1));
    ASSERT_EQ(r.status, twins::PairStatus::kOk) << opt;
    ASSERT_EQ(r.curve[1].step, 1) << opt;
    EXPECT_GE(r.curve[1].logit_drift, 1e-4) << opt;
    EXPECT_GE(r.curve[1].qk_drift_mean, 1e-4) << opt;
  }
}

// ---------------------------------------------------------------------------
// Names, registry, the user's optimizer

// The tables run every registered rule on both tasks without --lr: each
// has a rate there, and the Adam-p dial's names share the family's row.
TEST(ZooRegistry, EveryRegisteredRuleHasALearningRateOnBothTasks) {
  for (const auto& name : optim::optimizer_names()) {
    for (const char* task : {"mod47", "charlm"}) {
      const double lr = twins::default_lr(name, task);
      EXPECT_GT(lr, 0) << name << " " << task;
      EXPECT_TRUE(std::isfinite(lr)) << name << " " << task;
    }
  }
  for (const char* name : {"adam-p0", "adam-p0.25", "adam-p1"}) {
    EXPECT_EQ(twins::default_lr(name, "mod47"),
              twins::default_lr("adam-p", "mod47"))
        << name;
    EXPECT_EQ(twins::default_lr(name, "charlm"),
              twins::default_lr("adam-p", "charlm"))
        << name;
  }
}

TEST(ZooRegistry, AdamPNamesParseAndResolve) {
  EXPECT_EQ(optim::adam_p_name(0.5), "adam-p0.5");
  EXPECT_EQ(optim::adam_p_name(0), "adam-p0");
  EXPECT_EQ(optim::adam_p_name(1), "adam-p1");
  EXPECT_EQ(optim::adam_p_name(0.125), "adam-p0.125");
  EXPECT_EQ(optim::adam_p_exponent("adam-p0.75"), 0.75);
  EXPECT_EQ(optim::adam_p_exponent("adam-p"), optim::kDefaultAdamP);
  EXPECT_EQ(optim::adam_p_exponent("adam"), std::nullopt);
  EXPECT_EQ(optim::resolve_optimizer_names({"adam", "adam-p0.50", "adam-p"}),
            (std::vector<std::string>{"adam", "adam-p0.5", "adam-p0.5"}));
  EXPECT_EQ(optim::resolve_optimizer_names({"adam-p", "sgd"}, {0, 0.25}),
            (std::vector<std::string>{"adam-p0", "adam-p0.25", "sgd"}));
  EXPECT_TRUE(optim::has_optimizer("adam-p0.3"));
  EXPECT_FALSE(optim::has_optimizer("adam-px"));
  EXPECT_FALSE(optim::has_optimizer("adam-p2"));
}

// Misuse throws a one-line message naming the value.
TEST(ZooRegistry, BadNamesAndExponentsThrowNamingThem) {
  expect_throw_naming([] { optim::find_optimizer("adam-px"); }, "'adam-px'");
  expect_throw_naming([] { optim::find_optimizer("adam-p0.5.1"); },
                      "'adam-p0.5.1'");
  expect_throw_naming([] { optim::find_optimizer("adam-p-0.5"); },
                      "'adam-p-0.5'");
  expect_throw_naming([] { optim::find_optimizer("adam-pnan"); },
                      "'adam-pnan'");
  expect_throw_naming([] { optim::find_optimizer("adam-p1.5"); }, "1.5");
  expect_throw_naming([] { optim::adam_p_name(-0.25); }, "-0.25");
  expect_throw_naming(
      [] {
        optim::resolve_optimizer_names({"adam-p"}, {0.5, 2.5});
      },
      "2.5");
  expect_throw_naming([] { optim::resolve_optimizer_names({"adam"}, {0.5}); },
                      "--p");
  auto p = torch::zeros({2}, torch::kDouble).requires_grad_();
  expect_throw_naming(
      [&] { optim::AdamP({p}, optim::AdamPOptions(1e-3).p(1.25)); }, "1.25");
  expect_throw_naming([&] { optim::RMSprop({p}, optim::RMSpropOptions(-3.5)); },
                      "-3.5");
  expect_throw_naming(
      [&] { optim::Signum({p}, optim::SignumOptions(1e-3).momentum(1.5)); },
      "1.5");
  expect_throw_naming(
      [&] {
        optim::Lion({p}, optim::LionOptions(1e-3).betas({0.9, 2.5}));
      },
      "2.5");
  expect_throw_naming(
      [&] { optim::Adafactor({p}, optim::AdafactorOptions(1e-3).beta2(1.0)); },
      "1");
  expect_throw_naming(
      [&] { optim::Shampoo({p}, {}, optim::ShampooOptions(0.1)); }, "[2]");
  auto W = torch::zeros({2, 2}, torch::kDouble).requires_grad_();
  expect_throw_naming(
      [&] { optim::Shampoo({W}, {}, optim::ShampooOptions(0.1).damping(-2)); },
      "-2");
  expect_throw_naming(
      [] {
        optim::register_optimizer({"adam-p0.3",
                                   "x",
                                   optim::Equivariance::kEquivariant,
                                   {},
                                   [](const optim::ParamSplit& s, double lr) {
                                     return std::make_unique<PlainGd>(s.all(),
                                                                      lr);
                                   }});
      },
      "'adam-p0.3'");
}

TEST(ZooPlan, BareAdamPExpandsOncePerP) {
  sweep::PlanRequest r;
  r.opts = {"adam-p", "adam"};
  r.adam_ps = {0, 1};
  auto specs = sweep::expand(r);
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].opt, "adam-p0");
  EXPECT_EQ(specs[1].opt, "adam-p1");
  EXPECT_EQ(specs[2].opt, "adam");
  EXPECT_EQ(specs[0].lr, 1e-3);
  EXPECT_NE(specs[0].key(), specs[1].key());
}

TEST(UserOptimizer, OneRegistrationLineListsItAndItRuns) {
  // The one line a user adds (at namespace scope in their own source);
  // here inside the test, so that the other suites of this executable
  // list the built-in rules alone. Name, --list-optimizers line, predicted
  // class, hyperparameters (none but lr), factory, learning rate on every
  // task.
  static const bool kPlainGdRegistered =
      optim::register_optimizer({"plain-gd",
                                 "p -= lr g",
                                 optim::Equivariance::kEquivariant,
                                 {},
                                 [](const optim::ParamSplit& p, double lr) {
                                   return std::make_unique<PlainGd>(p.all(),
                                                                    lr);
                                 },
                                 0.5});
  ASSERT_TRUE(kPlainGdRegistered);
  const auto names = optim::optimizer_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "plain-gd"), names.end());
  EXPECT_EQ(twins::default_lr("plain-gd", "mod47"), 0.5);
  // Through the plan and a whole pair, like any built-in: plain gradient
  // descent is gauge-equivariant, its float64 gauge twin stays at 1e-12.
  sweep::PlanRequest r;
  r.opts = {"plain-gd"};
  EXPECT_EQ(sweep::expand(r).front().opt, "plain-gd");
  auto s = tiny_spec("plain-gd", TwinKind::kGauge, 5, torch::kDouble);
  s.lr = 0.5;
  auto res = twins::run_pair(s);
  ASSERT_EQ(res.status, twins::PairStatus::kOk);
  EXPECT_NE(res.curve.back().val_loss[0], res.curve.front().val_loss[0]);
  EXPECT_LE(res.curve.back().qk_drift_max, 1e-12);
}

}  // namespace
