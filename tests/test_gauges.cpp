// The gauges of the attention people train (docs/protocol.md §2, §3): the
// value/output gauge, grouped-query attention and rotary positions. Each
// twin computes copy 1's function at step 0 (float64: to round-off), the
// unrestricted rotation under rotary positions does not, and equivariant
// rules keep every twin at round-off while Adam splits them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "data/modular.h"
#include "helpers.h"
#include "model/fused.h"
#include "report/gauges.h"
#include "report/verdict.h"
#include "sweep/plan.h"
#include "sweep/tables.h"
#include "twins/gauge.h"
#include "twins/lockstep.h"
#include "twins/merge.h"
#include "twins/metrics.h"
#include "twins/pair.h"
#include "twins/record.h"
#include "twins/result.h"
#include "twins/snapshot.h"

namespace {

using testing_helpers::expect_throw_naming;
using testing_helpers::max_abs;
using testing_helpers::tiny_spec;
using twins::TwinKind;

// The attention options: learned positions or rotary, one key/value head
// per query head or two query heads per key/value head.
struct Attention {
  const char* name;
  bool rope;
  int64_t kv_heads;  // 0: as many as heads
};
const Attention kAttentions[] = {{"plain", false, 0},
                                 {"rope", true, 0},
                                 {"kv2", false, 2},
                                 {"rope+kv2", true, 2}};

model::ModelConfig config_of(const Attention& a, bool last_only = true) {
  model::ModelConfig c = testing_helpers::tiny_mod_config();
  c.rope = a.rope;
  c.kv_heads = a.kv_heads;
  c.last_only = last_only;
  c.causal = !last_only;
  c.n_ctx = 6;
  return c;
}

torch::Tensor tokens_for(const model::ModelConfig& c) {
  torch::manual_seed(3);
  return torch::randint(0, c.vocab_in, {13, c.n_ctx});
}

// Relative logit gap between a float64 model and its twin of `kind` on
// random sequences, and how far the twin's weights moved.
struct Gap {
  double logits = 0, weights = 0;
};

Gap twin_gap(const model::ModelConfig& c, TwinKind kind) {
  auto m1 = model::build(c, 42, torch::kDouble, torch::kCPU);
  auto m2 = model::build(c, 42, torch::kDouble, torch::kCPU);
  twins::apply_twin(m2, kind, 777, 0);
  torch::NoGradGuard no_grad;
  Gap gap;
  const auto p1 = m1->parameters(), p2 = m2->parameters();
  for (size_t i = 0; i < p1.size(); ++i)
    gap.weights =
        std::max(gap.weights, (p1[i] - p2[i]).abs().max().item<double>());
  const torch::Tensor x = tokens_for(c);
  gap.logits = twins::relative_distance(m1->forward(x), m2->forward(x));
  return gap;
}

TEST(Gauges, EveryGaugeTwinComputesTheSameFunctionInFloat64) {
  for (const Attention& a : kAttentions) {
    for (bool last_only : {true, false}) {
      for (TwinKind kind :
           {TwinKind::kGauge, TwinKind::kGaugeVo, TwinKind::kGaugeAll}) {
        SCOPED_TRACE(::testing::Message()
                     << a.name << " " << twins::to_string(kind) << " last_only "
                     << last_only);
        const Gap gap = twin_gap(config_of(a, last_only), kind);
        EXPECT_GT(gap.weights, 1e-3) << "the twin was not rotated";
        EXPECT_LE(gap.logits, 1e-12);
      }
    }
  }
}

// The negative control: under rotary positions an unrestricted rotation of
// W_Q, W_K changes the function (the test can fail), and without them it is
// the gauge itself.
TEST(Gauges, TheFullRotationUnderRotaryPositionsIsNotASymmetry) {
  for (const Attention& a : kAttentions) {
    SCOPED_TRACE(a.name);
    const Gap gap = twin_gap(config_of(a), TwinKind::kGaugeFull);
    if (a.rope)
      EXPECT_GT(gap.logits, 1e-4);
    else
      EXPECT_LE(gap.logits, 1e-12);
  }
}

// The RoPE-commuting draw is a rotation of each frequency pair: it commutes
// with every position's rotation, and without rotary positions the gauge
// draw is unchanged (the paper's A_h).
TEST(Gauges, TheRotaryGaugeCommutesWithEveryPosition) {
  model::ModelConfig c = config_of(kAttentions[1]);
  const auto draw = twins::gauge_draw(c, TwinKind::kGauge, 777);
  const torch::Tensor A = draw.qk.at(0).at(0);
  const int64_t hd = c.head_dim();
  EXPECT_LE(
      (A.mm(A.t()) - torch::eye(hd, torch::kDouble)).abs().max().item<double>(),
      1e-15);
  const torch::Tensor x = torch::randn({1, 1, 9, hd}, torch::kDouble);
  for (int64_t first : {0, 5}) {
    // rotate(A x) == A rotate(x) at every position.
    const torch::Tensor ax = x.matmul(A.t());
    const torch::Tensor left = model::rotate_positions(ax, first, 10000);
    const torch::Tensor right =
        model::rotate_positions(x, first, 10000).matmul(A.t());
    EXPECT_LE((left - right).abs().max().item<double>(), 1e-14);
  }
  c.rope = false;
  const auto plain = twins::gauge_draw(c, TwinKind::kGauge, 777);
  const auto paper = twins::gauge_matrices(c.depth, c.heads, hd, 777);
  for (size_t l = 0; l < paper.size(); ++l) {
    for (size_t h = 0; h < paper[l].size(); ++h)
      EXPECT_TRUE(plain.qk[l][h].equal(paper[l][h]));
  }
}

// Rotary positions: a pair's angle grows with the position, so a query and
// a key interact through their distance only, and norms are kept.
TEST(Gauges, RotaryPositionsDependOnTheDistanceOnly) {
  torch::manual_seed(1);
  const torch::Tensor q = torch::randn({1, 1, 1, 8}, torch::kDouble);
  const torch::Tensor k = torch::randn({1, 1, 1, 8}, torch::kDouble);
  auto score = [&](int64_t s, int64_t t) {
    return (model::rotate_positions(q, s, 100) *
            model::rotate_positions(k, t, 100))
        .sum()
        .item<double>();
  };
  EXPECT_NEAR(score(2, 5), score(10, 13), 1e-13);
  EXPECT_GT(std::abs(score(2, 5) - score(2, 6)), 1e-6);
  EXPECT_NEAR(model::rotate_positions(q, 7, 100).norm().item<double>(),
              q.norm().item<double>(), 1e-14);
}

// Grouped-query attention is the full model with each key/value head
// repeated for its query heads: the same logits from the same weights.
TEST(Gauges, GroupedQueryAttentionIsTheRepeatedKeyValueModel) {
  const model::ModelConfig grouped = config_of(kAttentions[2]);
  model::ModelConfig full = grouped;
  full.kv_heads = 0;
  auto g = model::build(grouped, 42, torch::kDouble, torch::kCPU);
  auto f = model::build(full, 42, torch::kDouble, torch::kCPU);
  torch::NoGradGuard no_grad;
  const int64_t hd = grouped.head_dim(), d = grouped.d_model;
  const int64_t group = grouped.heads / grouped.kv_head_count();
  auto repeated = [&](const torch::Tensor& w) {  // (kv*hd, d) -> (H*hd, d)
    return w.view({-1, 1, hd, d}).expand({-1, group, hd, d}).reshape({-1, d});
  };
  f->tok_emb.copy_(g->tok_emb);
  f->pos_emb.copy_(g->pos_emb);
  f->norm_f->gain.copy_(g->norm_f->gain);
  f->head->weight.copy_(g->head->weight);
  for (size_t l = 0; l < g->blocks.size(); ++l) {
    auto& from = g->blocks[l];
    auto& to = f->blocks[l];
    to->attn->wq->weight.copy_(from->attn->wq->weight);
    to->attn->wk->weight.copy_(repeated(from->attn->wk->weight));
    to->attn->wv->weight.copy_(repeated(from->attn->wv->weight));
    to->attn->wo->weight.copy_(from->attn->wo->weight);
    to->w1->weight.copy_(from->w1->weight);
    to->w2->weight.copy_(from->w2->weight);
    to->norm1->gain.copy_(from->norm1->gain);
    to->norm2->gain.copy_(from->norm2->gain);
  }
  const torch::Tensor x = tokens_for(grouped);
  EXPECT_LE(twins::relative_distance(g->reference_forward(x),
                                     f->reference_forward(x)),
            1e-15);
  EXPECT_EQ(g->blocks[0]->attn->wk->weight.size(0), 2 * hd);
}

// The speed paths compute the reference function and gradients under the
// new options; the small-attention kernel and the token table step aside.
TEST(Gauges, TheSpeedPathsComputeTheReferenceUnderEveryOption) {
  for (const Attention& a : kAttentions) {
    for (bool last_only : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << a.name << " last_only " << last_only);
      const model::ModelConfig c = config_of(a, last_only);
      auto m = model::build(c, 11, torch::kDouble, torch::kCPU);
      const torch::Tensor x = tokens_for(c);
      const model::SpeedPaths cpu = model::speed_paths(c, 13, c.n_ctx, false);
      EXPECT_EQ(cpu.small_attention, !a.rope && a.kv_heads == 0);
      EXPECT_EQ(cpu.token_table, !a.rope);
      for (const model::SpeedPaths& paths :
           {cpu, model::speed_paths(c, 13, c.n_ctx, true)}) {
        auto grads = [&](const torch::Tensor& out) {
          m->zero_grad();
          torch::manual_seed(7);
          (out * torch::randn(out.sizes(), torch::kDouble)).sum().backward();
          std::vector<torch::Tensor> g;
          for (const auto& p : m->parameters())
            g.push_back(p.grad().clone());
          return std::make_pair(out.detach(), g);
        };
        const auto ref = grads(m->reference_forward(x));
        const auto fast = grads(model::fast_forward(*m, x, paths));
        EXPECT_LE((fast.first - ref.first).abs().max().item<double>(),
                  1e-12 * ref.first.abs().max().item<double>());
        for (size_t i = 0; i < ref.second.size(); ++i) {
          EXPECT_LE((fast.second[i] - ref.second[i]).abs().max().item<double>(),
                    1e-12 * ref.second[i].abs().max().item<double>())
              << "parameter " << i;
        }
      }
    }
  }
}

// docs/protocol.md §2: in float64 the identity twin stays exactly equal, and
// SGD with momentum, scalar-Adam and Muon keep the VO and the combined
// gauge twins at round-off through 20 steps while Adam splits them at step
// 1, under every attention option.
TEST(Gauges, EquivariantRulesKeepEveryGaugeAndAdamSplitsIt) {
  for (const Attention& a : kAttentions) {
    for (const char* opt : {"sgd", "scalar-adam", "muon", "adam"}) {
      SCOPED_TRACE(::testing::Message() << a.name << " " << opt);
      std::vector<twins::PairSpec> specs;
      for (TwinKind kind : {TwinKind::kIdentity, TwinKind::kGauge,
                            TwinKind::kGaugeVo, TwinKind::kGaugeAll}) {
        twins::PairSpec s = tiny_spec(opt, kind, 20, torch::kDouble);
        s.rope = a.rope;
        s.kv_heads = a.kv_heads;
        s.lr = std::string(opt) == "sgd" ? 0.05 : 1e-3;
        specs.push_back(s);
      }
      const auto results = twins::run_group(specs);
      ASSERT_EQ(results.size(), 4u);
      EXPECT_EQ(twins::largest_drift(results[0]), 0.0);
      for (size_t i = 1; i < results.size(); ++i) {
        const auto& r = results[i];
        SCOPED_TRACE(twins::to_string(r.spec.twin));
        ASSERT_TRUE(r.ok());
        double largest = 0;
        for (const auto& c : r.curve)
          largest = std::max(largest, c.logit_drift);
        if (std::string(opt) == "adam")
          EXPECT_GT(twins::drift_at(r, 1), 1e-4);
        else
          EXPECT_LE(largest, 1e-12);
        // The VO drift is measured for the twins that rotate W_V, W_O: at
        // round-off at step 0 (the invariant product is unchanged).
        if (twins::acts_on_vo(r.spec.twin)) {
          EXPECT_LE(r.curve.front().vo_drift_max, 1e-13);
          EXPECT_EQ(r.vo_per_head.size(), 2u * 4u);
        } else {
          EXPECT_TRUE(std::isnan(r.curve.front().vo_drift_max));
        }
      }
    }
  }
}

// A record of the new options reads back to its key; the paper's records
// gain no field.
TEST(Gauges, RecordsKeepTheOptionsAndThePapersKeepTheirFields) {
  twins::PairSpec s = tiny_spec("sgd", TwinKind::kGaugeFull, 2, torch::kDouble);
  s.rope = true;
  s.rope_base = 500;
  s.kv_heads = 2;
  const auto results = twins::run_group({s});
  const nlohmann::json j = twins::to_json(results[0]);
  EXPECT_EQ(j["model"]["kv_heads"], 2);
  EXPECT_EQ(j["model"]["rope_base"], 500.0);
  EXPECT_EQ(j["twin_is_symmetry"], false);
  EXPECT_GT(results[0].curve.front().logit_drift, 1e-4);
  const twins::PairResult back = twins::from_json(j);
  EXPECT_EQ(back.spec.key(), s.key());
  EXPECT_NE(s.key().find("|kv=2|rope=500"), std::string::npos);

  const twins::PairSpec paper =
      tiny_spec("sgd", TwinKind::kGauge, 2, torch::kFloat);
  const nlohmann::json p = twins::to_json(twins::run_group({paper})[0]);
  EXPECT_FALSE(p["model"].contains("kv_heads"));
  EXPECT_FALSE(p["model"].contains("rope_base"));
  EXPECT_FALSE(p.contains("twin_is_symmetry"));
  EXPECT_FALSE(p["curve"][0].contains("vo_drift_mean"));
}

// Bad input: one line naming the value.
TEST(Gauges, ImpossibleOptionsAreRefusedNamingTheValue) {
  sweep::PlanRequest r;
  r.task = "mod11";
  r.opts = {"sgd"};
  r.kv_heads = 3;
  expect_throw_naming([&] { sweep::expand(r); }, "--kv-heads: 3");
  r.kv_heads = 0;
  r.twins = {"gauge-full"};
  expect_throw_naming([&] { sweep::expand(r); }, "gauge-full");
  r.twins = {"gauge"};
  r.rope_base = 50;
  expect_throw_naming([&] { sweep::expand(r); }, "--rope-base 50");
  r.rope = true;
  r.heads = 8;
  r.d_model = 24;  // head dim 3: no pairs to rotate
  expect_throw_naming([&] { sweep::expand(r); }, "odd");
  r.heads = 4;
  r.d_model = 16;
  r.twins = {"identity"};
  expect_throw_naming([&] { sweep::verdict_specs(r); }, "identity");
}

// The verdict judges each gauge twin against the shared identity and noise
// twins: one verdict per symmetry, predicted per symmetry.
TEST(Gauges, TheVerdictReportsEachSymmetryItTested) {
  sweep::PlanRequest r;
  r.task = "mod11";
  r.steps = 10;
  r.depth = 2;
  r.d_model = 16;
  r.heads = 4;
  r.rope = true;
  r.kv_heads = 2;
  r.opts = {"scion-col"};
  r.twins = {"gauge", "gauge-vo"};
  const auto specs = sweep::verdict_specs(r);
  ASSERT_EQ(specs.size(), 6u);  // two gauges, identity, noise 1e-7, 1e-5, round trip
  const auto verdicts = report::judge_all(twins::run_group(specs));
  ASSERT_EQ(verdicts.size(), 2u);
  EXPECT_EQ(verdicts[0].gauge, TwinKind::kGauge);
  EXPECT_EQ(verdicts[1].gauge, TwinKind::kGaugeVo);
  EXPECT_EQ(report::verdict_name(verdicts[1]), "scion-col gauge-vo");
  // Column norms: kept by a left rotation (QK), not by W_O's right one.
  EXPECT_EQ(report::predicted_for("scion-col", TwinKind::kGauge),
            optim::Equivariance::kEquivariant);
  EXPECT_EQ(report::predicted_for("scion-col", TwinKind::kGaugeVo),
            optim::Equivariance::kBasisDependent);
  EXPECT_EQ(verdicts[0].verdict, report::VerdictClass::kEquivariant);
  EXPECT_EQ(verdicts[1].verdict, report::VerdictClass::kBasisDependent);
  EXPECT_FALSE(report::predicted_for("torch:Adam", TwinKind::kGaugeVo));
}

// ---------------------------------------------------------------------------
// Head merging under the gauges (docs/protocol.md §9)

// Block-diagonal: pair (2i, 2i+1) turned by angle[i].
torch::Tensor pair_rotation(const std::vector<double>& angle) {
  const int64_t n = 2 * static_cast<int64_t>(angle.size());
  torch::Tensor r = torch::zeros({n, n}, torch::kDouble);
  for (size_t i = 0; i < angle.size(); ++i) {
    const int64_t k = 2 * static_cast<int64_t>(i);
    r[k][k] = std::cos(angle[i]);
    r[k][k + 1] = -std::sin(angle[i]);
    r[k + 1][k] = std::sin(angle[i]);
    r[k + 1][k + 1] = std::cos(angle[i]);
  }
  return r;
}


TEST(GaugeMerge, PairProcrustesIsTheBestRotationOfEachPair) {
  // Recovers a rotation of the subgroup exactly.
  const torch::Tensor Q = pair_rotation({0.3, 2.5, -1.2, 3.1});
  torch::manual_seed(5);
  const torch::Tensor Y = torch::randn({8, 24}, torch::kDouble);
  EXPECT_LE(max_abs(twins::pair_procrustes(Q.mm(Y).mm(Y.t())) - Q), 1e-12);
  // For any M no rotation of the subgroup does better, and the fit is in it.
  const torch::Tensor M = torch::randn({8, 8}, torch::kDouble);
  const torch::Tensor R = twins::pair_procrustes(M);
  const double best = R.t().mm(M).trace().item<double>();
  for (int k = 0; k < 200; ++k) {
    const torch::Tensor a = torch::rand({4}, torch::kDouble) * (2 * M_PI);
    const torch::Tensor S = pair_rotation(
        std::vector<double>(a.data_ptr<double>(), a.data_ptr<double>() + 4));
    EXPECT_LE(S.t().mm(M).trace().item<double>(), best + 1e-12);
  }
  EXPECT_LE(max_abs(R.t().mm(R) - torch::eye(8, torch::kDouble)), 1e-14);
  const torch::Tensor off_pairs =
      torch::kron(torch::eye(4, torch::kDouble),
                  torch::ones({2, 2}, torch::kDouble)) == 0;
  EXPECT_EQ(R.masked_select(off_pairs).abs().max().item<double>(), 0.0);
  for (int64_t i = 0; i < 8; i += 2)
    EXPECT_EQ(R[i][i].item<double>(), R[i + 1][i + 1].item<double>());
  // Nothing to align: I exactly.
  const torch::Tensor I = torch::eye(8, torch::kDouble);
  EXPECT_TRUE(torch::equal(twins::pair_procrustes(torch::zeros({8, 8})), I));
  EXPECT_TRUE(torch::equal(twins::pair_procrustes(Y.mm(Y.t())), I));
  EXPECT_THROW(twins::pair_procrustes(torch::zeros({3, 3})), c10::Error);
  torch::Tensor bad = I.clone();
  bad[0][1] = std::nan("");
  EXPECT_THROW(twins::pair_procrustes(bad), c10::Error);
}

// The mod-11 model of `a` in float64, a copy 2 of `kind` made as a pair
// makes it, and what a merge of that pair aligns (twin_gauge of its spec:
// it must draw what made copy 2).
struct UntrainedTwin {
  model::ModelConfig config;
  data::ModularAddition task{11, 42, torch::kCPU};
  model::Transformer m1{nullptr}, m2{nullptr};
  twins::MergeGauge gauge;

  UntrainedTwin(const Attention& a, TwinKind kind) {
    twins::PairSpec spec = tiny_spec("sgd", kind, 1, torch::kDouble);
    spec.rope = a.rope;
    spec.kv_heads = a.kv_heads;
    config = testing_helpers::tiny_mod_config();
    config.rope = a.rope;
    config.kv_heads = a.kv_heads;
    m1 = model::build(config, 42, torch::kDouble, torch::kCPU);
    m2 = model::build(config, 42, torch::kDouble, torch::kCPU);
    twins::apply_twin(m2, kind, spec.twin_seed, 0,
                      twins::draw_dtype(spec.protocol));
    gauge = twins::twin_gauge(spec);
  }
  // A copy of copy 2 with the fitted rotations applied.
  model::Transformer aligned(const twins::Alignment& qk,
                             const twins::Alignment* vo) const {
    auto m = model::build(config, 0, torch::kDouble, torch::kCPU);
    model::copy_parameters(m2, m);
    if (vo != nullptr)
      twins::apply_value_alignment(m, vo->rotation);
    twins::apply_alignment(m, qk.rotation);
    return m;
  }
};

// Every gauge twin, under every attention option, aligns back onto copy 1:
// one rotation per key/value head recovers the twin's own (A^T, B^T), the
// aligned copy 2 is copy 1 to round-off and its path has no barrier.
TEST(GaugeMerge, AnUntrainedTwinAlignsBackToCopy1UnderEveryOption) {
  for (const Attention& a : kAttentions) {
    for (TwinKind kind :
         {TwinKind::kGauge, TwinKind::kGaugeVo, TwinKind::kGaugeAll}) {
      SCOPED_TRACE(::testing::Message() << a.name << " " << to_string(kind));
      UntrainedTwin t(a, kind);
      const twins::MergePoint p =
          twins::measure_merge(t.m1, t.m2, t.task, 0, t.gauge);
      const int64_t kv = t.config.kv_head_count();
      ASSERT_EQ(p.alignment.residual.size(), size_t(2 * kv));
      EXPECT_LE(p.alignment.residual_max, 1e-13);
      if (twins::acts_on_qk(kind)) {
        EXPECT_LE(p.alignment.rotation_error_max, 1e-13);
        EXPECT_GT(p.alignment.unaligned_residual_mean, 0.5);
      }
      ASSERT_EQ(p.values.has_value(), twins::acts_on_vo(kind));
      if (p.values) {
        EXPECT_EQ(p.values->residual.size(), size_t(2 * kv));
        EXPECT_LE(p.values->residual_max, 1e-13);
        EXPECT_LE(p.values->rotation_error_max, 1e-13);
        EXPECT_GT(p.values->unaligned_residual_mean, 0.5);
        EXPECT_LE(p.vo_drift_max, 1e-13);
      }
      EXPECT_EQ(p.unrestricted.has_value(), a.rope);
      // The aligned path stays on copy 1's function; the naive midpoint
      // (the average of W and its rotation) leaves it. The untrained mod-11
      // model's loss is nearly flat along it: no barrier either way.
      EXPECT_LE(p.aligned.barrier, 1e-13);
      EXPECT_LE(std::abs(p.aligned.loss[5] - p.aligned.loss[0]), 1e-13);
      EXPECT_GT(std::abs(p.naive.loss[5] - p.naive.loss[0]), 1e-9);
      const auto aligned =
          t.aligned(p.alignment, p.values ? &*p.values : nullptr);
      const auto p1 = t.m1->named_parameters();
      for (const auto& item : aligned->named_parameters()) {
        EXPECT_LE(max_abs(item.value() - p1[item.key()]), 1e-13) << item.key();
      }
    }
  }
}

// Under rotary positions only the pair rotations are a symmetry: the fit
// restricted to them never changes copy 2's function; the unrestricted fit
// does, and only it can undo gauge-full (which is not a symmetry).
TEST(GaugeMerge, UnderRotaryPositionsOnlyTheCommutingFitKeepsTheFunction) {
  for (int64_t kv : {int64_t(0), int64_t(2)}) {
    UntrainedTwin t({"rope", true, kv}, TwinKind::kGaugeFull);
    const twins::MergePoint p =
        twins::measure_merge(t.m1, t.m2, t.task, 0, t.gauge);
    ASSERT_TRUE(p.unrestricted.has_value());
    EXPECT_GT(p.alignment.rotation_error_mean, 0.5);
    EXPECT_GT(p.alignment.residual_mean, 0.1);
    EXPECT_LE(p.unrestricted->alignment.rotation_error_max, 1e-13);
    EXPECT_LE(p.unrestricted->alignment.residual_max, 1e-13);
    // The unrestricted path ends at copy 1 itself: no barrier.
    EXPECT_LE(p.unrestricted->path.barrier, 1e-13);
    const torch::Tensor x = tokens_for(t.config);
    torch::NoGradGuard no_grad;
    const torch::Tensor y2 = t.m2->forward(x);
    const double restricted = twins::relative_distance(
        y2, t.aligned(p.alignment, nullptr)->forward(x));
    const double unrestricted = twins::relative_distance(
        y2, t.aligned(p.unrestricted->alignment, nullptr)->forward(x));
    EXPECT_LE(restricted, 1e-13) << "kv " << kv;
    EXPECT_GT(unrestricted, 1e-3) << "kv " << kv;
    // twin_gauge drew the unrestricted rotation: entries across pairs.
    const torch::Tensor& A = t.gauge.twin.qk[0][0];
    EXPECT_GT(A.index({0, 2}).abs().item<double>(), 0.0);
    EXPECT_FALSE(t.gauge.values);
  }
}

// Trained float64 pairs (20 steps) merged inside a group with LLaMA-style
// attention (rotary positions, 2 key/value heads): SGD's twins align back
// at round-off on both sides; Adam's keep a residual on each.
TEST(GaugeMerge, TrainedTwinsMergeOnlyForAnEquivariantRule) {
  for (const char* opt : {"sgd", "adam"}) {
    SCOPED_TRACE(opt);
    std::vector<twins::PairSpec> specs;
    for (TwinKind kind : {TwinKind::kGaugeVo, TwinKind::kGaugeAll}) {
      twins::PairSpec s = tiny_spec(opt, kind, 20, torch::kDouble);
      s.rope = true;
      s.kv_heads = 2;
      s.lr = std::string(opt) == "sgd" ? 0.05 : 1e-3;
      s.merge_at = {20};
      specs.push_back(s);
    }
    const auto results = twins::run_group(specs);
    for (const auto& r : results) {
      SCOPED_TRACE(to_string(r.spec.twin));
      ASSERT_EQ(r.merges.size(), 1u);
      const twins::MergePoint& p = r.merges[0];
      ASSERT_TRUE(p.values.has_value());
      ASSERT_TRUE(p.unrestricted.has_value());
      if (std::string(opt) == "sgd") {
        EXPECT_LE(p.values->residual_max, 1e-12);
        EXPECT_LE(p.values->rotation_error_max, 1e-10);
        EXPECT_LE(p.alignment.residual_max, 1e-12);
        EXPECT_LE(p.aligned.barrier, 1e-12);
      } else {
        EXPECT_GT(p.values->residual_mean, 1e-4);
        EXPECT_GT(p.vo_drift_mean, 1e-4);
      }
      if (r.spec.twin == TwinKind::kGaugeAll && std::string(opt) == "sgd")
        EXPECT_LE(p.alignment.rotation_error_max, 1e-10);
      // The record reads back to itself, the new parts included.
      const nlohmann::json j = twins::to_json(p);
      EXPECT_TRUE(j.contains("vo"));
      EXPECT_TRUE(j.contains("unrestricted"));
      EXPECT_EQ(twins::to_json(twins::merge_point_from_json(
                                   nlohmann::json::parse(j.dump())))
                    .dump(),
                j.dump());
    }
  }
  // The paper's attention and QK twin: the merge record gains no field.
  twins::PairSpec paper = tiny_spec("sgd", TwinKind::kGauge, 2, torch::kFloat);
  paper.merge_at = {2};
  const nlohmann::json j =
      twins::to_json(twins::run_group({paper})[0].merges[0]);
  EXPECT_FALSE(j.contains("vo"));
  EXPECT_FALSE(j.contains("unrestricted"));
  EXPECT_FALSE(j.contains("vo_drift_mean"));
}

// A saved VO pair measured by `merge --models`: the same merge as the live
// pair's, and a record whose VO fields are filled like a trained pair's.
TEST(GaugeMerge, ASavedValueOutputPairIsMeasuredLikeTheLiveOne) {
  twins::PairSpec s = tiny_spec("sgd", TwinKind::kGaugeAll, 3, torch::kDouble);
  s.rope = true;
  s.kv_heads = 2;
  s.lr = 0.05;
  twins::Lockstep pair({s});
  pair.train_to(3);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("twins-test-gauge-merge-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  twins::save_pair(dir.string(), s, 3, pair.reference(), pair.twin(0));
  twins::SavedPair saved = twins::load_pair(dir.string());
  const twins::PairResult r = twins::measure_saved(saved);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.merges.size(), 1u);
  EXPECT_EQ(
      twins::to_json(r.merges[0]).dump(),
      twins::to_json(twins::measure_merge(pair.reference(), pair.twin(0),
                                          pair.task(), 3, twins::twin_gauge(s)))
          .dump());
  EXPECT_EQ(r.vo_per_head.size(), 2u * 4u);
  EXPECT_LE(r.curve[0].vo_drift_max, 1e-13);
  const nlohmann::json j = twins::to_json(r);
  EXPECT_EQ(j["vo_drift_per_head"].size(), 8u);
  EXPECT_TRUE(j["curve"][0]["vo_drift_mean"].is_number());
}

}  // namespace
