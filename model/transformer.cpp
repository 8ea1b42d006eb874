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
  TORCH_CHECK(
      kv_heads >= 0 && kv_heads <= heads && heads % kv_head_count() == 0,
      "Invalid --kv-heads: ", kv_heads, " (must divide --heads ", heads, ")");
  TORCH_CHECK(!rope || head_dim() % 2 == 0,
              "Invalid shape for --rope: head "
              "dim ",
              head_dim(),
              " (d_model / heads) is odd; rotary "
              "positions rotate pairs of coordinates");
  TORCH_CHECK(!rope || (rope_base > 1 && std::isfinite(rope_base)),
              "Invalid --rope-base: ", rope_base, " (must be > 1 and finite)");
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

AttentionImpl::AttentionImpl(const ModelConfig& config)
    : heads_(config.heads),
      kv_heads_(config.kv_head_count()),
      causal_(config.causal),
      rope_(config.rope),
      rope_base_(config.rope_base) {
  const int64_t d = config.d_model, kv = kv_heads_ * config.head_dim();
  auto linear = [&](const char* name, int64_t in, int64_t out) {
    return register_module(
        name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
  };
  // Build order W_Q, W_K, W_V, W_O (docs/protocol.md §3).
  wq = linear("wq", d, d);
  wk = linear("wk", d, kv);
  wv = linear("wv", d, kv);
  wo = linear("wo", d, d);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x) {
  return attend({wq(x), wk(x), wv(x)});
}

torch::Tensor AttentionImpl::attend(const Qkv& qkv) {
  const int64_t B = qkv.k.size(0), T = qkv.k.size(1);
  const int64_t Tq = qkv.q.size(1), d = qkv.q.size(2), hd = d / heads_;
  const double scale = 1.0 / std::sqrt(double(hd));
  auto split = [&](const torch::Tensor& t) {  // -> (B, heads in t, T', hd)
    return t.view({B, t.size(1), t.size(2) / hd, hd}).transpose(1, 2);
  };
  torch::Tensor q = split(qkv.q), k = split(qkv.k), v = split(qkv.v);
  if (rope_) {  // query i sits at position T - Tq + i
    q = rotate_positions(q, T - Tq, rope_base_);
    k = rotate_positions(k, 0, rope_base_);
  }
  if (kv_heads_ != heads_) {  // query head h reads key/value head h / g
    k = repeat_heads(k, heads_ / kv_heads_);
    v = repeat_heads(v, heads_ / kv_heads_);
  }
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

torch::Tensor rotate_positions(const torch::Tensor& x, int64_t first,
                               double base) {
  const int64_t T = x.size(-2), hd = x.size(-1);
  // Angles in double, (T, hd / 2): position t, pair i -> t * base^(-2i/hd).
  const auto in_double = torch::TensorOptions().dtype(torch::kDouble);
  const torch::Tensor frequency =
      torch::pow(base, torch::arange(0, hd, 2, in_double) / double(-hd));
  const torch::Tensor angle =
      torch::arange(first, first + T, in_double).unsqueeze(1) * frequency;
  const torch::Tensor c = angle.cos().to(x.device(), x.scalar_type());
  const torch::Tensor s = angle.sin().to(x.device(), x.scalar_type());
  std::vector<int64_t> pairs = x.sizes().vec();
  pairs.back() = hd / 2;
  pairs.push_back(2);
  const torch::Tensor xp = x.reshape(pairs);
  const torch::Tensor x0 = xp.select(-1, 0), x1 = xp.select(-1, 1);
  return torch::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1)
      .reshape(x.sizes());
}

torch::Tensor repeat_heads(const torch::Tensor& x, int64_t group) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), hd = x.size(3);
  return x.unsqueeze(2)
      .expand({B, H, group, T, hd})
      .reshape({B, H * group, T, hd});
}

// ---------------------------------------------------------------------------
// Block

BlockImpl::BlockImpl(const ModelConfig& config) {
  const int64_t d = config.d_model;
  auto linear = [](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  // Build order norm1, attention (W_Q, W_K, W_V, W_O), norm2, W1, W2.
  norm1 = register_module("norm1", RMSNorm(d));
  attn = register_module("attn", Attention(config));
  norm2 = register_module("norm2", RMSNorm(d));
  w1 = register_module("w1", linear(d, config.mlp));
  w2 = register_module("w2", linear(config.mlp, d));
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
  if (!config.rope) {  // rotary positions have no parameter
    pos_emb = register_parameter("pos_emb",
                                 torch::randn({1, config.n_ctx, d}) * 0.02);
  }
  for (int64_t l = 0; l < config.depth; ++l) {
    blocks.push_back(
        register_module("block" + std::to_string(l), Block(config)));
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
  if (pos_emb.defined())  // learned positions; else rotary, in attention
    x = x + pos_emb.narrow(1, 0, T);
  for (auto& block : blocks)
    x = block->forward(x);  // (B, T, d)
  x = norm_f(x);
  if (config_.last_only)
    x = x.select(1, T - 1);  // (B, d): the last position predicts
  return head(x);
}

namespace {

// Head `head`'s hd rows (dim 0) or columns (dim 1) of w: a view.
torch::Tensor head_slice(const torch::Tensor& w, int64_t dim, int64_t head,
                         int64_t hd) {
  return w.narrow(dim, head * hd, hd);
}

}  // namespace

torch::Tensor TransformerImpl::query_block(int64_t layer, int64_t head) const {
  return head_slice(blocks.at(layer)->attn->wq->weight, 0, head,
                    config_.head_dim());
}

torch::Tensor TransformerImpl::key_block(int64_t layer, int64_t head) const {
  return head_slice(blocks.at(layer)->attn->wk->weight, 0, head,
                    config_.head_dim());
}

torch::Tensor TransformerImpl::value_block(int64_t layer, int64_t head) const {
  return head_slice(blocks.at(layer)->attn->wv->weight, 0, head,
                    config_.head_dim());
}

torch::Tensor TransformerImpl::output_block(int64_t layer, int64_t head) const {
  return head_slice(blocks.at(layer)->attn->wo->weight, 1, head,
                    config_.head_dim());
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
  std::vector<torch::Tensor> out{tok_emb};
  if (pos_emb.defined())
    out.push_back(pos_emb);
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
  if (model.pos_emb.defined()) {
    model.pos_emb.copy_(torch::randn({1, config.n_ctx, config.d_model}, gen) *
                        0.02);
  }
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
