// model/: the transformer computes the same function under the head gauge,
// builds deterministically from a seed, and exposes the right blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "helpers.h"
#include "model/fused.h"
#include "model/gemm.h"
#include "model/lanes.h"
#include "model/loss.h"
#include "model/small_attention.h"
#include "twins/gauge.h"
#include "twins/metrics.h"

namespace {

using testing_helpers::tiny_mod_config;

// How far the gauge twin's W_Q moved from copy 1's (largest entry change
// over the layers): a twin that apply_twin left untouched computes the same
// function trivially, so every gauge-invariance test checks this first.
double query_change(const model::Transformer& m1, const model::Transformer& m2) {
  double change = 0;
  for (size_t l = 0; l < m1->blocks.size(); ++l) {
    const auto& w1 = m1->blocks[l]->attn->wq->weight;
    const auto& w2 = m2->blocks[l]->attn->wq->weight;
    change = std::max(change, (w1 - w2).abs().max().item<double>());
  }
  return change;
}

// Relative logit difference between a model and its gauge-rotated copy on
// every mod-47 input, at initialisation.
double gauge_logit_gap(torch::Dtype dtype) {
  data::ModularAddition task(47, 42, torch::kCPU);
  model::ModelConfig cfg;  // the mod47 defaults: 2L d64 4 heads mlp 256
  auto m1 = model::build(cfg, 42, dtype, torch::kCPU);
  auto m2 = model::build(cfg, 42, dtype, torch::kCPU);
  twins::apply_twin(m2, twins::TwinKind::kGauge, 777, 0);
  // A random rotation of a 16-dimensional head moves W_Q by about the size
  // of its entries (order 1 / sqrt(d)), far above rounding.
  EXPECT_GT(query_change(m1, m2), 1e-3) << "apply_twin left W_Q unrotated";
  torch::NoGradGuard no_grad;
  const auto& x = task.validation().x;
  return twins::relative_distance(m1->forward(x), m2->forward(x));
}

TEST(Model, GaugeLeavesFunctionUnchangedAtInitFloat64) {
  const double gap = gauge_logit_gap(torch::kDouble);
  EXPECT_LE(gap, 1e-12);
  EXPECT_GT(gap, 0.0);  // the rotation did change the weights' bits
}

TEST(Model, GaugeLeavesFunctionUnchangedAtInitFloat32) {
  EXPECT_LE(gauge_logit_gap(torch::kFloat), 1e-5);
}

TEST(Model, GaugeChangesTheWeightsItRotates) {
  auto cfg = tiny_mod_config();
  auto m1 = model::build(cfg, 1, torch::kDouble, torch::kCPU);
  auto m2 = model::build(cfg, 1, torch::kDouble, torch::kCPU);
  twins::apply_twin(m2, twins::TwinKind::kGauge, 777, 0);
  for (int64_t l = 0; l < cfg.depth; ++l) {
    for (int64_t h = 0; h < cfg.heads; ++h) {
      EXPECT_GT((m1->query_block(l, h) - m2->query_block(l, h))
                    .abs()
                    .max()
                    .item<double>(),
                1e-3);
      // ...but the head's product W_Q,h^T W_K,h is the same.
      auto p1 = m1->query_block(l, h).t().mm(m1->key_block(l, h));
      auto p2 = m2->query_block(l, h).t().mm(m2->key_block(l, h));
      EXPECT_LE((p1 - p2).abs().max().item<double>(), 1e-13);
    }
    // W_V, W_O and the MLP are untouched.
    EXPECT_TRUE(torch::equal(m1->blocks[l]->attn->wv->weight,
                             m2->blocks[l]->attn->wv->weight));
    EXPECT_TRUE(
        torch::equal(m1->blocks[l]->w1->weight, m2->blocks[l]->w1->weight));
  }
}

TEST(Model, SameSeedSameWeightsOtherSeedOtherWeights) {
  auto cfg = tiny_mod_config();
  auto a = model::build(cfg, 5, torch::kFloat, torch::kCPU);
  auto b = model::build(cfg, 5, torch::kFloat, torch::kCPU);
  auto c = model::build(cfg, 6, torch::kFloat, torch::kCPU);
  auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::equal(pa[i], pb[i]));
  EXPECT_FALSE(torch::equal(a->tok_emb, c->tok_emb));
}

TEST(Model, InitialisationFollowsProtocolDistributions) {
  model::ModelConfig cfg;
  cfg.d_model = 256;
  cfg.heads = 8;
  cfg.mlp = 1024;
  auto m = model::build(cfg, 0, torch::kDouble, torch::kCPU);
  // N(0,1) embedding, N(0,1)*0.02 positional, U(+-1/sqrt(fan_in)) linears,
  // unit gains.
  EXPECT_NEAR(m->tok_emb.std().item<double>(), 1.0, 0.05);
  EXPECT_NEAR(m->pos_emb.std().item<double>(), 0.02, 0.003);
  const auto& w1 = m->blocks[0]->w1->weight;  // fan_in 256
  EXPECT_LE(w1.abs().max().item<double>(), 1.0 / 16.0);
  EXPECT_GT(w1.abs().max().item<double>(), 0.99 / 16.0);
  const auto& w2 = m->blocks[0]->w2->weight;  // fan_in 1024
  EXPECT_LE(w2.abs().max().item<double>(), 1.0 / 32.0);
  EXPECT_TRUE(
      torch::equal(m->norm_f->gain, torch::ones({256}, torch::kDouble)));
  EXPECT_EQ(m->parameters().size(),
            m->matrix_parameters().size() + m->other_parameters().size());
  EXPECT_EQ(m->matrix_parameters().size(), 6u * cfg.depth);
}

TEST(Model, LastPositionShortcutEqualsFullForward) {
  // The mod model computes only the last query in its last block; the
  // causal/all-position path must give the same last-position logits.
  auto cfg = tiny_mod_config();
  auto m = model::build(cfg, 3, torch::kDouble, torch::kCPU);
  auto full_cfg = cfg;
  full_cfg.last_only = false;
  auto full = model::build(full_cfg, 3, torch::kDouble, torch::kCPU);
  torch::NoGradGuard no_grad;
  data::ModularAddition task(11, 42, torch::kCPU);
  const auto& x = task.validation().x;
  auto a = m->forward(x);                  // (B, V)
  auto b = full->forward(x).select(1, 2);  // (B, T, V) -> last position
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-12);
}

// A small model of either kind: mod-p-like (last position only, all
// positions seen) or LM-like (every position, causal), with a 5-token
// vocabulary so that a batch of 9 sequences takes the token table.
model::Transformer path_model(bool last_only, int64_t T) {
  model::ModelConfig config;
  config.vocab_in = 5;
  config.vocab_out = 7;
  config.n_ctx = T;
  config.depth = 2;
  config.d_model = 16;
  config.heads = 4;
  config.mlp = 32;
  config.last_only = last_only;
  config.causal = !last_only;
  return model::build(config, 11, torch::kDouble, torch::kCPU);
}

// docs/protocol.md §3 written out with plain matrix products, no shortcut: the
// embedding looked up per position, every head's softmax(Q K^T / sqrt(hd))
// V by matmul, every position through every block.
torch::Tensor protocol_forward(model::Transformer& m,
                               const torch::Tensor& tokens) {
  const auto& cfg = m->config();
  const int64_t B = tokens.size(0), T = tokens.size(1), d = cfg.d_model;
  const int64_t nh = cfg.heads, hd = d / nh;
  auto norm = [&](const torch::Tensor& x, const torch::Tensor& g) {
    return x / x.norm(2, {-1}, true) * std::sqrt(double(d)) * g;
  };
  auto heads = [&](const torch::Tensor& t) {
    return t.view({B, T, nh, hd}).transpose(1, 2);
  };
  torch::Tensor x =
      m->tok_emb.index_select(0, tokens.reshape({-1})).view({B, T, d}) +
      m->pos_emb.narrow(1, 0, T);
  for (auto& b : m->blocks) {
    const torch::Tensor n = norm(x, b->norm1->gain);
    const torch::Tensor q = heads(n.matmul(b->attn->wq->weight.t()));
    const torch::Tensor k = heads(n.matmul(b->attn->wk->weight.t()));
    const torch::Tensor v = heads(n.matmul(b->attn->wv->weight.t()));
    torch::Tensor s = q.matmul(k.transpose(-2, -1)) / std::sqrt(double(hd));
    if (cfg.causal) {
      s = s.masked_fill(torch::ones({T, T}, torch::kBool).triu(1),
                        -std::numeric_limits<double>::infinity());
    }
    const torch::Tensor y =
        torch::softmax(s, -1).matmul(v).transpose(1, 2).reshape({B, T, d});
    x = x + y.matmul(b->attn->wo->weight.t());
    const torch::Tensor h = norm(x, b->norm2->gain);
    x = x + torch::silu(h.matmul(b->w1->weight.t())).matmul(b->w2->weight.t());
  }
  x = norm(x, m->norm_f->gain).matmul(m->head->weight.t());
  return cfg.last_only ? x.select(1, T - 1) : x;
}

// The model's reference_forward, and forward with its speed paths (first-
// block token table when the batch has more sequences than the vocabulary
// has tokens, stacked Q/K/V products, the attention kernel of short
// sequences, the last-position block, the norm kernel), compute the
// function and the gradients of the protocol's formula.
TEST(Model, ForwardsComputeTheProtocolFunctionAndGradients) {
  for (bool last_only : {true, false}) {
    for (int64_t T : {3, 12}) {   // the small-attention kernel up to 8
      for (int64_t B : {4, 9}) {  // 9 > 5 tokens: the token table
        SCOPED_TRACE(::testing::Message()
                     << "last_only " << last_only << " T " << T << " B " << B);
        auto m = path_model(last_only, T);
        EXPECT_EQ(model::uses_token_table(m->config(), B, false), B > 5);
        torch::manual_seed(5);
        const torch::Tensor tokens = torch::randint(0, 5, {B, T});
        const torch::Tensor w =
            torch::randn(last_only ? std::vector<int64_t>{B, 7}
                                   : std::vector<int64_t>{B, T, 7},
                         torch::kDouble);
        auto grads = [&](const torch::Tensor& out) {
          m->zero_grad();
          (out * w).sum().backward();
          std::vector<torch::Tensor> g;
          for (const auto& p : m->parameters())
            g.push_back(p.grad().clone());
          return g;
        };
        const torch::Tensor ref = protocol_forward(m, tokens);
        const auto g_ref = grads(protocol_forward(m, tokens));
        for (bool fast : {true, false}) {
          auto run = [&] {
            return fast ? m->forward(tokens) : m->reference_forward(tokens);
          };
          EXPECT_LE((run() - ref).abs().max().item<double>(), 1e-12) << fast;
          const auto g_ours = grads(run());
          ASSERT_EQ(g_ours.size(), g_ref.size());
          for (size_t i = 0; i < g_ours.size(); ++i) {
            EXPECT_LE((g_ours[i] - g_ref[i]).abs().max().item<double>(),
                      1e-12 * (1 + g_ref[i].abs().max().item<double>()))
                << "parameter " << i << " fast " << fast;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The speed paths (model/fused.h) against the model's reference_forward.

// A forward pass's output and every parameter's gradient of a fixed
// random weighting of it.
struct Pass {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;
};

Pass run_pass(model::Transformer& m, const torch::Tensor& out) {
  torch::manual_seed(7);
  Pass pass{out.detach(), {}};
  m->zero_grad();
  (out * torch::randn(out.sizes(), torch::kDouble)).sum().backward();
  for (const auto& p : m->parameters())
    pass.grads.push_back(p.grad().clone());
  return pass;
}

// Largest difference relative to the largest entry of `reference`.
double relative_gap(const torch::Tensor& a, const torch::Tensor& reference) {
  return (a - reference).abs().max().item<double>() /
         std::max(1e-300, reference.abs().max().item<double>());
}

// A model of either kind on 9 sequences of 6 random tokens (the token table
// and the small-attention kernel both apply), and its reference pass.
struct PathSetup {
  model::Transformer m{nullptr};
  torch::Tensor tokens;
  Pass ref;
};

PathSetup path_setup(bool last_only) {
  PathSetup setup;
  setup.m = path_model(last_only, 6);
  torch::manual_seed(5);
  setup.tokens = torch::randint(0, 5, {9, 6});
  setup.ref = run_pass(setup.m, setup.m->reference_forward(setup.tokens));
  return setup;
}

struct PathCase {
  const char* name;
  model::SpeedPaths paths;
  bool same_forward_bits;  // exact arithmetic: the same output bits
  // A kernel of its own that sums in another order than the tensor ops:
  // some bit of the output or a gradient differs, so the path was taken.
  bool changes_bits;
  double tolerance;  // fused.h's, relative, output and gradients
};

std::vector<PathCase> single_paths() {
  std::vector<PathCase> cases;
  auto add = [&](const char* name, bool model::SpeedPaths::*path,
                 bool same_bits, bool changes_bits, double tolerance) {
    model::SpeedPaths paths;
    paths.*path = true;
    cases.push_back({name, paths, same_bits, changes_bits, tolerance});
  };
  using P = model::SpeedPaths;
  add("fused_norm", &P::fused_norm, false, true, 1e-13);
  add("one_hot_embedding", &P::one_hot_embedding, true, false, 1e-12);
  add("token_table", &P::token_table, false, false, 1e-12);
  add("fused_qkv", &P::fused_qkv, false, false, 1e-12);
  add("small_attention", &P::small_attention, false, true, 1e-13);
  add("last_query", &P::last_query, false, false, 1e-12);
  // Its bits may equal the BLAS's (MKL's small float64 products sum in
  // the same order): FmaChain.ForwardTakesThem... counts its products.
  if (model::best_isa() != model::Isa::kNone)
    add("fma_chain", &P::fma_chain, false, false, 1e-13);
  return cases;
}

// With no speed path the fast forward is the reference, operation for
// operation: the same bits, output and gradients.
TEST(SpeedPaths, NoneIsTheReferenceBitForBit) {
  for (bool last_only : {true, false}) {
    auto [m, tokens, ref] = path_setup(last_only);
    const Pass fast = run_pass(m, model::fast_forward(*m, tokens, {}));
    EXPECT_TRUE(fast.out.equal(ref.out)) << "last_only " << last_only;
    for (size_t i = 0; i < ref.grads.size(); ++i)
      EXPECT_TRUE(fast.grads[i].equal(ref.grads[i])) << "parameter " << i;
  }
}

// Each path alone computes the reference function and gradients: to its
// tolerance, and the one-hot embedding exactly (every gradient but the
// embedding's, which sums the same terms in another order, too).
TEST(SpeedPaths, EachAloneComputesTheReferenceFunctionAndGradients) {
  for (bool last_only : {true, false}) {
    auto [m, tokens, ref] = path_setup(last_only);
    for (const PathCase& c : single_paths()) {
      SCOPED_TRACE(::testing::Message()
                   << c.name << " last_only " << last_only);
      const Pass fast = run_pass(m, model::fast_forward(*m, tokens, c.paths));
      EXPECT_LE(relative_gap(fast.out, ref.out), c.tolerance);
      if (c.same_forward_bits)
        EXPECT_TRUE(fast.out.equal(ref.out));
      bool differs = !fast.out.equal(ref.out);
      for (size_t i = 0; i < ref.grads.size(); ++i) {
        EXPECT_LE(relative_gap(fast.grads[i], ref.grads[i]), c.tolerance)
            << "parameter " << i;
        if (c.same_forward_bits && i != 0)  // 0: the embedding
          EXPECT_TRUE(fast.grads[i].equal(ref.grads[i])) << "parameter " << i;
        differs = differs || !fast.grads[i].equal(ref.grads[i]);
      }
      if (c.changes_bits)
        EXPECT_TRUE(differs) << "the path was not taken";
    }
  }
}

// The paths forward() takes on the CPU (all but the one-hot embedding;
// small attention up to 8 positions, the table above 5 sequences) and
// those it takes on CUDA (one-hot embedding, stacked Q/K/V, last query),
// here run on the CPU, compute the reference function and gradients.
TEST(SpeedPaths, EachDevicesChoiceComputesTheReference) {
  for (bool last_only : {true, false}) {
    for (int64_t T : {3, 12}) {
      for (int64_t B : {4, 9}) {
        SCOPED_TRACE(::testing::Message()
                     << "last_only " << last_only << " T " << T << " B " << B);
        auto m = path_model(last_only, T);
        torch::manual_seed(5);
        const torch::Tensor tokens = torch::randint(0, 5, {B, T});
        const model::SpeedPaths cpu =
            model::speed_paths(m->config(), B, T, false);
        EXPECT_EQ(cpu.token_table, B > 5);
        EXPECT_EQ(cpu.small_attention, T <= 8);
        EXPECT_FALSE(cpu.one_hot_embedding);
        const model::SpeedPaths cuda =
            model::speed_paths(m->config(), B, T, true);
        EXPECT_TRUE(cuda.one_hot_embedding && cuda.fused_qkv &&
                    cuda.last_query);
        EXPECT_FALSE(cuda.fused_norm || cuda.token_table ||
                     cuda.small_attention);
        const Pass ref = run_pass(m, m->reference_forward(tokens));
        for (const Pass& fast :
             {run_pass(m, m->forward(tokens)),
              run_pass(m, model::fast_forward(*m, tokens, cuda))}) {
          EXPECT_LE(relative_gap(fast.out, ref.out), 1e-12);
          for (size_t i = 0; i < ref.grads.size(); ++i) {
            EXPECT_LE(relative_gap(fast.grads[i], ref.grads[i]), 1e-12)
                << "parameter " << i;
          }
        }
      }
    }
  }
}

// On one thread the CPU's choice reads the first block's [Q | K | V] in
// the token table (small_attention_table) with the gather's bits: output
// and every gradient equal to the same paths without it. On two threads
// the gather stays (the table's backward adds on one thread).
TEST(SpeedPaths, TheTableAttentionKeepsTheGathersBits) {
  for (bool last_only : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "last_only " << last_only);
    auto m = path_model(last_only, 3);
    torch::manual_seed(6);
    const torch::Tensor tokens = torch::randint(0, 5, {9, 3});
    const model::SpeedPaths cpu = model::speed_paths(m->config(), 9, 3, false);
    ASSERT_TRUE(cpu.token_table && cpu.small_attention && cpu.table_attention);
    model::SpeedPaths gathered = cpu;
    gathered.table_attention = false;
    struct RestoreThreads {
      int threads = at::get_num_threads();
      ~RestoreThreads() { at::set_num_threads(threads); }
    } restore;
    auto pass = [&](const model::SpeedPaths& paths, int threads,
                    int64_t& calls) {
      at::set_num_threads(threads);
      const int64_t before = model::small_attention_table_calls();
      Pass p = run_pass(m, model::fast_forward(*m, tokens, paths));
      calls = model::small_attention_table_calls() - before;
      return p;
    };
    int64_t by_table = 0, by_gather = 0, on_two = 0;
    const Pass table = pass(cpu, 1, by_table);
    const Pass gather = pass(gathered, 1, by_gather);
    pass(cpu, 2, on_two);
    EXPECT_EQ(by_table, 1);
    EXPECT_EQ(by_gather, 0);
    EXPECT_EQ(on_two, 0) << "two threads: the gather";
    EXPECT_TRUE(table.out.equal(gather.out));
    for (size_t i = 0; i < table.grads.size(); ++i)
      EXPECT_TRUE(table.grads[i].equal(gather.grads[i])) << "parameter " << i;
  }
}

// softmax(Q K^T / sqrt(hd)) V per head with plain tensor ops; query i at
// position T - Tq + i.
torch::Tensor plain_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, int64_t heads,
                              bool causal) {
  const int64_t B = k.size(0), T = k.size(1), d = k.size(2), Tq = q.size(1);
  const int64_t hd = d / heads;
  auto split = [&](const torch::Tensor& t) {
    return t.reshape({B, t.size(1), heads, hd}).transpose(1, 2);
  };
  torch::Tensor s =
      split(q).matmul(split(k).transpose(-2, -1)) / std::sqrt(double(hd));
  if (causal) {
    const auto pos = torch::arange(T - Tq, T).unsqueeze(1);  // (Tq, 1)
    s = s.masked_fill(torch::arange(T).unsqueeze(0) > pos,
                      -std::numeric_limits<double>::infinity());
  }
  return torch::softmax(s, -1).matmul(split(v)).transpose(1, 2).reshape(
      {B, Tq, d});
}

TEST(SmallAttention, MatchesPlainAttentionAndItsGradients) {
  torch::manual_seed(3);
  struct Case {
    int64_t B, Tq, T, heads, hd;
    bool causal;
  };
  // Head widths with and without a tail past the kernel's 8 lanes; causal
  // with fewer queries than keys; T up to the kernel's limit.
  for (const Case c : {Case{5, 3, 3, 4, 16, false}, Case{5, 1, 3, 4, 16, false},
                       Case{4, 4, 4, 2, 12, true}, Case{3, 2, 5, 3, 5, true},
                       Case{2, 8, 8, 1, 24, true}}) {
    SCOPED_TRACE(::testing::Message()
                 << "B " << c.B << " Tq " << c.Tq << " T " << c.T << " hd "
                 << c.hd << " causal " << c.causal);
    const int64_t d = c.heads * c.hd;
    // Q, K, V as column blocks of one wider tensor, as the model passes them.
    auto wide = torch::randn({c.B, c.T, 3 * d}, torch::kDouble);
    auto qkv = wide.split(d, -1);
    auto q = qkv[0].narrow(1, c.T - c.Tq, c.Tq).detach().requires_grad_();
    auto k = qkv[1].detach().requires_grad_();
    auto v = qkv[2].detach().requires_grad_();
    ASSERT_NE(k.stride(1), d);  // really a strided view
    const auto w = torch::randn({c.B, c.Tq, d}, torch::kDouble);
    auto grads = [&](const torch::Tensor& out) {
      (out * w).sum().backward();
      std::vector<torch::Tensor> g{q.grad().clone(), k.grad().clone(),
                                   v.grad().clone()};
      for (auto* t : {&q, &k, &v})
        t->mutable_grad().reset();
      return g;
    };
    const auto ours = model::small_attention(q, k, v, c.heads, c.causal);
    const auto ref = plain_attention(q, k, v, c.heads, c.causal);
    EXPECT_LE((ours - ref).abs().max().item<double>(), 1e-13);
    const auto g_ours = grads(ours), g_ref = grads(ref);
    for (int i = 0; i < 3; ++i) {
      EXPECT_LE((g_ours[i] - g_ref[i]).abs().max().item<double>(), 1e-13)
          << "gradient "
          << "qkv"[i];
    }
    // float32 to float32 accuracy.
    const auto f = [](const torch::Tensor& t) {
      return t.detach().to(torch::kFloat);
    };
    const auto ours32 =
        model::small_attention(f(q), f(k), f(v), c.heads, c.causal);
    EXPECT_LE((ours32.to(torch::kDouble) - ref).abs().max().item<double>(),
              1e-5);
  }
}

TEST(SmallAttention, ThreadCountDoesNotChangeABit) {
  torch::manual_seed(4);
  const auto q = torch::randn({200, 3, 64}).requires_grad_();
  const auto k = torch::randn({200, 3, 64}).requires_grad_();
  const auto v = torch::randn({200, 3, 64}).requires_grad_();
  const auto w = torch::randn({200, 3, 64});
  auto run = [&](int threads) {
    torch::set_num_threads(threads);
    auto y = model::small_attention(q, k, v, 4, true);
    (y * w).sum().backward();
    std::vector<torch::Tensor> out{y.detach(), q.grad().clone(),
                                   k.grad().clone(), v.grad().clone()};
    for (auto t : {q, k, v})
      t.mutable_grad().reset();
    return out;
  };
  const auto one = run(1), two = run(2);
  torch::set_num_threads(1);
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_TRUE(one[i].equal(two[i])) << i;
}

// The packed forms read Q, K and V where the stacked projection left them
// and give one gradient in its layout: the kernel's arithmetic, so the bits
// of small_attention on the three blocks, output and gradients.
TEST(SmallAttention, PackedFormsAreTheKernelOnTheirBlocks) {
  torch::manual_seed(5);
  for (const bool causal : {false, true}) {
    for (const bool last : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "causal " << causal << " last query " << last);
      const int64_t B = 7, T = 3, heads = 4, d = 20;  // head width 5
      const auto qkv = torch::randn({B, T, 3 * d}).requires_grad_();
      const auto q_alone = torch::randn({B, last ? 1 : T, d}).requires_grad_();
      const auto w = torch::randn({B, last ? 1 : T, d});
      auto backward = [&](const torch::Tensor& y,
                          std::vector<torch::Tensor> inputs) {
        const auto grads = torch::autograd::grad({(y * w).sum()}, inputs);
        return std::vector<torch::Tensor>(grads.begin(), grads.end());
      };
      // [Q | K | V] against the three blocks as split views.
      const auto parts = qkv.split(d, -1);
      const auto q_part = last ? parts[0].narrow(1, T - 1, 1) : parts[0];
      const auto packed =
          model::small_attention_packed(qkv, heads, causal, last);
      const auto apart =
          model::small_attention(q_part, parts[1], parts[2], heads, causal);
      EXPECT_TRUE(packed.equal(apart));
      const auto g_packed = backward(packed, {qkv})[0];
      const auto g_apart = backward(apart, {qkv})[0];
      EXPECT_TRUE(g_packed.equal(g_apart));
      if (last) {  // the earlier positions' queries have no gradient
        EXPECT_EQ(g_packed.narrow(1, 0, T - 1)
                      .narrow(2, 0, d)
                      .abs()
                      .max()
                      .item<float>(),
                  0.0f);
      }
      // Q apart, [K | V] packed.
      const auto kv = qkv.narrow(-1, d, 2 * d);
      const auto by_kv = model::small_attention_kv(q_alone, kv, heads, causal);
      const auto by_three =
          model::small_attention(q_alone, parts[1], parts[2], heads, causal);
      EXPECT_TRUE(by_kv.equal(by_three));
      const auto g_kv = backward(by_kv, {q_alone, qkv});
      const auto g_three = backward(by_three, {q_alone, qkv});
      for (size_t i = 0; i < g_kv.size(); ++i)
        EXPECT_TRUE(g_kv[i].equal(g_three[i])) << "gradient " << i;
    }
  }
  const auto t = torch::randn({2, 3, 20});
  EXPECT_THROW(
      model::small_attention_packed(t.narrow(-1, 0, 19), 2, false, false),
      c10::Error);  // not three blocks
  EXPECT_THROW(model::small_attention_kv(t.narrow(-1, 0, 10),
                                         t.narrow(-1, 0, 12), 2, false),
               c10::Error);  // K and V not of q's width
}

// lanes::dot and axpy as four-lane vectors keep the bits of the scalar
// loops they replaced (eight running sums added in a fixed order; y += a x
// element by element): every length 0 .. 20, float and double, with
// signed zeros and magnitudes that make the order show.
template <typename T>
T scalar_dot(const T* a, const T* b, int64_t n) {
  T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int l = 0; l < 8; ++l)
      acc[l] += a[c + l] * b[c + l];
  for (int l = 0; l < 8 && c < n; ++c, ++l)
    acc[l] += a[c] * b[c];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
         ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

template <typename T>
void expect_lanes_keep_the_scalar_bits(torch::Dtype dtype) {
  for (int64_t n = 0; n <= 20; ++n) {
    for (int trial = 0; trial < 20; ++trial) {
      torch::Tensor a = torch::randn({n}, dtype) *
                        torch::pow(10.0, torch::randint(-6, 7, {n}, dtype));
      torch::Tensor b = torch::randn({n}, dtype);
      if (n > 2) {
        a[0] = -0.0;
        b[1] = -0.0;
      }
      const T* pa = a.data_ptr<T>();
      const T* pb = b.data_ptr<T>();
      const T ours = model::lanes::dot(pa, pb, n);
      const T theirs = scalar_dot(pa, pb, n);
      ASSERT_EQ(std::memcmp(&ours, &theirs, sizeof(T)), 0)
          << "dot, n " << n << ": " << ours << " against " << theirs;
      torch::Tensor y = torch::randn({n}, dtype);
      torch::Tensor y_scalar = y.clone();
      const T s = static_cast<T>(0.37 + trial);
      model::lanes::axpy(s, pa, y.data_ptr<T>(), n);
      T* ys = y_scalar.data_ptr<T>();
      for (int64_t c = 0; c < n; ++c)
        ys[c] += s * pa[c];
      ASSERT_TRUE(y.equal(y_scalar)) << "axpy, n " << n;
    }
  }
}

TEST(Lanes, VectorLoopsKeepTheScalarLoopsBits) {
  torch::manual_seed(12);
  expect_lanes_keep_the_scalar_bits<float>(torch::kFloat);
  expect_lanes_keep_the_scalar_bits<double>(torch::kDouble);
}

// Attention on a table's rows is small_attention_packed on the gathered
// rows, and the table's gradient is the gathered rows' gradient added by
// gather_rows' backward: bit for bit, rows repeated and some never used.
TEST(SmallAttention, TableFormIsThePackedFormOnGatheredRows) {
  torch::manual_seed(9);
  struct Shape {
    int64_t d, heads, T;  // head widths 16, 32 and 5 (no constant), T <= 8
  };
  for (const Shape& shape : {Shape{64, 4, 3}, Shape{64, 2, 8}, Shape{20, 4, 5}})
    for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
      for (const bool causal : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "d " << shape.d << " heads " << shape.heads << " T "
                     << shape.T << " dtype " << dtype << " causal " << causal);
        const int64_t B = 40, T = shape.T, heads = shape.heads, d = shape.d,
                      R = 12;
        const auto table0 = torch::randn({R, 3 * d}, dtype);
        const auto rows = torch::randint(0, 9, {B * T});  // 9 .. 11 unused
        const auto w = torch::randn({B, T, d}, dtype);
        std::vector<torch::Tensor> ys, grads;
        for (const bool by_table : {false, true}) {
          const auto table = table0.clone().requires_grad_();
          const auto y =
              by_table
                  ? model::small_attention_table(table, rows, T, heads, causal)
                  : model::small_attention_packed(
                        model::gather_rows(table, rows).view({B, T, 3 * d}),
                        heads, causal, false);
          (y * w).sum().backward();
          ys.push_back(y.detach());
          grads.push_back(table.grad());
        }
        EXPECT_TRUE(ys[1].equal(ys[0]));
        EXPECT_TRUE(grads[1].equal(grads[0]));
        EXPECT_TRUE(grads[1].narrow(0, 9, 3).eq(0).all().item<bool>());
        EXPECT_GT(grads[1].abs().max().item<double>(), 0.0);
      }
    }
  const auto table = torch::randn({5, 12});
  const auto rows = torch::tensor({0, 1, 2, 3, 4, 0}, torch::kLong);
  EXPECT_THROW(
      model::small_attention_table(table.narrow(1, 0, 10), rows, 3, 2, false),
      c10::Error);  // not three blocks
  EXPECT_THROW(model::small_attention_table(table, rows, 4, 2, false),
               c10::Error);  // 6 rows are not sequences of 4
  EXPECT_THROW(model::small_attention_table(
                   table, torch::tensor({0, 1, 5}, torch::kLong), 3, 2, false),
               c10::Error);  // row 5 of 5
  EXPECT_THROW(
      model::small_attention_table(table, rows.to(torch::kInt), 3, 2, false),
      c10::Error);  // int32 rows
}

TEST(SmallAttention, RejectsTooManyPositions) {
  const auto t = torch::randn({2, 9, 8});
  EXPECT_THROW(model::small_attention(t, t, t, 2, false), c10::Error);
}

// Value and gradients (w.r.t. every input) of f and of its reference g
// agree to `tol` on random float64 inputs of the given shapes.
void expect_same_function(
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& f,
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& g,
    const std::vector<std::vector<int64_t>>& shapes, double tol) {
  std::vector<torch::Tensor> in;
  for (const auto& s : shapes) {
    in.push_back(torch::randn(s, torch::kDouble).requires_grad_());
  }
  const torch::Tensor a = f(in), b = g(in);
  EXPECT_LE((a - b).abs().max().item<double>(), tol);
  const auto w = torch::randn(a.sizes(), torch::kDouble);
  const auto ga = torch::autograd::grad({(a * w).sum()}, in);
  const auto gb = torch::autograd::grad({(b * w).sum()}, in);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_LE((ga[i] - gb[i]).abs().max().item<double>(),
              tol * (1 + gb[i].abs().max().item<double>()))
        << "gradient of input " << i;
  }
}

TEST(Fused, RmsNormMatchesTheTensorFormulaAndItsGradients) {
  torch::manual_seed(6);
  auto fused = [](const std::vector<torch::Tensor>& in) {
    return model::fused_rms_norm(in[0], in[1]);
  };
  auto plain = [](const std::vector<torch::Tensor>& in) {
    const double d = in[0].size(-1);
    return in[0] * std::sqrt(d) / in[0].norm(2, {-1}, true) * in[1];
  };
  expect_same_function(fused, plain, {{7, 3, 64}, {64}}, 1e-13);
  expect_same_function(fused, plain, {{5, 13}, {13}}, 1e-13);  // odd width
  EXPECT_THROW(model::fused_rms_norm(torch::randn({3, 4}), torch::ones({5})),
               c10::Error);
}

// The norm that hands its input on as a residual: its outputs are the
// norm's and x's (or x's last position), and x's gradient is, bit for bit,
// autograd's sum of the norm's and the residual's (through a slice for the
// last position), float32 and float64; a 2-D x is refused.
TEST(Fused, NormKeepIsTheNormBesideTheResidualWithTheSummedGradient) {
  torch::manual_seed(11);
  for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
    for (bool last : {false, true}) {
      const torch::Tensor x0 = torch::randn({9, 3, 64}, dtype);
      const torch::Tensor g0 = torch::rand({64}, dtype) + 0.5;
      torch::Tensor gn = torch::randn({9, 3, 64}, dtype);
      // A row whose norm gradient is -0 (gy = -0, x > 0): the sum with a
      // residual's, or with a slice's zeros, makes it +0.
      gn[0][0].fill_(-0.0);
      x0[0][0].abs_();
      const torch::Tensor gr = torch::randn({9, last ? 1 : 3, 64}, dtype);
      std::vector<torch::Tensor> runs[2];
      for (bool keep : {false, true}) {
        torch::Tensor x = x0.clone().requires_grad_(true);
        torch::Tensor gain = g0.clone().requires_grad_(true);
        torch::Tensor n, r;
        if (keep) {
          std::tie(n, r) = model::fused_rms_norm_keep(x, gain, last);
        } else {
          n = model::fused_rms_norm(x, gain);
          r = last ? x.narrow(1, 2, 1) : x;
        }
        torch::autograd::backward({n, r}, {gn, gr});
        runs[keep] = {n.detach(), r.detach(), x.grad(), gain.grad()};
      }
      for (size_t i = 0; i < runs[0].size(); ++i) {
        EXPECT_TRUE(runs[1][i].equal(runs[0][i]) &&
                    runs[1][i].signbit().equal(runs[0][i].signbit()))
            << dtype << " last " << last << " output " << i;
      }
    }
  }
  EXPECT_THROW(
      model::fused_rms_norm_keep(torch::ones({4, 8}), torch::ones({8}), false),
      c10::Error);
}

// The token table's gathers: index_select's rows and, with rows repeated
// and some never gathered, index_select's gradient bit for bit (each
// table row's gradient the gathered rows' sum in index order from zero).
TEST(Fused, GatherRowsIsIndexSelectWithItsGradient) {
  torch::manual_seed(8);
  for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
    const torch::Tensor table0 = torch::randn({12, 19}, dtype);
    const torch::Tensor rows = torch::randint(0, 9, {200});  // 9 .. 11 unused
    const torch::Tensor gy = torch::randn({200, 19}, dtype) * 1e3;
    std::vector<torch::Tensor> outs, grads;
    for (bool ours : {false, true}) {
      torch::Tensor table = table0.clone().requires_grad_(true);
      const torch::Tensor y =
          ours ? model::gather_rows(table, rows) : table.index_select(0, rows);
      y.backward(gy);
      outs.push_back(y.detach());
      grads.push_back(table.grad());
    }
    EXPECT_TRUE(outs[1].equal(outs[0])) << dtype;
    EXPECT_TRUE(grads[1].equal(grads[0])) << dtype;
    EXPECT_TRUE(grads[1].narrow(0, 9, 3).eq(0).all().item<bool>());
  }
  EXPECT_THROW(model::gather_rows(torch::ones({3, 2}), torch::ones({4})),
               c10::Error);  // float rows
  EXPECT_THROW(model::gather_rows(torch::ones({3, 2}),
                                  torch::tensor({0, 3}, torch::kLong)),
               c10::Error);  // row 3 of 3
}

TEST(Model, RejectsImpossibleShapes) {
  auto cfg = tiny_mod_config();
  cfg.d_model = 30;
  cfg.heads = 4;
  try {
    model::Transformer m(cfg);
    FAIL() << "d_model 30 with 4 heads was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("30"), std::string::npos);
  }
}

TEST(Model, CrossEntropyMatchesLibTorch) {
  torch::manual_seed(0);
  auto logits = torch::randn({7, 5}, torch::kDouble);
  auto y = torch::randint(0, 5, {7}, torch::kLong);
  auto ours = model::cross_entropy(logits, y).item<double>();
  auto ref = torch::nn::functional::cross_entropy(logits, y).item<double>();
  EXPECT_NEAR(ours, ref, 1e-14);
}

}  // namespace

// ---------------------------------------------------------------------------
// The FMA-chain kernels (model/gemm.h).

namespace {

// Every instruction set this CPU runs the kernels with.
std::vector<model::Isa> runnable_isas() {
  std::vector<model::Isa> isas;
  for (model::Isa isa : {model::Isa::kAvx2, model::Isa::kAvx512})
    if (isa <= model::best_isa())
      isas.push_back(isa);
  return isas;
}

// C = A B with each entry one std::fma chain over p in order, from 0.
template <typename T>
torch::Tensor fma_chain_oracle(const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  torch::Tensor c = torch::empty({m, n}, a.options());
  auto A = a.accessor<T, 2>();
  auto B = b.accessor<T, 2>();
  auto C = c.accessor<T, 2>();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      T s = 0;
      for (int64_t p = 0; p < k; ++p)
        s = std::fma(A[i][p], B[p][j], s);
      C[i][j] = s;
    }
  }
  return c;
}

}  // namespace

// The contract that makes the kernels' bits independent of the machine:
// each entry is exactly one chain of fused multiply-adds in index order,
// bit for bit the scalar std::fma loop, with every instruction set, for
// shapes that cut every tile edge (rows not a multiple of 6, columns not a
// multiple of the vector width), for a k walked in blocks (300: two of 128
// and one of 44, the tile stored and loaded between them) and for A read
// in place transposed (where C has at least twice as many columns as rows,
// computed as C^T = B^T A^T and transposed: m 5, 6, 13 against n 16..100).
TEST(FmaChain, EachEntryIsOneFusedChainInIndexOrderOnEveryInstructionSet) {
  if (runnable_isas().empty())
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  torch::manual_seed(3);
  for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
    for (int64_t m : {1, 5, 6, 13}) {
      for (int64_t n : {1, 7, 16, 17, 47, 64, 65, 100}) {
        for (int64_t k : {0, 1, 9, 64, 131, 300}) {
          const torch::Tensor a = torch::randn({m, k}, dtype);
          const torch::Tensor at = torch::randn({k, m}, dtype).t();
          const torch::Tensor b = torch::randn({k, n}, dtype);
          for (const torch::Tensor& lhs : {a, at}) {
            const torch::Tensor want = dtype == torch::kFloat
                                           ? fma_chain_oracle<float>(lhs, b)
                                           : fma_chain_oracle<double>(lhs, b);
            for (model::Isa isa : runnable_isas()) {
              EXPECT_TRUE(model::chain_mm(lhs, b, isa).equal(want))
                  << model::isa_name(isa) << " " << dtype << " m " << m << " n "
                  << n << " k " << k << " contiguous " << lhs.is_contiguous();
            }
          }
        }
      }
    }
  }
}

// The kernels' clock (the bench's figure of the products inside a step)
// counts each kernel call and its 2 m n k FLOPs while it runs, and nothing
// before it starts or after it stops: one product, then the MLP on one
// thread in blocks of 128 rows (300 rows: three blocks, two calls each in
// the forward and four in the backward, 6 N d f multiply-adds in all).
TEST(FmaChain, TheKernelClockCountsEachCallAndItsFlops) {
  if (runnable_isas().empty())
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  torch::manual_seed(6);
  const torch::Tensor a = torch::randn({13, 40}), b = torch::randn({40, 17});
  model::chain_mm(a, b);  // before the clock: not counted
  model::start_kernel_clock();
  model::chain_mm(a, b);
  model::KernelClock clock = model::stop_kernel_clock();
  model::chain_mm(a, b);  // after it: not counted
  EXPECT_EQ(clock.calls, 1);
  EXPECT_EQ(clock.flops, 2.0 * 13 * 40 * 17);
  EXPECT_GT(clock.seconds, 0);
  model::start_kernel_clock();  // starting zeroes the totals
  clock = model::stop_kernel_clock();
  EXPECT_EQ(clock.calls, 0);
  EXPECT_EQ(clock.flops, 0);

  const int64_t N = 300, d = 16, f = 64;
  const torch::Tensor x = torch::randn({N, d}, torch::requires_grad());
  const torch::Tensor w1 = torch::randn({f, d}, torch::requires_grad());
  const torch::Tensor w2 = torch::randn({d, f}, torch::requires_grad());
  const torch::Tensor residual = torch::randn({N, d});
  struct OneThread {  // the MLP in rows takes one intra-op thread
    int threads = at::get_num_threads();
    OneThread() { at::set_num_threads(1); }
    ~OneThread() { at::set_num_threads(threads); }
  } one;
  model::start_kernel_clock();
  model::chain_mlp(x, w1, w2, residual).sum().backward();
  clock = model::stop_kernel_clock();
  EXPECT_EQ(clock.calls, 3 * (2 + 4));
  EXPECT_EQ(clock.flops, 2.0 * 6 * N * d * f);
}

// Rows split among threads change nothing: the mod47 MLP's product at one
// and at two intra-op threads, and its weight gradient (a chain over 2649
// rows), give the same bits.
TEST(FmaChain, TheBitsDoNotDependOnTheThreadCount) {
  if (runnable_isas().empty())
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({2649, 64});
  const torch::Tensor w = torch::randn({64, 256});
  const torch::Tensor gy = torch::randn({2649, 256});
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const torch::Tensor y1 = model::chain_mm(x, w);
  const torch::Tensor g1 = model::chain_mm(gy.t(), x);
  at::set_num_threads(2);
  const torch::Tensor y2 = model::chain_mm(x, w);
  const torch::Tensor g2 = model::chain_mm(gy.t(), x);
  at::set_num_threads(before);
  EXPECT_TRUE(y1.equal(y2));
  EXPECT_TRUE(g1.equal(g2));
  // And they are the products (float32 against float64's).
  EXPECT_LE(relative_gap(y1.to(torch::kDouble),
                         x.to(torch::kDouble).mm(w.to(torch::kDouble))),
            1e-6);
}

// chain_linear's forward and both gradients are x W^T's, in float64 to
// 1e-14 of the largest entry, for a 3-D input and a strided one (the last
// position of each sequence, as the last block reads it).
TEST(FmaChain, ChainLinearIsTheLinearMapWithItsGradients) {
  if (runnable_isas().empty())
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  torch::manual_seed(5);
  const torch::Tensor base = torch::randn({5, 7, 33}, torch::kDouble);
  for (const torch::Tensor& input : {base, base.narrow(1, 6, 1)}) {
    const torch::Tensor w0 = torch::randn({19, 33}, torch::kDouble);
    const torch::Tensor gy =
        torch::randn({input.size(0), input.size(1), 19}, torch::kDouble);
    auto pass = [&](bool chain) {
      torch::Tensor x = input.detach().clone().requires_grad_(true);
      torch::Tensor w = w0.clone().requires_grad_(true);
      const torch::Tensor y = chain ? model::chain_linear(x, w)
                                    : torch::nn::functional::linear(x, w);
      y.backward(gy);
      return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad()};
    };
    const auto want = pass(false), got = pass(true);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].sizes(), want[i].sizes()) << i;
      EXPECT_LE(relative_gap(got[i], want[i]), 1e-14) << i;
    }
  }
}

// Under --matmul fma-chain, forward() takes the kernels on every model
// the CPU runs, the rotary / grouped-query one included (whose attention
// keeps LibTorch's W_O): the reference function and gradients to 1e-13,
// each linear map's products counted (the bits cannot show it: a BLAS may
// sum in the same order), and none without it.
TEST(FmaChain, ForwardTakesThemWhenTheProcessChoseThem) {
  if (runnable_isas().empty())
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  for (bool rope_gqa : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "rope_gqa " << rope_gqa);
    model::ModelConfig config = path_model(true, 6)->config();
    config.rope = rope_gqa;
    config.kv_heads = rope_gqa ? 2 : 0;
    auto m = model::build(config, 11, torch::kDouble, torch::kCPU);
    torch::manual_seed(5);
    const torch::Tensor tokens = torch::randint(0, 5, {9, 6});
    const Pass ref = run_pass(m, m->reference_forward(tokens));
    const int64_t before = model::chain_products();
    run_pass(m, m->forward(tokens));
    EXPECT_EQ(model::chain_products(), before) << "the BLAS pass used them";
    Pass chained;
    {
      const model::ScopedMatmul scope(model::Matmul::kFmaChain);
      EXPECT_TRUE(model::speed_paths(config, 9, 6, false).fma_chain);
      EXPECT_FALSE(model::speed_paths(config, 9, 6, true).fma_chain);
      chained = run_pass(m, m->forward(tokens));
    }
    // At least the forward and one gradient of every linear map: Q/K/V
    // stacked, W_O, W1, W2 per block (W_O by LibTorch under rotary
    // positions), and the head.
    const int64_t maps = 2 * (rope_gqa ? 3 : 4) + 1;
    EXPECT_GE(model::chain_products() - before, 2 * maps);
    EXPECT_LE(relative_gap(chained.out, ref.out), 1e-13);
    for (size_t i = 0; i < ref.grads.size(); ++i)
      EXPECT_LE(relative_gap(chained.grads[i], ref.grads[i]), 1e-13) << i;
  }
}

namespace {

// Units in the last place between x and the exact value e.
template <typename T>
long double ulps(T x, long double e) {
  const T near = static_cast<T>(e);
  const long double ulp =
      std::nextafter(near, std::numeric_limits<T>::infinity()) - near;
  return std::fabs(static_cast<long double>(x) - e) / ulp;
}

// The largest ulp distance of fma_exp from exp over `count` points evenly
// spread over [lo, hi].
template <typename T>
long double worst_exp_ulps(T lo, T hi, int count) {
  long double worst = 0;
  for (int i = 0; i <= count; ++i) {
    const T x = lo + (hi - lo) * static_cast<T>(i) / static_cast<T>(count);
    worst = std::max(
        worst, ulps(model::fma_exp(x), std::exp(static_cast<long double>(x))));
  }
  return worst;
}

// The epilogues' scalar sequence (gemm_kernels.h) over an oracle's C.
template <typename T>
std::pair<torch::Tensor, torch::Tensor> silu_oracle(const torch::Tensor& h) {
  torch::Tensor act = torch::empty_like(h), sig = torch::empty_like(h);
  const T* in = h.data_ptr<T>();
  T *a = act.data_ptr<T>(), *s = sig.data_ptr<T>();
  for (int64_t i = 0; i < h.numel(); ++i) {
    s[i] = T(1) / (T(1) + model::fma_exp(-in[i]));
    a[i] = in[i] * s[i];
  }
  return {act, sig};
}

template <typename T>
torch::Tensor silu_grad_oracle(const torch::Tensor& h, const torch::Tensor& act,
                               const torch::Tensor& sig) {
  torch::Tensor out = torch::empty_like(h);
  const T *in = h.data_ptr<T>(), *a = act.data_ptr<T>(), *s = sig.data_ptr<T>();
  T* o = out.data_ptr<T>();
  for (int64_t i = 0; i < h.numel(); ++i)
    o[i] = in[i] * std::fma(a[i], T(1) - s[i], s[i]);
  return out;
}

}  // namespace

// The epilogues' exp is exp: within 2 ulp (measured: below 1) over the
// range where it is finite and normal, exactly 1 at 0, and its limits.
TEST(FmaChain, ExpIsWithinTwoUlpOfExpAndHasItsLimits) {
  EXPECT_LE(worst_exp_ulps<float>(-87.0f, 88.0f, 400'000), 2.0L);
  EXPECT_LE(worst_exp_ulps<float>(-1.0f, 1.0f, 100'000), 2.0L);
  EXPECT_LE(worst_exp_ulps<double>(-708.0, 709.0, 400'000), 2.0L);
  EXPECT_LE(worst_exp_ulps<double>(-1.0, 1.0, 100'000), 2.0L);
  for (auto exp1 : {model::fma_exp(0.0f), float(model::fma_exp(0.0))})
    EXPECT_EQ(exp1, 1.0f);
  EXPECT_EQ(model::fma_exp(88.5f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(model::fma_exp(-87.5f), 0.0f);
  EXPECT_EQ(model::fma_exp(710.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(model::fma_exp(-709.0), 0.0);
  EXPECT_TRUE(std::isnan(model::fma_exp(std::nanf(""))));
  EXPECT_TRUE(std::isnan(model::fma_exp(std::nan(""))));
}

// SiLU in the products' stores, and its derivative in the gradient's, are
// the scalar sequence of operations bit for bit on every instruction set:
// edges of every tile, A transposed in place, and entries large enough
// (|h| in the hundreds) to reach exp's limits.
TEST(FmaChain, SiluEpiloguesAreTheScalarSequenceOnEveryInstructionSet) {
  if (runnable_isas().empty())
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  torch::manual_seed(6);
  for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
    const bool f32 = dtype == torch::kFloat;
    for (int64_t m : {1, 7, 13}) {
      for (int64_t n : {1, 9, 17, 64, 100}) {
        for (int64_t k : {1, 40, 300}) {  // 300: the epilogue after blocks
          const torch::Tensor a = torch::randn({m, k}, dtype) * 20;
          const torch::Tensor at = (torch::randn({k, m}, dtype) * 20).t();
          const torch::Tensor b = torch::randn({k, n}, dtype);
          // The forward's SiLU and sigmoid that the gradient reads.
          const auto fwd =
              f32 ? silu_oracle<float>(torch::randn({m, n}) * 8)
                  : silu_oracle<double>(torch::randn({m, n}, dtype) * 8);
          for (const torch::Tensor& lhs : {a, at}) {
            const torch::Tensor h = f32 ? fma_chain_oracle<float>(lhs, b)
                                        : fma_chain_oracle<double>(lhs, b);
            const auto want =
                f32 ? silu_oracle<float>(h) : silu_oracle<double>(h);
            const torch::Tensor want_grad =
                f32 ? silu_grad_oracle<float>(h, fwd.first, fwd.second)
                    : silu_grad_oracle<double>(h, fwd.first, fwd.second);
            for (model::Isa isa : runnable_isas()) {
              SCOPED_TRACE(::testing::Message()
                           << model::isa_name(isa) << " " << dtype << " m " << m
                           << " n " << n << " k " << k);
              const model::SiluProduct got = model::chain_mm_silu(lhs, b, isa);
              EXPECT_TRUE(got.act.equal(want.first));
              EXPECT_TRUE(got.sig.equal(want.second));
              EXPECT_TRUE(
                  model::chain_mm_silu_grad(lhs, b, fwd.first, fwd.second, isa)
                      .equal(want_grad));
            }
          }
        }
      }
    }
  }
  // The gradient reads the forward's tensors in C's shape only.
  EXPECT_THROW(
      model::chain_mm_silu_grad(torch::ones({2, 3}), torch::ones({3, 4}),
                                torch::ones({2, 5}), torch::ones({2, 4})),
      c10::Error);
}

// One vector whose lanes are inside exp's bounds and beyond them (the
// epilogue's exp checks the whole vector, then fixes its lanes): h of
// -100, 100, +-inf and NaN among ordinary values give the scalar
// sequence's SiLU and sigmoid lane by lane (NaN where it is NaN).
TEST(FmaChain, SiluOfAVectorWithLanesBeyondExpsBoundsIsTheScalarSequence) {
  if (runnable_isas().empty())
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> row = {0.5, -100, 2,  100,   -3, inf,   0.25, -inf,
                                   1,   88.5, -1, -88.5, 4,  -87.5, 7,    NAN};
  for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
    const bool f32 = dtype == torch::kFloat;
    const torch::Tensor a = torch::ones({1, 1}, dtype);
    const torch::Tensor b =
        torch::tensor(row, torch::kDouble).to(dtype).reshape({1, 16});
    const auto want = f32 ? silu_oracle<float>(b) : silu_oracle<double>(b);
    for (model::Isa isa : runnable_isas()) {
      SCOPED_TRACE(::testing::Message()
                   << model::isa_name(isa) << " " << dtype);
      const model::SiluProduct got = model::chain_mm_silu(a, b, isa);
      for (const auto& [g, w] :
           {std::pair{got.act, want.first}, std::pair{got.sig, want.second}}) {
        EXPECT_TRUE(g.isnan().equal(w.isnan()));
        EXPECT_TRUE(g.nan_to_num(0).equal(w.nan_to_num(0)));
      }
      EXPECT_EQ(got.act.isnan().sum().item<int64_t>(), 2);  // NaN, -inf * 0
    }
  }
}

// chain_mlp is W2 silu(W1 x) with its three gradients: float64 to 1e-13
// of the largest entry against LibTorch's linear and silu (a 3-D input and
// a strided one), float32 to 1e-5; and at one and two threads the same
// bits.
TEST(FmaChain, ChainMlpIsTheMlpWithItsGradients) {
  if (runnable_isas().empty())
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  torch::manual_seed(7);
  namespace F = torch::nn::functional;
  for (torch::Dtype dtype : {torch::kDouble, torch::kFloat}) {
    const double tolerance = dtype == torch::kDouble ? 1e-13 : 1e-5;
    const torch::Tensor base = torch::randn({5, 7, 24}, dtype);
    for (const torch::Tensor& input : {base, base.narrow(1, 6, 1)}) {
      const torch::Tensor w1_0 = torch::randn({40, 24}, dtype) * 0.3;
      const torch::Tensor w2_0 = torch::randn({24, 40}, dtype) * 0.3;
      const torch::Tensor gy =
          torch::randn({input.size(0), input.size(1), 24}, dtype);
      auto pass = [&](bool chain) {
        torch::Tensor x = input.detach().clone().requires_grad_(true);
        torch::Tensor w1 = w1_0.clone().requires_grad_(true);
        torch::Tensor w2 = w2_0.clone().requires_grad_(true);
        const torch::Tensor y = chain
                                    ? model::chain_mlp(x, w1, w2)
                                    : F::linear(F::silu(F::linear(x, w1)), w2);
        y.backward(gy);
        return std::vector<torch::Tensor>{y.detach(), x.grad(), w1.grad(),
                                          w2.grad()};
      };
      const auto want = pass(false), got = pass(true);
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].sizes(), want[i].sizes()) << i;
        EXPECT_LE(relative_gap(got[i], want[i]), tolerance)
            << dtype << " " << i;
      }
    }
  }
  // The mod47 MLP's shapes at one and at two threads.
  const torch::Tensor x = torch::randn({2649, 64});
  const torch::Tensor w1 = torch::randn({256, 64}) * 0.2;
  const torch::Tensor gy = torch::randn({2649, 64});
  const torch::Tensor w2 = torch::randn({64, 256}) * 0.2;
  const int before = at::get_num_threads();
  std::vector<torch::Tensor> runs[2];
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    const model::SiluProduct s = model::chain_mm_silu(x, w1.t());
    runs[threads - 1] = {s.act, s.sig,
                         model::chain_mm_silu_grad(gy, w2, s.act, s.sig)};
  }
  at::set_num_threads(before);
  for (size_t i = 0; i < runs[0].size(); ++i)
    EXPECT_TRUE(runs[0][i].equal(runs[1][i])) << i;
}

// The residual epilogue: each entry the chain, then one IEEE addition of
// the addend, on every instruction set, for the tile edges, a k walked in
// blocks and A transposed; an addend of another shape is refused.
TEST(FmaChain, AddEpilogueIsTheChainPlusTheAddendOnEveryInstructionSet) {
  if (runnable_isas().empty())
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  torch::manual_seed(9);
  for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
    for (int64_t m : {1, 7, 13}) {
      for (int64_t n : {1, 17, 64, 100}) {
        for (int64_t k : {1, 64, 300}) {
          const torch::Tensor a = torch::randn({m, k}, dtype);
          const torch::Tensor at = torch::randn({k, m}, dtype).t();
          const torch::Tensor b = torch::randn({k, n}, dtype);
          const torch::Tensor add = torch::randn({m, n}, dtype) * 10;
          for (const torch::Tensor& lhs : {a, at}) {
            const torch::Tensor want =
                (dtype == torch::kFloat ? fma_chain_oracle<float>(lhs, b)
                                        : fma_chain_oracle<double>(lhs, b)) +
                add;
            for (model::Isa isa : runnable_isas()) {
              EXPECT_TRUE(model::chain_mm_add(lhs, b, add, isa).equal(want))
                  << model::isa_name(isa) << " " << dtype << " m " << m << " n "
                  << n << " k " << k;
            }
          }
        }
      }
    }
  }
  EXPECT_THROW(model::chain_mm_add(torch::ones({2, 3}), torch::ones({3, 4}),
                                   torch::ones({2, 5})),
               c10::Error);
  EXPECT_THROW(model::chain_linear(torch::ones({2, 3}), torch::ones({4, 3}),
                                   torch::ones({2, 3})),
               c10::Error);
}

// A residual summed in the stores, and the MLP walked in blocks of rows on
// one thread (its weight gradients' chains resumed block after block), are
// the unfused products' bits: output and every gradient, against the
// products plus a separate addition and against the row-split products of
// two threads; the mod47 MLP's 2649 rows (a last block of 89) and a
// strided input, float32 and float64.
TEST(FmaChain, ResidualAndRowBlocksKeepTheUnfusedBits) {
  if (runnable_isas().empty())
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  torch::manual_seed(10);
  const int before = at::get_num_threads();
  for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
    const torch::Tensor base = torch::randn({883, 3, 64}, dtype);
    for (const torch::Tensor& input : {base, base.narrow(1, 2, 1)}) {
      const torch::Tensor res0 = torch::randn(input.sizes(), dtype);
      const torch::Tensor w1_0 = torch::randn({256, 64}, dtype) * 0.2;
      const torch::Tensor w2_0 = torch::randn({64, 256}, dtype) * 0.2;
      const torch::Tensor wo_0 = torch::randn({64, 64}, dtype) * 0.2;
      const torch::Tensor gy = torch::randn(input.sizes(), dtype);
      // {y, dx, dres, dW...} of res + linear(x) (mlp: false) or res +
      // mlp(x), with the residual in the stores or added apart.
      auto pass = [&](bool mlp, bool fused, int threads) {
        at::set_num_threads(threads);
        torch::Tensor x = input.detach().clone().requires_grad_(true);
        torch::Tensor res = res0.clone().requires_grad_(true);
        torch::Tensor w1 = w1_0.clone().requires_grad_(true);
        torch::Tensor w2 = w2_0.clone().requires_grad_(true);
        torch::Tensor wo = wo_0.clone().requires_grad_(true);
        torch::Tensor y;
        if (mlp)
          y = fused ? model::chain_mlp(x, w1, w2, res)
                    : res + model::chain_mlp(x, w1, w2);
        else
          y = fused ? model::chain_linear(x, wo, res)
                    : res + model::chain_linear(x, wo);
        y.backward(gy);
        std::vector<torch::Tensor> out{y.detach(), x.grad(), res.grad()};
        for (const torch::Tensor* w : {&w1, &w2, &wo})
          if (w->grad().defined())
            out.push_back(w->grad());
        return out;
      };
      for (bool mlp : {false, true}) {
        const auto want = pass(mlp, false, 2);
        for (int threads : {1, 2}) {
          const auto got = pass(mlp, true, threads);
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < want.size(); ++i) {
            EXPECT_TRUE(got[i].equal(want[i]))
                << dtype << " mlp " << mlp << " threads " << threads
                << " output " << i << " strided " << !input.is_contiguous();
          }
        }
        // One thread without the residual: the unfused path too.
        const auto alone = pass(mlp, false, 1);
        for (size_t i = 0; i < want.size(); ++i)
          EXPECT_TRUE(alone[i].equal(want[i])) << i;
      }
    }
  }
  at::set_num_threads(before);
}

TEST(FmaChain, UnknownChoicesAndOperandsAreRefused) {
  try {
    model::parse_matmul("cublas");
    FAIL() << "accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Unknown --matmul 'cublas'"),
              std::string::npos);
  }
  EXPECT_EQ(model::parse_matmul("blas"), model::Matmul::kBlas);
  EXPECT_EQ(model::parse_matmul("auto"), model::best_isa() == model::Isa::kNone
                                             ? model::Matmul::kBlas
                                             : model::Matmul::kFmaChain);
  if (runnable_isas().empty())
    return;
  EXPECT_THROW(model::chain_mm(torch::ones({2, 3}, torch::kLong),
                               torch::ones({3, 2}, torch::kLong)),
               c10::Error);
  EXPECT_THROW(model::chain_mm(torch::ones({2, 3}), torch::ones({2, 3})),
               c10::Error);
}
