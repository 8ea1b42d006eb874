// The gauges of the attention people train (docs/protocol.md §2, §3): the
// value/output gauge, grouped-query attention and rotary positions. Each
// twin computes copy 1's function at step 0 (float64: to round-off), the
// unrestricted rotation under rotary positions does not, and equivariant
// rules keep every twin at round-off while Adam splits them.
#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "model/fused.h"
#include "report/gauges.h"
#include "report/verdict.h"
#include "sweep/plan.h"
#include "sweep/tables.h"
#include "twins/gauge.h"
#include "twins/metrics.h"
#include "twins/pair.h"
#include "twins/record.h"
#include "twins/result.h"

namespace {

using testing_helpers::expect_throw_naming;
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
  r.merge_at = {1};
  expect_throw_naming([&] { sweep::expand(r); }, "with --rope");
  r.merge_at.clear();
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
  ASSERT_EQ(specs.size(), 5u);  // two gauges, identity, noise 1e-7 and 1e-5
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

}  // namespace
