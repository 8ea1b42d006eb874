// The transformer of docs/protocol.md §3: pre-norm, RMSNorm without epsilon,
// multi-head attention whose heads are row blocks of W_Q / W_K / W_V,
// SiLU MLP, no biases and no qk-norm (either would break the exact gauge).
//
// Construction order is the protocol's: embedding, positional, then per
// layer norm1, W_Q, W_K, W_V, W_O, norm2, W1, W2, then final norm and head, so
// torch::manual_seed(s) before construction gives the weights of the same
// model built in that order in PyTorch.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/config.h"

namespace model {

// x / ||x||_2 * sqrt(d) * g along the last dimension, g initialised to 1,
// no epsilon (docs/protocol.md §3). The tensor formula; the CPU kernel of
// model/fused.h is a speed path.
class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t d);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor gain;

 private:
  double sqrt_d_;
};
TORCH_MODULE(RMSNorm);

// Queries, keys and values of a sequence batch, each (B, T', d) with T' =
// T, or 1 for the queries of a last-position block.
struct Qkv {
  torch::Tensor q, k, v;
};

// x (..., T, hd) with positions first..first+T-1 along T: each pair of
// coordinates (2i, 2i+1) rotated by the angle position * base^(-2i/hd)
// (docs/protocol.md §3, rotary positions).
torch::Tensor rotate_positions(const torch::Tensor& x, int64_t first,
                               double base);
// x (B, H, T, hd) -> (B, H * group, T, hd): head j repeated for heads
// j * group .. (j + 1) * group - 1 (grouped-query attention).
torch::Tensor repeat_heads(const torch::Tensor& x, int64_t group);

// W_Q: (d, d); W_K, W_V: (kv_heads * head_dim, d); W_O: (d, d). Head h's
// queries are rows h*hd..(h+1)*hd of W_Q; its keys and values those of key
// head h / (heads / kv_heads) in W_K, W_V; its output columns of W_O.
class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelConfig& config);
  // x: (B, T, d) -> (B, T, d).
  torch::Tensor forward(const torch::Tensor& x);
  // softmax(Q K^T / sqrt(head_dim)) V per head, then W_O, from projections
  // already made: (B, T', d) with T' = qkv.q's positions (the last ones).
  // Rotary positions turn Q and K first; a key/value head serves its group
  // of query heads.
  torch::Tensor attend(const Qkv& qkv);

  torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
  int64_t heads() const { return heads_; }
  int64_t kv_heads() const { return kv_heads_; }
  bool causal() const { return causal_; }
  bool rope() const { return rope_; }

 private:
  int64_t heads_, kv_heads_;
  bool causal_, rope_;
  double rope_base_;
};
TORCH_MODULE(Attention);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const ModelConfig& config);
  // x: (B, T, d) -> (B, T, d): h = x + attention(norm1(x)), then
  // h + mlp(norm2(h)).
  torch::Tensor forward(const torch::Tensor& x);
  // W2 silu(W1 n): n (..., d) -> (..., d).
  torch::Tensor mlp(const torch::Tensor& n);

  RMSNorm norm1{nullptr};
  Attention attn{nullptr};
  RMSNorm norm2{nullptr};
  torch::nn::Linear w1{nullptr}, w2{nullptr};
};
TORCH_MODULE(Block);

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const ModelConfig& config);

  // tokens: (B, T) int64 with T <= n_ctx. Returns (B, vocab_out) logits when
  // config.last_only, else (B, T, vocab_out): reference_forward's function,
  // computed by the speed paths this device and batch allow (model/fused.h).
  torch::Tensor forward(const torch::Tensor& tokens);
  // The model of docs/protocol.md §3 written plainly — embed, blocks, norm,
  // head, every position through every block: what each speed path is
  // tested against.
  torch::Tensor reference_forward(const torch::Tensor& tokens);

  const ModelConfig& config() const { return config_; }

  // Rows h*hd..(h+1)*hd of W_Q / W_K / W_V of `layer` (for W_K and W_V,
  // `head` counts key/value heads), and columns h*hd..(h+1)*hd of W_O:
  // views into the weights, so in-place writes under NoGradGuard change the
  // model.
  torch::Tensor query_block(int64_t layer, int64_t head) const;
  torch::Tensor key_block(int64_t layer, int64_t head) const;
  torch::Tensor value_block(int64_t layer, int64_t head) const;
  torch::Tensor output_block(int64_t layer, int64_t head) const;

  // W_Q, W_K, W_V, W_O, W1, W2 of every layer (what Muon updates), in build
  // order; and everything else (embedding, positional, gains, head).
  std::vector<torch::Tensor> matrix_parameters() const;
  std::vector<torch::Tensor> other_parameters() const;

  torch::Tensor tok_emb;  // (vocab_in, d)
  torch::Tensor pos_emb;  // (1, n_ctx, d); undefined under rotary positions
  std::vector<Block> blocks;
  RMSNorm norm_f{nullptr};
  torch::nn::Linear head{nullptr};

 private:
  // Throws unless tokens is (B, T) with T <= n_ctx.
  void check_tokens(const torch::Tensor& tokens) const;

  ModelConfig config_;
};
TORCH_MODULE(Transformer);

// How build() draws the initial weights (docs/protocol.md §3).
enum class Init {
  // torch::manual_seed(seed), then every module's own initialiser in build
  // order: PyTorch's default init of the same model built in that order.
  kModuleDefault,
  // One CPU generator seeded with `seed` draws, in this order: embedding
  // N(0, 1), positional N(0, 1) * 0.02, then W_Q of every layer, W_K of
  // every layer, W_V..., W_O..., W1..., W2..., and the head, each linear
  // weight U(-1, 1) / sqrt(fan_in); gains are ones.
  kByParameter,
};

// Builds the model of docs/protocol.md §3: seeded on CPU in float32, then cast
// to `dtype` and moved to `device`.
Transformer build(const ModelConfig& config, uint64_t init_seed,
                  torch::Dtype dtype, const torch::Device& device,
                  Init init = Init::kModuleDefault);

// Copies every parameter of `from` into `to` (same config) in place.
void copy_parameters(const Transformer& from, Transformer& to);

}  // namespace model
