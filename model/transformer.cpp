#include "model/transformer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <string>

#include "model/fused.h"
#include "model/generator.h"

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
  // No epsilon (docs/protocol.md §3): a zero residual vector never occurs
  // here. The per-row factor sqrt(d) / ||x|| first: one full-size product
  // fewer.
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

torch::Tensor AttentionImpl::forward(const torch::Tensor& x) {
  return attend({wq(x), wk(x), wv(x)});
}

torch::Tensor AttentionImpl::attend(const Qkv& qkv) {
  const int64_t B = qkv.k.size(0), T = qkv.k.size(1), d = qkv.k.size(2);
  const int64_t Tq = qkv.q.size(1), hd = d / heads_;
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

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  const torch::Tensor h = x + attn(norm1(x));
  return h + mlp(norm2(h));
}

torch::Tensor BlockImpl::mlp(const torch::Tensor& n) {
  return w2(F::silu(w1(n)));
}

// ---------------------------------------------------------------------------
// Transformer

TransformerImpl::TransformerImpl(const ModelConfig& config) : config_(config) {
  config_.validate();
  const int64_t d = config.d_model;
  tok_emb = register_parameter("tok_emb", torch::randn({config.vocab_in, d}));
  pos_emb =
      register_parameter("pos_emb", torch::randn({1, config.n_ctx, d}) * 0.02);
  for (int64_t l = 0; l < config.depth; ++l) {
    blocks.push_back(
        register_module("block" + std::to_string(l),
                        Block(d, config.heads, config.mlp, config.causal)));
  }
  norm_f = register_module("norm_f", RMSNorm(d));
  head = register_module(
      "head", torch::nn::Linear(
                  torch::nn::LinearOptions(d, config.vocab_out).bias(false)));
}

void TransformerImpl::check_tokens(const torch::Tensor& tokens) const {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be (B, T), got ", tokens.sizes());
  TORCH_CHECK(tokens.size(1) <= config_.n_ctx, "sequence length ",
              tokens.size(1), " exceeds n_ctx ", config_.n_ctx);
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) {
  check_tokens(tokens);
  return fast_forward(*this, tokens);  // model/fused.h
}

torch::Tensor TransformerImpl::reference_forward(const torch::Tensor& tokens) {
  check_tokens(tokens);
  const int64_t B = tokens.size(0), T = tokens.size(1);
  torch::Tensor x = tok_emb.index_select(0, tokens.reshape({-1}))
                        .view({B, T, config_.d_model});  // (B, T, d)
  x = x + pos_emb.narrow(1, 0, T);
  for (auto& block : blocks)
    x = block->forward(x);  // (B, T, d)
  x = norm_f(x);
  if (config_.last_only)
    x = x.select(1, T - 1);  // (B, d): the last position predicts
  return head(x);
}

torch::Tensor TransformerImpl::query_block(int64_t layer, int64_t head) const {
  const int64_t hd = config_.head_dim();
  return blocks.at(layer)->attn->wq->weight.narrow(0, head * hd, hd);
}

torch::Tensor TransformerImpl::key_block(int64_t layer, int64_t head) const {
  const int64_t hd = config_.head_dim();
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
void init_by_parameter(TransformerImpl& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  const ModelConfig& config = model.config();
  model.tok_emb.copy_(torch::randn({config.vocab_in, config.d_model}, gen));
  model.pos_emb.copy_(torch::randn({1, config.n_ctx, config.d_model}, gen) *
                      0.02);
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
    for (auto& block : model.blocks)
      uniform(kind(*block));
  }
  uniform(model.head->weight);
}

}  // namespace

std::recursive_mutex& default_generator_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

Transformer build(const ModelConfig& config, uint64_t init_seed,
                  torch::Dtype dtype, const torch::Device& device, Init init) {
  // The initialisers draw from the global generator: serialise builds so
  // that pairs run on concurrent threads still get their seed's weights.
  std::lock_guard<std::recursive_mutex> lock(default_generator_mutex());
  torch::manual_seed(init_seed);
  Transformer model(config);
  if (init == Init::kByParameter)
    init_by_parameter(*model, init_seed);
  model->to(device, dtype);
  return model;
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
