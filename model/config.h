// ModelConfig: the shape of the pre-norm transformer of docs/protocol.md §3.
#pragma once

#include <cstdint>
#include <string>

namespace model {

struct ModelConfig {
  int64_t vocab_in = 48;   // input tokens (mod p: the p residues and '=')
  int64_t vocab_out = 47;  // output classes
  int64_t n_ctx = 3;       // positions of the learned positional parameter
  int64_t depth = 2;       // transformer blocks
  int64_t d_model = 64;    // residual width d
  int64_t heads = 4;       // attention heads; head_dim = d_model / heads
  int64_t mlp = 256;       // hidden width of the SiLU MLP
  bool causal = false;     // causal attention mask (char-LM)
  bool last_only = true;   // predict from the last position only (mod task)
  // Key/value heads (grouped-query attention, docs/protocol.md §3): query
  // head h reads key/value head h / (heads / kv_heads). 0: one per query
  // head, the paper's model.
  int64_t kv_heads = 0;
  // Rotary positions on Q and K (docs/protocol.md §3) instead of the learned
  // positional parameter; rope_base sets the frequencies base^(-2i/head_dim).
  bool rope = false;
  double rope_base = 10000;

  int64_t head_dim() const { return d_model / heads; }
  int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  // Query heads per key/value head: head h reads key/value head h / group().
  int64_t group() const { return heads / kv_head_count(); }
  // Whether the key/value heads are fewer than the query heads.
  bool grouped() const { return kv_head_count() != heads; }
  // Throws (TORCH_CHECK) naming the offending value when the shape is
  // impossible, e.g. d_model not divisible by heads.
  void validate() const;
};

}  // namespace model
