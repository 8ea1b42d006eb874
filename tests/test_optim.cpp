// optim/: the update rules of docs/protocol.md §5 against their formulas;
// what the families share (every option read per group, the hybrids' two
// learning rates, one Newton-Schulz bound); the whole state saved and read
// back for every registered rule; the registry's resolver hook; the roles a
// model's parameters carry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "helpers.h"
#include "optim/adam_p.h"
#include "optim/adamuon.h"
#include "optim/base.h"
#include "optim/muon.h"
#include "optim/muon_torch.h"
#include "optim/newton_schulz.h"
#include "optim/normuon.h"
#include "optim/registry.h"
#include "optim/scalar_adam.h"
#include "twins/defaults.h"
#include "twins/pair.h"
#include "twins/setup.h"

namespace {

using testing_helpers::expect_throw_naming;
using testing_helpers::randn64;
using testing_helpers::random_orthogonal;



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

// ---------------------------------------------------------------------------
// The families: options per group, the hybrids' learning rates, NS steps

// Two groups at different p, eps, lr and betas; s pools the three entries of
// both groups, each at its own group's bias correction.
TEST(PooledAdam, AdamPReadsEveryOptionPerGroup) {
  auto a = torch::tensor({1.0, -2.0}, torch::kDouble).requires_grad_();
  auto b = torch::tensor({0.5}, torch::kDouble).requires_grad_();
  struct G {
    double lr, p, eps, beta1, beta2;
  };
  const G opts[2] = {{0.01, 0.5, 1e-8, 0.9, 0.999},
                     {0.02, 0.25, 1e-3, 0.8, 0.99}};
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (int g = 0; g < 2; ++g) {
    const G& o = opts[g];
    groups.emplace_back(std::vector<torch::Tensor>{g == 0 ? a : b},
                        std::make_unique<optim::AdamPOptions>(
                            optim::AdamPOptions(o.lr).p(o.p).eps(o.eps).betas(
                                {o.beta1, o.beta2})));
  }
  optim::AdamP opt(std::move(groups));
  const int group_of[3] = {0, 0, 1};
  const double g[2][3] = {{0.3, -0.4, 2.0}, {-1.0, 0.25, 0.5}};
  double x[3] = {1.0, -2.0, 0.5}, m[3] = {}, v[3] = {};
  for (int t = 1; t <= 2; ++t) {
    a.mutable_grad() =
        torch::tensor({g[t - 1][0], g[t - 1][1]}, torch::kDouble);
    b.mutable_grad() = torch::tensor({g[t - 1][2]}, torch::kDouble);
    opt.step();
    double mean_vhat = 0;
    for (int i = 0; i < 3; ++i) {
      const G& o = opts[group_of[i]];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[t - 1][i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[t - 1][i] * g[t - 1][i];
      mean_vhat += v[i] / (1 - std::pow(o.beta2, t)) / 3;
    }
    const double s = std::sqrt(mean_vhat);
    for (int i = 0; i < 3; ++i) {
      const G& o = opts[group_of[i]];
      const double vhat = v[i] / (1 - std::pow(o.beta2, t));
      const double denom = std::pow(std::sqrt(vhat) + o.eps, o.p) *
                               std::pow(s + o.eps, 1 - o.p) +
                           o.eps;
      x[i] -= o.lr / (1 - std::pow(o.beta1, t)) * m[i] / denom;
    }
    EXPECT_NEAR(a[0].item<double>(), x[0], 1e-15) << "step " << t;
    EXPECT_NEAR(a[1].item<double>(), x[1], 1e-15) << "step " << t;
    EXPECT_NEAR(b[0].item<double>(), x[2], 1e-15) << "step " << t;
  }
}

// scalar-Adam's second group divides by s + 0.5, its first by s + 1e-8.
TEST(PooledAdam, ScalarAdamAddsEachGroupsEpsToThePool) {
  auto a = torch::tensor({1.0, -2.0}, torch::kDouble).requires_grad_();
  auto b = torch::tensor({0.5}, torch::kDouble).requires_grad_();
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a},
                      std::make_unique<optim::ScalarAdamOptions>(0.01));
  groups.emplace_back(std::vector<torch::Tensor>{b},
                      std::make_unique<optim::ScalarAdamOptions>(
                          optim::ScalarAdamOptions(0.03).eps(0.5)));
  optim::ScalarAdam opt(std::move(groups));
  const double g[3] = {0.3, -0.4, 2.0};
  a.mutable_grad() = torch::tensor({g[0], g[1]}, torch::kDouble);
  b.mutable_grad() = torch::tensor({g[2]}, torch::kDouble);
  opt.step();
  // Step 1: m_hat = g, v_hat = g^2.
  const double s = std::sqrt((g[0] * g[0] + g[1] * g[1] + g[2] * g[2]) / 3);
  EXPECT_NEAR(a[0].item<double>(), 1.0 - 0.01 * g[0] / (s + 1e-8), 1e-15);
  EXPECT_NEAR(a[1].item<double>(), -2.0 - 0.01 * g[1] / (s + 1e-8), 1e-15);
  EXPECT_NEAR(b[0].item<double>(), 0.5 - 0.03 * g[2] / (s + 0.5), 1e-15);
}

// Every hybrid in the registry: group 0 reports the matrix rule's lr, group
// 1 Adam's, and set_lr on group 1 scales Adam's first step (lr g / (|g| +
// eps)) and nothing else.
TEST(HybridOptimizers, EachGroupsLrIsItsRulesAndSetLrReachesIt) {
  int hybrids = 0;
  for (const auto& name : optim::optimizer_names()) {
    const auto& info = optim::find_optimizer(name);
    double adam_lr = -1;
    for (const auto& [k, v] : info.hparams) {
      if (k == "adam_lr")
        adam_lr = v;
    }
    if (adam_lr < 0)
      continue;
    ++hybrids;
    const double lr = 0.125;
    if (adam_lr == 0)
      adam_lr = lr;  // AdaMuon: one rate for both
    std::vector<torch::Tensor> e(2);
    std::vector<std::unique_ptr<torch::optim::Optimizer>> opts;
    for (int k = 0; k < 2; ++k) {
      auto W = randn64({4, 4}, 30).requires_grad_();
      e[k] = torch::tensor({1.0, -1.0}, torch::kDouble).requires_grad_();
      opts.push_back(optim::make_optimizer(name, {{W}, {e[k]}, {W}, 2}, lr));
      ASSERT_EQ(opts[k]->param_groups().size(), 2u) << name;
      EXPECT_EQ(opts[k]->param_groups()[0].options().get_lr(), lr) << name;
      EXPECT_EQ(opts[k]->param_groups()[1].options().get_lr(), adam_lr) << name;
      e[k].mutable_grad() = torch::tensor({0.5, -2.0}, torch::kDouble);
    }
    opts[1]->param_groups()[1].options().set_lr(2 * adam_lr);
    EXPECT_EQ(opts[1]->param_groups()[0].options().get_lr(), lr) << name;
    opts[0]->step();
    opts[1]->step();
    const torch::Tensor start = torch::tensor({1.0, -1.0}, torch::kDouble);
    const torch::Tensor d0 = e[0].detach() - start, d1 = e[1].detach() - start;
    EXPECT_LE((d1 - 2 * d0).abs().max().item<double>(), 1e-12 * adam_lr)
        << name;
    EXPECT_NEAR(d0[0].item<double>(), -adam_lr, 1e-7 * adam_lr) << name;
  }
  EXPECT_GE(hybrids, 7);  // muon, shampoo, normuon, adamuon, scion x2, ...
}

TEST(NewtonSchulz, StepsOutsideOneTo99ThrowNamingTheValueAndTheRange) {
  const torch::Tensor G = randn64({4, 6}, 40);
  auto W = torch::zeros({4, 4}, torch::kDouble).requires_grad_();
  const std::vector<std::pair<int64_t, std::function<void(int64_t)>>> uses = {
      {0, [&](int64_t n) { optim::newton_schulz5(G, n); }},
      {100, [&](int64_t n) { optim::newton_schulz5(G, n); }},
      {0,
       [&](int64_t n) {
         optim::newton_schulz_torch(G, 3.4445, -4.7750, 2.0315, n, 1e-7);
       }},
      {-3,
       [&](int64_t n) {
         optim::Muon({W}, {}, optim::MuonOptions().ns_steps(n));
       }},
      {0,
       [&](int64_t n) {
         optim::NorMuon({W}, {}, optim::NorMuonOptions().ns_steps(n));
       }},
      {100,
       [&](int64_t n) {
         optim::AdaMuon({W}, {}, optim::AdaMuonOptions().ns_steps(n));
       }},
      {0, [&](int64_t n) {
         optim::MuonTorch({W}, {}, optim::MuonTorchOptions().ns_steps(n));
       }}};
  for (const auto& [n, use] : uses) {
    try {
      use(n);
      ADD_FAILURE() << "no exception for " << n << " steps";
    } catch (const c10::Error& e) {
      const std::string msg = e.what_without_backtrace();
      EXPECT_NE(msg.find("Invalid Newton-Schulz steps: " + std::to_string(n) +
                         " (must be in [1, 99])"),
                std::string::npos)
          << msg;
    }
  }
  // The ends of the range run.
  EXPECT_NO_THROW(optim::newton_schulz5(G, 1));
  EXPECT_NO_THROW(optim::newton_schulz5(G, 99));
}

// ---------------------------------------------------------------------------
// The whole state, saved and read back

// A parameter list shaped like a model's: a W_Q-like square matrix (two
// heads), a rectangular matrix, a gain and a 3-D positional parameter.
std::vector<torch::Tensor> state_params(torch::Dtype dtype) {
  std::vector<torch::Tensor> out;
  uint64_t seed = 50;
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{8, 8}, {6, 4}, {4}, {1, 3, 4}}) {
    out.push_back(randn64(shape, ++seed).to(dtype).requires_grad_());
  }
  return out;
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps)
    out.push_back(p.detach().clone().requires_grad_());
  return out;
}

std::unique_ptr<torch::optim::Optimizer> build_on(
    const std::string& name, const std::vector<torch::Tensor>& ps) {
  return optim::make_optimizer(name,
                               {{ps[0], ps[1]}, {ps[2], ps[3]}, {ps[0]}, 2},
                               twins::default_lr(name, "mod47"));
}

// Steps first+1 .. last, step t's gradients drawn from seed t.
void train(torch::optim::Optimizer& opt, const std::vector<torch::Tensor>& ps,
           int first, int last) {
  for (int t = first + 1; t <= last; ++t) {
    for (size_t i = 0; i < ps.size(); ++i) {
      ps[i].mutable_grad() =
          randn64(ps[i].sizes().vec(), 1000 * t + i).to(ps[i].scalar_type());
    }
    opt.step();
  }
}

// Through bytes, as a checkpoint file would hold it.
void save_and_load(const torch::optim::Optimizer& from,
                   torch::optim::Optimizer& to) {
  torch::serialize::OutputArchive out;
  from.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  std::istringstream in_bytes(bytes.str());
  torch::serialize::InputArchive in;
  in.load_from(in_bytes);
  to.load(in);
}

bool all_equal(const std::vector<torch::Tensor>& a,
               const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i].detach(), b[i].detach()))
      return false;
  }
  return true;
}

// For every registered rule (and the dial's two ends), float64 and
// float32: 7 steps, the state saved and loaded into an optimizer built
// afresh on copies of the parameters, 17 more steps, bitwise the parameters
// of 24 steps straight. 24 steps take SOAP past two basis refreshes (calls
// 11 and 21) and Shampoo past its second root refresh (step 21), both after
// the load. Without the load the copies must end elsewhere: every rule's
// state matters, so the check is not empty.
TEST(OptimizerState, SavedAndLoadedContinuesBitwiseForEveryRule) {
  constexpr int kSaveAt = 7, kSteps = 24;
  std::vector<std::string> names = optim::optimizer_names();
  names.push_back("adam-p0");
  names.push_back("adam-p1");
  for (const auto& name : names) {
    for (auto dtype : {torch::kDouble, torch::kFloat}) {
      SCOPED_TRACE(name + (dtype == torch::kDouble ? " float64" : " float32"));
      const auto straight = state_params(dtype);
      train(*build_on(name, straight), straight, 0, kSteps);

      const auto first = state_params(dtype);
      auto before = build_on(name, first);
      train(*before, first, 0, kSaveAt);
      const auto resumed = copies(first), unloaded = copies(first);
      auto after = build_on(name, resumed);
      save_and_load(*before, *after);
      train(*after, resumed, kSaveAt, kSteps);
      EXPECT_TRUE(all_equal(resumed, straight));

      train(*build_on(name, unloaded), unloaded, kSaveAt, kSteps);
      EXPECT_FALSE(all_equal(unloaded, straight));
    }
  }
}

TEST(OptimizerState, LoadIntoADifferentLayoutThrowsNamingTheCounts) {
  auto W = randn64({4, 4}, 60).requires_grad_();
  auto e = randn64({3}, 61).requires_grad_();
  optim::Muon two({W}, {e});
  W.mutable_grad() = randn64({4, 4}, 62);
  e.mutable_grad() = randn64({3}, 63);
  two.step();
  auto W1 = W.detach().clone().requires_grad_();
  optim::Muon one({W1}, {});
  try {
    save_and_load(two, one);
    FAIL() << "no exception";
  } catch (const c10::Error& err) {
    const std::string msg = err.what_without_backtrace();
    EXPECT_NE(msg.find("saved with 2 parameter groups, this optimizer has 1"),
              std::string::npos)
        << msg;
  }
}

// ---------------------------------------------------------------------------
// The resolver hook

int test_resolver_calls = 0;

// "test-gd:sgd" is plain gradient descent (LibTorch's SGD without momentum),
// "test-gd:none" names nothing, any other "test-gd:..." is malformed.
std::optional<optim::OptimizerInfo> resolve_test_gd(const std::string& name) {
  ++test_resolver_calls;
  const std::string rest = name.substr(std::string("test-gd:").size());
  if (rest == "none")
    return std::nullopt;
  TORCH_CHECK(rest == "sgd", "Malformed test-gd name: '", name, "'");
  return optim::make_entry(
      name, "plain gradient descent", optim::Equivariance::kEquivariant,
      torch::optim::SGDOptions(0),
      [](const optim::ParamSplit& p, const torch::optim::SGDOptions& o) {
        return std::make_unique<torch::optim::SGD>(p.all(), o);
      });
}

TEST(Registry, AResolverBuildsAPrefixedNameOnFirstUseOnce) {
  ASSERT_TRUE(optim::register_resolver("test-gd:", resolve_test_gd));
  const auto listed = optim::optimizer_names();
  EXPECT_EQ(std::count(listed.begin(), listed.end(), "test-gd:sgd"), 0);
  EXPECT_EQ(test_resolver_calls, 0);  // nothing resolved before use
  const auto& info = optim::find_optimizer("test-gd:sgd");
  EXPECT_EQ(info.summary, "plain gradient descent");
  EXPECT_EQ(&optim::find_optimizer("test-gd:sgd"), &info);
  EXPECT_TRUE(optim::has_optimizer("test-gd:sgd"));
  EXPECT_EQ(test_resolver_calls, 1);
  // It builds a working optimizer and passes resolve_optimizer_names.
  auto p = torch::tensor({1.0, 2.0}, torch::kDouble).requires_grad_();
  auto opt = optim::make_optimizer("test-gd:sgd", {{}, {p}}, 0.5);
  p.mutable_grad() = torch::tensor({2.0, -1.0}, torch::kDouble);
  opt->step();
  EXPECT_TRUE(
      torch::equal(p.detach(), torch::tensor({0.0, 2.5}, torch::kDouble)));
  EXPECT_EQ(optim::resolve_optimizer_names({"test-gd:sgd", "adam"}),
            (std::vector<std::string>{"test-gd:sgd", "adam"}));
  // A name it does not know, a malformed one.
  expect_throw_naming([] { optim::find_optimizer("test-gd:none"); },
                      "Unknown optimizer: 'test-gd:none'");
  expect_throw_naming([] { optim::find_optimizer("test-gd:x"); },
                      "Malformed test-gd name: 'test-gd:x'");
  EXPECT_FALSE(optim::has_optimizer("test-gd:x"));
  EXPECT_FALSE(optim::has_optimizer("test-gdx"));
}

TEST(Registry, PrefixesAndNamesCannotClaimEachOther) {
  auto gd = [](const std::string&) -> std::optional<optim::OptimizerInfo> {
    return std::nullopt;
  };
  ASSERT_TRUE(optim::register_resolver("claims:", gd));
  expect_throw_naming(
      [&] {
        optim::register_optimizer({"claims:mine",
                                   "x",
                                   optim::Equivariance::kEquivariant,
                                   {},
                                   [](const optim::ParamSplit& s, double lr) {
                                     return optim::make_optimizer("sgd", s, lr);
                                   }});
      },
      "'claims:mine' is reserved for the names resolved under 'claims:'");
  expect_throw_naming([&] { optim::register_resolver("claims:x", gd); },
                      "prefix 'claims:x' overlaps 'claims:'");
  expect_throw_naming([&] { optim::register_resolver("claim", gd); },
                      "prefix 'claim' overlaps 'claims:'");
  expect_throw_naming([&] { optim::register_resolver("sg", gd); },
                      "would claim the registered 'sgd'");
  expect_throw_naming([&] { optim::register_resolver("", gd); },
                      "empty prefix");
}

// ---------------------------------------------------------------------------
// Roles

// Every parameter of a 2-layer model carries its role and layer; the
// matrices are exactly the six weights of each layer, W_Q / W_K the qk set.
TEST(ParamSplit, EveryParameterOfTheModelCarriesItsRole) {
  using optim::Role;
  const auto cfg = testing_helpers::tiny_mod_config();
  auto m = model::build(cfg, 1, torch::kDouble, torch::kCPU);
  const optim::ParamSplit split = twins::param_split(m);
  const auto all = split.all();
  ASSERT_EQ(split.roles.size(), all.size());
  ASSERT_EQ(all.size(), m->parameters().size());
  std::map<std::pair<std::string, int64_t>, int> count;
  for (const auto& r : split.roles)
    ++count[{optim::to_string(r.role), r.layer}];
  for (int64_t l = 0; l < cfg.depth; ++l) {
    for (const char* w : {"wq", "wk", "wv", "wo", "w1", "w2"})
      EXPECT_EQ((count[{w, l}]), 1) << w << " " << l;
    EXPECT_EQ((count[{"gain", l}]), 2) << l;
    const auto& b = m->blocks[l];
    EXPECT_EQ(split.role_of(b->attn->wk->weight),
              (optim::ParamRole{Role::kWk, l}));
    EXPECT_EQ(split.role_of(b->w2->weight), (optim::ParamRole{Role::kW2, l}));
    EXPECT_EQ(split.role_of(b->norm2->gain),
              (optim::ParamRole{Role::kGain, l}));
  }
  EXPECT_EQ(split.role_of(m->tok_emb), (optim::ParamRole{Role::kEmbedding}));
  EXPECT_EQ(split.role_of(m->pos_emb), (optim::ParamRole{Role::kPositional}));
  EXPECT_EQ(split.role_of(m->norm_f->gain), (optim::ParamRole{Role::kGain}));
  EXPECT_EQ(split.role_of(m->head->weight), (optim::ParamRole{Role::kHead}));
  EXPECT_EQ(count.size(), size_t(6 * cfg.depth + cfg.depth + 4));
  for (size_t i = 0; i < split.matrices.size(); ++i) {
    EXPECT_GE(split.roles[i].layer, 0) << i;
    EXPECT_LE(int(split.roles[i].role), int(Role::kW2)) << i;
  }
  for (const auto& w : split.qk) {
    const auto r = split.role_of(w);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->role == Role::kWq || r->role == Role::kWk);
  }
  EXPECT_EQ(split.role_of(torch::zeros({2})), std::nullopt);
}

}  // namespace
