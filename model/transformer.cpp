#include "model/transformer.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <string>

#include <ATen/CPUGeneratorImpl.h>

#include "model/fused.h"
#include "model/generator.h"
#include "model/small_attention.h"

namespace model {

namespace F = torch::nn::functional;

void ModelConfig::validate() const {
  TORCH_CHECK(depth >= 1, "Invalid depth: ", depth, " (must be >= 1)");
  TORCH_CHECK(d_model >= 1, "Invalid d_model: ", d_model, " (must be >= 1)");
  TORCH_CHECK(heads >= 1, "Invalid heads: ", heads, " (must be >= 1)");
  TORCH_CHECK(d_model % heads == 0, "Invalid shape: d_model ", d_model,
              " is not divisible by heads ", heads);
  TORCH_CHECK(mlp >= 1, "Invalid mlp width: ", mlp, " (must be >= 1)");
  TORCH_CHECK(vocab_in >= 1 && vocab_out >= 1, "Invalid vocabulary: ", vocab_in,
              " in, ", vocab_out, " out");
  TORCH_CHECK(n_ctx >= 1, "Invalid context length: ", n_ctx);
}

// ---------------------------------------------------------------------------
// RMSNorm

RMSNormImpl::RMSNormImpl(int64_t d) : sqrt_d_(std::sqrt(double(d))) {
  gain = register_parameter("gain", torch::ones({d}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // No epsilon (docs/protocol.md §3): a zero residual vector never occurs here.
  if (!x.is_cuda())
    return fused_rms_norm(x, gain);
  // The per-row factor sqrt(d) / ||x|| first: one full-size product fewer.
  return x * (sqrt_d_ / x.norm(2, {-1}, /*keepdim=*/true)) * gain;
}

// ---------------------------------------------------------------------------
// Attention

AttentionImpl::AttentionImpl(int64_t d_model, int64_t heads, bool causal)
    : heads_(heads), causal_(causal) {
  auto linear = [&](const char* name) {
    return register_module(
        name, torch::nn::Linear(
                  torch::nn::LinearOptions(d_model, d_model).bias(false)));
  };
  // Build order W_Q, W_K, W_V, W_O (docs/protocol.md §3).
  wq = linear("wq");
  wk = linear("wk");
  wv = linear("wv");
  wo = linear("wo");
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, bool last_query) {
  const int64_t T = x.size(1);
  torch::Tensor xq = last_query ? x.narrow(1, T - 1, 1) : x;
  return attend({wq(xq), wk(x), wv(x)});
}

torch::Tensor AttentionImpl::attend(const Qkv& qkv) {
  const int64_t B = qkv.k.size(0), T = qkv.k.size(1), d = qkv.k.size(2);
  const int64_t Tq = qkv.q.size(1), hd = d / heads_;
  if (!qkv.k.is_cuda() && T <= kSmallAttentionMaxPositions) {
    return wo(small_attention(qkv.q, qkv.k, qkv.v, heads_, causal_));
  }
  const double scale = 1.0 / std::sqrt(double(hd));
  auto split = [&](const torch::Tensor& t) {  // -> (B, nh, T', hd)
    return t.view({B, t.size(1), heads_, hd}).transpose(1, 2);
  };
  torch::Tensor q = split(qkv.q), k = split(qkv.k), v = split(qkv.v);
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * scale;
  if (causal_ && Tq == T && T > 1) {  // a last query sees every position
    auto mask =
        torch::ones(
            {T, T},
            torch::TensorOptions().dtype(torch::kBool).device(att.device()))
            .triu(1);
    att = att.masked_fill(mask, -std::numeric_limits<double>::infinity());
  }
  att = torch::softmax(att, -1);
  torch::Tensor y = torch::matmul(att, v);    // (B, nh, Tq, hd)
  y = y.transpose(1, 2).reshape({B, Tq, d});  // (B, Tq, d)
  return wo(y);
}

// ---------------------------------------------------------------------------
// Block

BlockImpl::BlockImpl(int64_t d_model, int64_t heads, int64_t mlp, bool causal) {
  // Build order norm1, attention (W_Q, W_K, W_V, W_O), norm2, W1, W2.
  norm1 = register_module("norm1", RMSNorm(d_model));
  attn = register_module("attn", Attention(d_model, heads, causal));
  norm2 = register_module("norm2", RMSNorm(d_model));
  w1 = register_module(
      "w1",
      torch::nn::Linear(torch::nn::LinearOptions(d_model, mlp).bias(false)));
  w2 = register_module(
      "w2",
      torch::nn::Linear(torch::nn::LinearOptions(mlp, d_model).bias(false)));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, bool last_only) {
  const torch::Tensor n = norm1(x);
  const int64_t T = x.size(1), d = x.size(2);
  auto& a = attn;
  // The projections that share an input in one product (W_Q; W_K; W_V
  // stacked): one pass over n, and one input gradient instead of a sum of
  // three. The weights stay separate parameters; the stack is rebuilt from
  // them at every call.
  if (last_only) {  // K and V of every position, Q of the last only
    // (split, not narrow: its backward is one cat, not a zero-filled
    // full-size gradient per piece)
    const auto kv =
        F::linear(n, torch::cat({a->wk->weight, a->wv->weight})).split(d, -1);
    return forward(x, {a->wq(n.narrow(1, T - 1, 1)), kv[0], kv[1]}, true);
  }
  const auto qkv =
      F::linear(n, torch::cat({a->wq->weight, a->wk->weight, a->wv->weight}))
          .split(d, -1);
  return forward(x, {qkv[0], qkv[1], qkv[2]}, false);
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const Qkv& qkv,
                                 bool last_only) {
  // With last_only only the last position leaves the block: (B, 1, d).
  torch::Tensor a = attn->attend(qkv);
  torch::Tensor h = (last_only ? x.narrow(1, x.size(1) - 1, 1) : x) + a;
  return h + w2(F::silu(w1(norm2(h))));
}

// ---------------------------------------------------------------------------
// Transformer

TransformerImpl::TransformerImpl(const ModelConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  const int64_t d = cfg.d_model;
  tok_emb = register_parameter("tok_emb", torch::randn({cfg.vocab_in, d}));
  pos_emb =
      register_parameter("pos_emb", torch::randn({1, cfg.n_ctx, d}) * 0.02);
  for (int64_t l = 0; l < cfg.depth; ++l) {
    blocks.push_back(register_module("block" + std::to_string(l),
                                     Block(d, cfg.heads, cfg.mlp, cfg.causal)));
  }
  norm_f = register_module("norm_f", RMSNorm(d));
  head = register_module(
      "head", torch::nn::Linear(
                  torch::nn::LinearOptions(d, cfg.vocab_out).bias(false)));
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be (B, T), got ", tokens.sizes());
  const int64_t B = tokens.size(0), T = tokens.size(1);
  TORCH_CHECK(T <= cfg_.n_ctx, "sequence length ", T, " exceeds n_ctx ",
              cfg_.n_ctx);
  if (uses_token_table(cfg_, B, tokens.is_cuda())) {
    return forward_with_table(tokens);
  }
  torch::Tensor x;
  if (tokens.is_cuda()) {
    // A one-hot matmul: its backward is a matmul, deterministic on CUDA,
    // unlike the index_add behind an embedding lookup's backward.
    x = torch::matmul(F::one_hot(tokens, cfg_.vocab_in).to(tok_emb.dtype()),
                      tok_emb);  // (B, T, d)
  } else {
    x = tok_emb.index_select(0, tokens.reshape({-1}))
            .view({B, T, cfg_.d_model});  // (B, T, d)
  }
  x = x + pos_emb.narrow(1, 0, T);
  for (size_t l = 0; l < blocks.size(); ++l) {
    // In the last block of a last-position model only the last query matters.
    const bool last = cfg_.last_only && l + 1 == blocks.size();
    x = blocks[l]->forward(x, last);
  }
  x = norm_f(x);
  if (cfg_.last_only)
    x = x.squeeze(1);  // (B, d)
  return head(x);
}

torch::Tensor TransformerImpl::forward_with_table(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1), V = cfg_.vocab_in, d = cfg_.d_model;
  // Row t * V + v of the table: token v at position t.
  const torch::Tensor table =
      (pos_emb.narrow(1, 0, T).transpose(0, 1) + tok_emb.unsqueeze(0))
          .reshape({T * V, d});
  const torch::Tensor rows =  // (B, T): each input position's table row
      tokens + torch::arange(T, tokens.options()).mul_(V).unsqueeze(0);
  auto gather = [&](const torch::Tensor& t, const torch::Tensor& r) {
    return t.index_select(0, r.reshape({-1})).view({r.size(0), r.size(1), -1});
  };
  const bool last = cfg_.last_only && blocks.size() == 1;
  Block& b0 = blocks.front();
  auto& a = b0->attn;
  // [embedding + positional | Q | K | V] per table row, gathered at once.
  const torch::Tensor projected =
      F::linear(b0->norm1(table),
                torch::cat({a->wq->weight, a->wk->weight, a->wv->weight}));
  const auto g = gather(torch::cat({table, projected}, 1), rows).split(d, -1);
  torch::Tensor x = b0->forward(
      g[0], {last ? g[1].narrow(1, T - 1, 1) : g[1], g[2], g[3]}, last);
  for (size_t l = 1; l < blocks.size(); ++l) {
    x = blocks[l]->forward(x, cfg_.last_only && l + 1 == blocks.size());
  }
  x = norm_f(x);
  if (cfg_.last_only)
    x = x.squeeze(1);  // (B, d)
  return head(x);
}

bool uses_token_table(const ModelConfig& cfg, int64_t sequences, bool cuda) {
  return !cuda && sequences > cfg.vocab_in;
}

torch::Tensor TransformerImpl::query_block(int64_t layer, int64_t head) const {
  const int64_t hd = cfg_.head_dim();
  return blocks.at(layer)->attn->wq->weight.narrow(0, head * hd, hd);
}

torch::Tensor TransformerImpl::key_block(int64_t layer, int64_t head) const {
  const int64_t hd = cfg_.head_dim();
  return blocks.at(layer)->attn->wk->weight.narrow(0, head * hd, hd);
}

std::vector<torch::Tensor> TransformerImpl::matrix_parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& b : blocks) {
    for (const auto& w :
         {b->attn->wq->weight, b->attn->wk->weight, b->attn->wv->weight,
          b->attn->wo->weight, b->w1->weight, b->w2->weight}) {
      out.push_back(w);
    }
  }
  return out;
}

std::vector<torch::Tensor> TransformerImpl::other_parameters() const {
  std::vector<torch::Tensor> out{tok_emb, pos_emb};
  for (const auto& b : blocks) {
    out.push_back(b->norm1->gain);
    out.push_back(b->norm2->gain);
  }
  out.push_back(norm_f->gain);
  out.push_back(head->weight);
  return out;
}

namespace {

// Init::kByParameter: every weight redrawn in place, parameter kind by
// parameter kind across the layers, from one generator.
void init_by_parameter(TransformerImpl& m, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  const ModelConfig& cfg = m.config();
  m.tok_emb.copy_(torch::randn({cfg.vocab_in, cfg.d_model}, gen));
  m.pos_emb.copy_(torch::randn({1, cfg.n_ctx, cfg.d_model}, gen) * 0.02);
  auto uniform = [&](torch::Tensor& w) {  // U(-1, 1) / sqrt(fan_in)
    const double bound = 1.0 / std::sqrt(double(w.size(1)));
    w.copy_((torch::rand(w.sizes(), gen) * 2 - 1) * bound);
  };
  using Weight = torch::Tensor& (*)(BlockImpl&);
  const Weight kinds[] = {
      [](BlockImpl& b) -> torch::Tensor& { return b.attn->wq->weight; },
      [](BlockImpl& b) -> torch::Tensor& { return b.attn->wk->weight; },
      [](BlockImpl& b) -> torch::Tensor& { return b.attn->wv->weight; },
      [](BlockImpl& b) -> torch::Tensor& { return b.attn->wo->weight; },
      [](BlockImpl& b) -> torch::Tensor& { return b.w1->weight; },
      [](BlockImpl& b) -> torch::Tensor& { return b.w2->weight; },
  };
  for (Weight kind : kinds) {
    for (auto& block : m.blocks)
      uniform(kind(*block));
  }
  uniform(m.head->weight);
}

}  // namespace

std::recursive_mutex& default_generator_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

Transformer build(const ModelConfig& cfg, uint64_t init_seed,
                  torch::Dtype dtype, const torch::Device& device, Init init) {
  // The initialisers draw from the global generator: serialise builds so
  // that pairs run on concurrent threads still get their seed's weights.
  std::lock_guard<std::recursive_mutex> lock(default_generator_mutex());
  torch::manual_seed(init_seed);
  Transformer m(cfg);
  if (init == Init::kByParameter)
    init_by_parameter(*m, init_seed);
  m->to(device, dtype);
  return m;
}

void copy_parameters(const Transformer& from, Transformer& to) {
  torch::NoGradGuard no_grad;
  auto src = from->parameters();
  auto dst = to->parameters();
  TORCH_CHECK(src.size() == dst.size(), "copy_parameters: ", src.size(), " vs ",
              dst.size(), " parameters");
  for (size_t i = 0; i < src.size(); ++i)
    dst[i].copy_(src[i]);
}

}  // namespace model
