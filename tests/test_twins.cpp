// twins/: the protocol's properties on small pairs — exact identity twins,
// equivariance in float64, Adam's first-step split (Proposition 4.4), the
// checkpoint schedule, divergence handling and the JSON contract.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "model/loss.h"
#include "optim/registry.h"
#include "twins/device.h"
#include "twins/gauge.h"
#include "twins/pair.h"
#include "twins/plan.h"
#include "twins/record.h"

namespace {

using testing_helpers::tiny_spec;
using twins::TwinKind;

TEST(Twins, IdentityTwinIsExactlyZeroAfter20StepsForEveryOptimizer) {
  for (const auto& opt : optim::optimizer_names()) {
    auto r = twins::run_pair(tiny_spec(opt, TwinKind::kIdentity, 20,
                                       torch::kFloat));
    ASSERT_EQ(r.status, "ok") << opt;
    ASSERT_EQ(r.curve.back().step, 20) << opt;
    for (const auto& c : r.curve) {
      EXPECT_EQ(c.logit_drift, 0.0) << opt << " step " << c.step;
      EXPECT_EQ(c.qk_drift_max, 0.0) << opt << " step " << c.step;
    }
    for (double v : r.qk_per_head) EXPECT_EQ(v, 0.0) << opt;
    EXPECT_EQ(r.val_acc[0], r.val_acc[1]) << opt;
  }
}

// The mod47 model (2L d64 4 heads) in float64 for 5 steps.
twins::PairSpec mod47_float64(const std::string& opt, int64_t steps) {
  twins::PairSpec s;
  s.opt = opt;
  s.twin = TwinKind::kGauge;
  s.steps = steps;
  s.dtype = torch::kDouble;
  s.lr = optim::default_lr(opt, "mod");
  return s;
}

TEST(Twins, EquivariantGaugeTwinsStayBelow1e12QkDriftInFloat64) {
  for (const char* opt : {"sgd", "scalar-adam", "muon"}) {
    auto r = twins::run_pair(mod47_float64(opt, 5));
    ASSERT_EQ(r.status, "ok") << opt;
    for (const auto& c : r.curve) {
      EXPECT_LE(c.qk_drift_max, 1e-12) << opt << " step " << c.step;
      EXPECT_LE(c.logit_drift, 1e-12) << opt << " step " << c.step;
    }
  }
}

TEST(Twins, AdamGaugeTwinSplitsAbove1e4QkDriftInFloat64) {
  auto r = twins::run_pair(mod47_float64("adam", 5));
  ASSERT_EQ(r.status, "ok");
  EXPECT_GE(r.curve.back().qk_drift_mean, 1e-4);
  EXPECT_GE(r.curve[1].logit_drift, 1e-4);  // already at step 1
}

// D_eps(G) = G / (|G| + eps), entrywise.
torch::Tensor D(const torch::Tensor& G) { return G / (G.abs() + 1e-8); }

// Proposition 4.4 (PROTOCOL §8): with U = W_Q,h^T, V = W_K,h^T and Q = A_h^T,
// one Adam step from zero state changes the head's product by
//   W~1 - W1 = -eta [E(G_U) V^T + U E(G_V)^T]
//              + eta^2 [D(G_U Q) D(G_V Q)^T - D(G_U) D(G_V)^T],
//   E(G) = D(G Q) Q^T - D(G).
TEST(Twins, AdamFirstStepProductChangeMatchesProposition44) {
  const double eta = 1e-2;
  auto cfg = testing_helpers::tiny_mod_config();
  data::ModularAddition task(11, 42, torch::kCPU);
  auto m1 = model::build(cfg, 42, torch::kDouble, torch::kCPU);
  auto m2 = model::build(cfg, 42, torch::kDouble, torch::kCPU);
  auto A = twins::gauge_matrices(cfg.depth, cfg.heads, cfg.head_dim(), 777);
  twins::rotate_heads(m2, A);

  // Gradients of copy 1 at the start, per head block.
  const auto& batch = task.train_batch(1);
  model::cross_entropy(m1->forward(batch.x), batch.y).backward();
  std::vector<torch::Tensor> gq, gk;
  for (int64_t l = 0; l < cfg.depth; ++l) {
    gq.push_back(m1->blocks[l]->attn->wq->weight.grad().clone());
    gk.push_back(m1->blocks[l]->attn->wk->weight.grad().clone());
  }
  std::vector<torch::Tensor> before_q, before_k;  // copy 1 at the start
  for (int64_t l = 0; l < cfg.depth; ++l) {
    before_q.push_back(m1->blocks[l]->attn->wq->weight.detach().clone());
    before_k.push_back(m1->blocks[l]->attn->wk->weight.detach().clone());
  }
  auto opt1 = optim::make_optimizer(
      "adam", {m1->matrix_parameters(), m1->other_parameters()}, eta);
  opt1->step();
  model::cross_entropy(m2->forward(batch.x), batch.y).backward();
  auto opt2 = optim::make_optimizer(
      "adam", {m2->matrix_parameters(), m2->other_parameters()}, eta);
  opt2->step();

  const int64_t hd = cfg.head_dim();
  for (int64_t l = 0; l < cfg.depth; ++l) {
    for (int64_t h = 0; h < cfg.heads; ++h) {
      auto U = before_q[l].narrow(0, h * hd, hd).t();  // (d, hd)
      auto V = before_k[l].narrow(0, h * hd, hd).t();
      auto GU = gq[l].narrow(0, h * hd, hd).t();
      auto GV = gk[l].narrow(0, h * hd, hd).t();
      auto Q = A[l][h].t();
      auto E = [&](const torch::Tensor& G) { return D(G.mm(Q)).mm(Q.t()) - D(G); };
      auto predicted = -eta * (E(GU).mm(V.t()) + U.mm(E(GV).t())) +
                       eta * eta * (D(GU.mm(Q)).mm(D(GV.mm(Q)).t()) -
                                    D(GU).mm(D(GV).t()));
      torch::NoGradGuard no_grad;
      auto W1 = m1->query_block(l, h).t().mm(m1->key_block(l, h));
      auto W1t = m2->query_block(l, h).t().mm(m2->key_block(l, h));
      auto measured = W1t - W1;
      const double rel = (measured - predicted).norm().item<double>() /
                         predicted.norm().item<double>();
      EXPECT_LE(rel, 1e-10) << "layer " << l << " head " << h;
      EXPECT_GT(predicted.norm().item<double>(), 1e-6);  // a real split
    }
  }
}

TEST(Twins, CheckpointsAreTheProtocolScheduleWithinSteps) {
  EXPECT_EQ(twins::checkpoint_steps(1500),
            (std::vector<int64_t>{0, 1, 10, 50, 100, 300, 600, 1000, 1500}));
  EXPECT_EQ(twins::checkpoint_steps(20), (std::vector<int64_t>{0, 1, 10, 20}));
  EXPECT_EQ(twins::checkpoint_steps(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(twins::checkpoint_steps(3000).back(), 3000);
  EXPECT_EQ(twins::checkpoint_steps(2500).back(), 2500);
  EXPECT_EQ(twins::checkpoint_steps(2500).size(), 11u);  // ..., 2000, 2500
}

TEST(Twins, NonFiniteLossStopsThePairAsDiverged) {
  auto s = tiny_spec("sgd", TwinKind::kGauge, 200, torch::kFloat);
  s.lr = 1e6;
  auto r = twins::run_pair(s);
  EXPECT_EQ(r.status, "diverged");
  ASSERT_GT(r.diverged_step, 0);
  EXPECT_LT(r.diverged_step, 200);
  EXPECT_LT(r.curve.back().step, r.diverged_step);
  auto j = twins::to_json(r);
  EXPECT_EQ(j["status"], "diverged");
  EXPECT_EQ(j["diverged_step"], r.diverged_step);
}

TEST(Twins, NoiseTwinDiffersByTheScale) {
  auto cfg = testing_helpers::tiny_mod_config();
  auto m1 = model::build(cfg, 1, torch::kDouble, torch::kCPU);
  auto m2 = model::build(cfg, 1, torch::kDouble, torch::kCPU);
  twins::apply_twin(m2, TwinKind::kNoise, 888, 1e-3);
  auto diff = m2->blocks[0]->attn->wq->weight - m1->blocks[0]->attn->wq->weight;
  EXPECT_NEAR(diff.std().item<double>(), 1e-3, 2e-4);
  EXPECT_TRUE(torch::equal(m1->blocks[0]->attn->wv->weight,
                           m2->blocks[0]->attn->wv->weight));
}

TEST(Record, CarriesTheOutputContractFields) {
  auto r = twins::run_pair(tiny_spec("adam", TwinKind::kNoise, 3,
                                     torch::kFloat));
  auto j = twins::to_json(r);
  for (const char* k :
       {"task", "opt", "twin", "init_seed", "twin_seed", "noise_scale", "lr",
        "steps", "dtype", "device", "model", "curve", "qk_drift_per_head",
        "val_acc", "train_loss", "status", "wall_s", "torch_version", "key"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["twin"], "noise");
  EXPECT_EQ(j["noise_scale"], 1e-7);
  EXPECT_EQ(j["model"]["d_model"], 16);
  EXPECT_EQ(j["curve"][0]["step"], 0);
  EXPECT_EQ(j["curve"].size(), 3u);  // steps 0, 1, 3
  EXPECT_EQ(j["qk_drift_per_head"].size(), 8u);  // 2 layers x 4 heads
  for (const char* k : {"step", "logit_drift", "qk_drift_mean", "qk_drift_max"}) {
    EXPECT_TRUE(j["curve"][1].contains(k)) << k;
  }
}

TEST(Twins, ConcurrentCopiesGiveBitwiseTheSameRecordAsSequential) {
  for (const char* opt : {"adam", "muon"}) {
    auto spec = tiny_spec(opt, TwinKind::kGauge, 60, torch::kFloat);
    twins::set_threads(1);
    auto seq = twins::to_json(twins::run_pair(spec, {}, false));
    auto par = twins::to_json(twins::run_pair(spec, {}, true));
    for (const char* timing : {"wall_s", "threads"}) {  // not results
      seq.erase(timing);
      par.erase(timing);
    }
    EXPECT_EQ(seq.dump(), par.dump()) << opt;
    EXPECT_GT(seq["curve"].back()["logit_drift"].get<double>(), 0.0);
  }
}

TEST(Plan, DefaultIsTheSevenTable3Pairs) {
  twins::PlanRequest req;
  auto specs = twins::expand(req);
  ASSERT_EQ(specs.size(), 7u);
  EXPECT_EQ(specs[0].opt, "adam");
  EXPECT_EQ(specs[0].twin_seed, 777u);
  EXPECT_EQ(specs[2].twin, TwinKind::kNoise);
  EXPECT_EQ(specs[2].twin_seed, 888u);
  EXPECT_EQ(specs[3].lr, 0.5);  // sgd's mod learning rate
  EXPECT_EQ(specs[0].steps, 1500);
  EXPECT_EQ(specs[0].dtype, torch::kFloat);
}

TEST(Plan, ListsExpandToTheirCartesianProduct) {
  twins::PlanRequest req;
  req.opts = {"adam", "sgd"};
  req.twins = {"gauge", "identity", "noise"};
  req.init_seeds = {1, 2};
  req.twin_seeds = {5, 6, 7};
  req.noise_scales = {1e-7, 1e-5};
  auto specs = twins::expand(req);
  // per opt and init seed: gauge 3 seeds + identity 1 + noise 3 x 2
  EXPECT_EQ(specs.size(), 2u * 2u * (3u + 1u + 6u));
  std::set<std::string> keys;
  for (const auto& s : specs) keys.insert(s.key());
  EXPECT_EQ(keys.size(), specs.size());
}

}  // namespace
