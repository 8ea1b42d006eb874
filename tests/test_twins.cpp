// twins/: the protocol's properties on small pairs — exact identity twins,
// equivariance in float64, Adam's first-step split (Proposition 4.4), the
// checkpoint schedule, divergence handling, the JSON contract, the
// vocabulary, and groups of pairs sharing copy 1 giving every pair's record
// bitwise; the one thread pool and the checked file helpers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>

#include "helpers.h"
#include "model/loss.h"
#include "optim/registry.h"
#include "twins/defaults.h"
#include "twins/device.h"
#include "twins/gauge.h"
#include "twins/io.h"
#include "twins/pair.h"
#include "twins/record.h"

namespace {

using testing_helpers::mod47_float64;
using testing_helpers::tiny_spec;
using twins::TwinKind;

TEST(Twins, IdentityTwinIsExactlyZeroAfter20StepsForEveryOptimizer) {
  for (const auto& opt : optim::optimizer_names()) {
    auto r =
        twins::run_pair(tiny_spec(opt, TwinKind::kIdentity, 20, torch::kFloat));
    ASSERT_EQ(r.status, twins::PairStatus::kOk) << opt;
    ASSERT_EQ(r.curve.back().step, 20) << opt;
    for (const auto& c : r.curve) {
      EXPECT_EQ(c.logit_drift, 0.0) << opt << " step " << c.step;
      EXPECT_EQ(c.qk_drift_max, 0.0) << opt << " step " << c.step;
    }
    for (double v : r.qk_per_head)
      EXPECT_EQ(v, 0.0) << opt;
    EXPECT_EQ(r.val_acc[0], r.val_acc[1]) << opt;
  }
}


TEST(Twins, EquivariantGaugeTwinsStayBelow1e12QkDriftInFloat64) {
  for (const char* opt : {"sgd", "scalar-adam", "muon"}) {
    auto r = twins::run_pair(mod47_float64(opt, 5));
    ASSERT_EQ(r.status, twins::PairStatus::kOk) << opt;
    for (const auto& c : r.curve) {
      EXPECT_LE(c.qk_drift_max, 1e-12) << opt << " step " << c.step;
      EXPECT_LE(c.logit_drift, 1e-12) << opt << " step " << c.step;
    }
  }
}

TEST(Twins, AdamGaugeTwinSplitsAbove1e4QkDriftInFloat64) {
  auto r = twins::run_pair(mod47_float64("adam", 5));
  ASSERT_EQ(r.status, twins::PairStatus::kOk);
  EXPECT_GE(r.curve.back().qk_drift_mean, 1e-4);
  EXPECT_GE(r.curve[1].logit_drift, 1e-4);  // already at step 1
}

// D_eps(G) = G / (|G| + eps), entrywise.
torch::Tensor D(const torch::Tensor& G) {
  return G / (G.abs() + 1e-8);
}

// Proposition 4.4 (docs/protocol.md §8): with U = W_Q,h^T, V = W_K,h^T and Q =
// A_h^T, one Adam step from zero state changes the head's product by
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
      auto E = [&](const torch::Tensor& G) {
        return D(G.mm(Q)).mm(Q.t()) - D(G);
      };
      auto predicted =
          -eta * (E(GU).mm(V.t()) + U.mm(E(GV).t())) +
          eta * eta * (D(GU.mm(Q)).mm(D(GV.mm(Q)).t()) - D(GU).mm(D(GV).t()));
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
  EXPECT_EQ(
      twins::checkpoint_steps(1500),
      (std::vector<int64_t>{0, 1, 2, 3, 5, 10, 50, 100, 300, 600, 1000, 1500}));
  EXPECT_EQ(twins::checkpoint_steps(20),
            (std::vector<int64_t>{0, 1, 2, 3, 5, 10, 20}));
  EXPECT_EQ(twins::checkpoint_steps(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(twins::checkpoint_steps(4), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(twins::checkpoint_steps(3000).back(), 3000);
  EXPECT_EQ(twins::checkpoint_steps(2500).back(), 2500);
  EXPECT_EQ(twins::checkpoint_steps(2500).size(), 14u);  // ..., 2000, 2500
}

TEST(Twins, NonFiniteLossStopsThePairAsDiverged) {
  auto s = tiny_spec("sgd", TwinKind::kGauge, 200, torch::kFloat);
  s.lr = 1e6;
  auto r = twins::run_pair(s);
  EXPECT_EQ(r.status, twins::PairStatus::kDiverged);
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
  auto r =
      twins::run_pair(tiny_spec("adam", TwinKind::kNoise, 3, torch::kFloat));
  auto j = twins::to_json(r);
  for (const char* k : {"task",
                        "opt",
                        "twin",
                        "init_seed",
                        "twin_seed",
                        "noise_scale",
                        "lr",
                        "steps",
                        "dtype",
                        "device",
                        "model",
                        "curve",
                        "qk_drift_per_head",
                        "val_acc",
                        "train_loss",
                        "status",
                        "wall_s",
                        "torch_version",
                        "key",
                        "schema",
                        "hparams"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["twin"], "noise");
  EXPECT_EQ(j["noise_scale"], 1e-7);
  EXPECT_EQ(j["model"]["d_model"], 16);
  EXPECT_EQ(j["curve"][0]["step"], 0);
  EXPECT_EQ(j["curve"].size(), 4u);  // steps 0, 1, 2, 3
  EXPECT_EQ(j["schema"], twins::kRecordSchema);
  EXPECT_EQ(j["qk_drift_per_head"].size(), 8u);  // 2 layers x 4 heads
  for (const char* k :
       {"step", "logit_drift", "qk_drift_mean", "qk_drift_max"}) {
    EXPECT_TRUE(j["curve"][1].contains(k)) << k;
  }
}

// JSON has no infinity: a rule's non-finite default (D-Adaptation's
// growth_rate=inf) is written as text and reads back to the record's key,
// or the record would never be found again (a resume retrains it, an
// aggregate calls it missing); finite ones stay numbers.
TEST(Record, ANonFiniteHyperparameterReadsBackToItsKey) {
  twins::PairResult r =
      twins::run_pair(tiny_spec("adam", TwinKind::kGauge, 1, torch::kFloat));
  r.spec.hparams = {{"eps", 1e-8},
                    {"growth_rate", std::numeric_limits<double>::infinity()},
                    {"floor", -std::numeric_limits<double>::infinity()},
                    {"unset", std::nan("")}};
  const nlohmann::json j = twins::to_json(r);
  EXPECT_EQ(j["hparams"]["growth_rate"], "inf");
  EXPECT_EQ(j["hparams"]["floor"], "-inf");
  EXPECT_EQ(j["hparams"]["unset"], "nan");
  EXPECT_EQ(j["hparams"]["eps"], 1e-8);
  const twins::PairResult back =
      twins::from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back.spec.key(), j["key"].get<std::string>());
  nlohmann::json bad = j;
  bad["hparams"]["eps"] = "big";
  try {
    twins::from_json(bad);
    FAIL() << "a hyperparameter 'big' was read";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("'eps' is 'big'"),
              std::string::npos)
        << e.what_without_backtrace();
  }
}

TEST(Twins, ConcurrentCopiesGiveBitwiseTheSameRecordAsSequential) {
  for (const char* opt : {"adam", "muon"}) {
    auto spec = tiny_spec(opt, TwinKind::kGauge, 60, torch::kFloat);
    twins::set_threads(1);
    auto seq =
        twins::without_timing(twins::to_json(twins::run_pair(spec, {}, 1)));
    auto par =
        twins::without_timing(twins::to_json(twins::run_pair(spec, {}, 2)));
    EXPECT_EQ(seq.dump(), par.dump()) << opt;
    EXPECT_GT(seq["curve"].back()["logit_drift"].get<double>(), 0.0);
  }
}

// The twins of one optimizer (gauge, identity, two noise scales) trained
// against one shared copy 1 give each pair's record bit for bit, the
// reference's losses and accuracies included, at one or three threads.
TEST(Groups, SharedReferenceGivesEveryPairsRecordBitwise) {
  for (const char* opt : {"adam", "sgd"}) {
    std::vector<twins::PairSpec> specs = {
        tiny_spec(opt, TwinKind::kGauge, 60, torch::kFloat),
        tiny_spec(opt, TwinKind::kIdentity, 60, torch::kFloat),
        tiny_spec(opt, TwinKind::kNoise, 60, torch::kFloat),
        tiny_spec(opt, TwinKind::kNoise, 60, torch::kFloat)};
    specs[3].noise_scale = 1e-5;
    std::vector<std::string> alone;
    for (const auto& s : specs) {
      alone.push_back(
          twins::without_timing(twins::to_json(twins::run_pair(s))).dump());
    }
    for (int threads : {1, 3}) {
      twins::GroupOptions o;
      o.threads = threads;
      const auto group = twins::run_group(specs, o);
      ASSERT_EQ(group.size(), specs.size());
      for (size_t i = 0; i < specs.size(); ++i) {
        EXPECT_EQ(twins::without_timing(twins::to_json(group[i])).dump(),
                  alone[i])
            << opt << " pair " << i << " threads " << threads;
        EXPECT_EQ(group[i].group_pairs, 4);
      }
      // The identity twin is trained apart from the reference and still
      // agrees with it bit for bit.
      EXPECT_EQ(twins::largest_drift(group[1]), 0.0) << opt;
      EXPECT_GT(twins::final_drift(group[0]), 0.0) << opt;
    }
  }
}

TEST(Groups, PairsThatDoNotShareCopyOneAreRefused) {
  auto a = tiny_spec("adam", TwinKind::kGauge, 5, torch::kFloat);
  auto b = a;
  b.init_seed = 43;  // another copy 1
  EXPECT_THROW(twins::run_group({a, b}), c10::Error);
  b = a;
  b.lr = 2e-3;
  EXPECT_THROW(twins::run_group({a, b}), c10::Error);
  b = a;
  b.twin = TwinKind::kNoise;  // the same copy 1
  EXPECT_NO_THROW(twins::Lockstep({a, b}));
}

// A twin that diverges ends its own record at the step an independent pair
// would, and the others train on; a reference that diverges ends them all.
TEST(Groups, DivergenceEndsEachPairAsAnIndependentPairWould) {
  // A huge perturbation of W_Q / W_K makes the noise twin's loss overflow
  // while the reference and the gauge twin train on.
  auto gauge = tiny_spec("sgd", TwinKind::kGauge, 120, torch::kFloat);
  gauge.lr = 0.5;
  auto wild = gauge;
  wild.twin = TwinKind::kNoise;
  wild.noise_scale = 1e18;
  const auto alone_wild = twins::run_pair(wild);
  ASSERT_EQ(alone_wild.status, twins::PairStatus::kDiverged)
      << "the test needs a diverging twin";
  const auto group = twins::run_group({gauge, wild});
  EXPECT_EQ(group[1].status, twins::PairStatus::kDiverged);
  EXPECT_EQ(group[1].diverged_step, alone_wild.diverged_step);
  EXPECT_EQ(twins::without_timing(twins::to_json(group[1])).dump(),
            twins::without_timing(twins::to_json(alone_wild)).dump());
  EXPECT_EQ(group[0].status, twins::PairStatus::kOk);
  EXPECT_EQ(group[0].curve.back().step, 120);

  auto bad = tiny_spec("sgd", TwinKind::kGauge, 200, torch::kFloat);
  bad.lr = 1e6;  // the reference itself diverges
  auto bad_noise = bad;
  bad_noise.twin = TwinKind::kNoise;
  const auto both = twins::run_group({bad, bad_noise});
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(both[i].status, twins::PairStatus::kDiverged);
    EXPECT_EQ(twins::without_timing(twins::to_json(both[i])).dump(),
              twins::without_timing(
                  twins::to_json(twins::run_pair(i ? bad_noise : bad)))
                  .dump());
  }
}

TEST(Keys, ReferenceKeyIgnoresOnlyTheTwin) {
  auto s = tiny_spec("adam", TwinKind::kGauge, 5, torch::kFloat);
  s.hparams = {{"beta2", 0.999}};
  auto t = s;
  t.twin = TwinKind::kNoise;
  t.twin_seed = 1;
  t.noise_scale = 1e-5;
  EXPECT_EQ(s.reference_key(), t.reference_key());
  EXPECT_NE(s.key(), t.key());
  EXPECT_NE(s.pair_id(), t.pair_id());
  auto u = s;
  u.hparams = {{"beta2", 0.99}};
  EXPECT_NE(s.reference_key(), u.reference_key());
  EXPECT_NE(s.key(), u.key());
  EXPECT_EQ(s.pair_id(), u.pair_id());  // the same pair, another rule
  EXPECT_EQ(twins::hparams_difference(u.hparams, s.hparams),
            "beta2 0.99 vs 0.999");
  EXPECT_EQ(twins::hparams_difference(s.hparams, s.hparams), "");
  // The order of a list does not change a key.
  auto v = s;
  v.hparams = {{"eps", 1e-8}, {"beta2", 0.999}};
  auto w = s;
  w.hparams = {{"beta2", 0.999}, {"eps", 1e-8}};
  EXPECT_EQ(v.key(), w.key());
}

TEST(Vocabulary, DriftFinalChaosTrackingAndOnsetAreDefinedOnce) {
  twins::PairResult g, n;
  g.spec.steps = n.spec.steps = 1000;
  auto point = [](int64_t step, double drift, double loss) {
    twins::CurvePoint c;
    c.step = step;
    c.logit_drift = drift;
    c.val_loss = {loss, loss};
    return c;
  };
  g.curve = {point(0, 1e-7, 4.0),  point(1, 1e-7, 4.0),
             point(2, 2e-7, 3.9),  point(100, 1e-3, 3.0),
             point(300, 0.1, 2.0), point(1000, 0.5, 1.0)};
  n.curve = {point(0, 2e-7, 4.0), point(100, 1e-3, 3.0), point(300, 1.0, 2.0),
             point(1000, 0.5, 1.0)};
  EXPECT_EQ(twins::drift_at(g, 2), 2e-7);
  EXPECT_TRUE(std::isnan(twins::drift_at(g, 7)));
  EXPECT_EQ(twins::final_drift(g), 0.5);
  // The paper's chaos metric counts from step 100 on (docs/protocol.md §6):
  // 100 (0 decades apart), 300 (1) and 1000 (0), mean 1/3 up to the paper's
  // 1e-12 in each drift; the verdict's tracking counts past step 100: 300
  // and 1000, max exactly 1.
  EXPECT_NEAR(twins::chaos_metric(g, n), 1.0 / 3, 1e-9);
  EXPECT_DOUBLE_EQ(twins::tracking(g, n), 1.0);
  {
    // The 1e-12 is what lets a drift of exactly 0 count: 0 against 1e-12
    // is log10(2) decades, not infinitely many.
    twins::PairResult g0 = g, n0 = n;
    g0.curve = {point(0, 0, 4.0), point(100, 0, 3.0)};
    n0.curve = {point(0, 0, 4.0), point(100, 1e-12, 3.0)};
    EXPECT_NEAR(twins::chaos_metric(g0, n0), std::log10(2.0), 1e-12);
  }
  // Copy 1's validation loss first moves at step 2 (a skipped first step).
  EXPECT_EQ(twins::first_moving_step(g), 2);
  g.status = twins::PairStatus::kDiverged;
  EXPECT_TRUE(std::isnan(twins::final_drift(g)));
  g.curve.back().qk_drift_max = std::nan("");
  EXPECT_TRUE(std::isnan(twins::largest_drift(g)));
}

// ---------------------------------------------------------------------------
// The thread pool every parallel loop uses (the engine's job slots, a
// group's models)

TEST(Threads, EveryItemRunsOnceOnAtMostTheWorkersAsked) {
  std::mutex mutex;
  std::multiset<size_t> items;
  std::set<size_t> workers;
  std::atomic<bool> one_thread{true};
  twins::run_on_threads(50, 3, [&](size_t item, size_t worker) {
    one_thread = one_thread && twins::thread_info().torch_threads == 1;
    std::lock_guard<std::mutex> lock(mutex);
    items.insert(item);
    workers.insert(worker);
  });
  ASSERT_EQ(items.size(), 50u);
  for (size_t i = 0; i < 50; ++i)
    EXPECT_EQ(items.count(i), 1u) << i;
  EXPECT_LE(*workers.rbegin(), 2u);
  EXPECT_TRUE(one_thread) << "a worker ran with more than one thread";
}

TEST(Threads, OneWorkerRunsInOrderAtTheCallersSettings) {
  twins::set_threads(2);
  std::vector<size_t> order;
  twins::run_on_threads(5, 1, [&](size_t item, size_t worker) {
    EXPECT_EQ(worker, 0u);
    EXPECT_EQ(twins::thread_info().torch_threads, 2);
    order.push_back(item);
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
  twins::set_threads(1);
}

TEST(Threads, AfterAnErrorNoNewItemStartsAndTheFirstIsRethrown) {
  std::vector<size_t> ran;
  try {
    twins::run_on_threads(10, 1, [&](size_t item, size_t) {
      ran.push_back(item);
      if (item == 3)
        throw std::runtime_error("item 3");
    });
    ADD_FAILURE() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "item 3");
  }
  EXPECT_EQ(ran, (std::vector<size_t>{0, 1, 2, 3}));
  // Several workers: the other worker's items finish, the error comes out.
  EXPECT_THROW(twins::run_on_threads(4, 2,
                                     [&](size_t item, size_t) {
                                       if (item == 0)
                                         throw std::runtime_error("first");
                                     }),
               std::runtime_error);
}

// ---------------------------------------------------------------------------
// File helpers: every error names the file

std::string error_message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(Io, WholeFileReadsAndWritesAreCheckedAndNameTheFile) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("twins-io-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string path = (dir / "sub" / "a.bin").string();
  const std::string bytes("one\0two\nthree", 13);
  twins::write_text_atomically(path, bytes);  // creates dir/sub
  EXPECT_EQ(twins::read_file(path), bytes);
  EXPECT_EQ(twins::path_stem(path), (dir / "sub" / "a").string());
  EXPECT_EQ(twins::path_stem("t3.jsonl"), "t3");

  const std::string missing = (dir / "none.jsonl").string();
  std::string e = error_message_of([&] { twins::read_file(missing, "results file"); });
  EXPECT_NE(e.find("Cannot read results file '" + missing + "'"),
            std::string::npos)
      << e;
  e = error_message_of([&] { twins::read_file(dir.string()); });  // a directory
  EXPECT_NE(e.find("Cannot read file '" + dir.string() + "'"),
            std::string::npos)
      << e;
  const int fd = ::open(path.c_str(), O_RDONLY);  // not open for writing
  ASSERT_GE(fd, 0);
  e = error_message_of([&] { twins::write_all(fd, "x", path, "results file"); });
  ::close(fd);
  EXPECT_NE(e.find("Cannot write results file '" + path + "'"),
            std::string::npos)
      << e;
  fs::remove_all(dir);
}

}  // namespace
