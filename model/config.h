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

  int64_t head_dim() const { return d_model / heads; }
  // Throws (TORCH_CHECK) naming the offending value when the shape is
  // impossible, e.g. d_model not divisible by heads.
  void validate() const;
};

}  // namespace model
