// The speed paths of the transformer's forward pass: the function of
// TransformerImpl::reference_forward (model/transformer.h, docs/protocol.md
// §3), computed with less work. Each is tested equal to the reference
// (tests/test_model.cpp): bitwise where the products are the same, else to
// the tolerance its comment states.
//
// The RMSNorm kernel here is one of them: written with tensor ops, the
// norm's backward is a dozen small ops (the norm's own backward with its
// zero-norm mask, two broadcast products, the gain's column sum): 0.45 ms of
// a 20 ms mod47 step per (2649, 64) input, 0.2 ms this way. (A fused SiLU
// was tried the same way: no faster, its passes are memory-bound either
// way.)
#pragma once

#include <torch/torch.h>

#include <utility>

#include "model/config.h"
#include "model/transformer.h"

namespace model {

// Which speed paths a forward pass takes. Float64 tolerances are relative
// to the largest entry of the output or gradient compared; each path
// measured at most 2e-15 with OpenBLAS (tests/test_model.cpp), the margin
// is for other BLAS builds' product orders.
struct SpeedPaths {
  // RMSNorm as one CPU pass forward and one backward (fused_rms_norm): its
  // sums in another order, 1e-13.
  bool fused_norm = false;
  // The embedding as a one-hot product: exact forward (one product of 1 and
  // the rest of 0), and a backward that is a matmul, deterministic on CUDA
  // unlike the index_add behind a lookup's; the embedding's gradient sums
  // in another order, 1e-12.
  bool one_hot_embedding = false;
  // The first block's token-wise work (embedding, positional, norm1, W_Q /
  // W_K / W_V) once per (token, position), gathered per input position:
  // less work when a batch holds more sequences than the vocabulary has
  // tokens (the full-batch mod-p task: 883 sequences, 48 tokens). CPU only:
  // on CUDA the gather's backward (an index_add) is not deterministic; and
  // not under rotary positions, whose table would be of tokens alone.
  // Products over other rows, 1e-12.
  bool token_table = false;
  // With the token table and the small-attention kernel, a first block
  // that is not the last attends on the table's rows where the model runs
  // on one thread (small_attention_table: no gathered [Q | K | V] or
  // gradient in memory): the gather's bits.
  bool table_attention = false;
  // W_Q, W_K, W_V stacked in one product per block: one pass over the
  // normed input, and one input gradient instead of a sum of three. The
  // weights stay separate parameters; the stack is rebuilt at every call.
  // Products of another shape, 1e-12.
  bool fused_qkv = false;
  // Attention over at most kSmallAttentionMaxPositions positions as one
  // CPU kernel (model/small_attention.h): 1e-13. The kernel has one
  // key/value head per query head and no rotation: grouped-query attention
  // and rotary positions take the reference attention.
  bool small_attention = false;
  // A last_only model's last block computes the last position only (its
  // query, output, MLP): products over fewer rows, 1e-12.
  bool last_query = false;
  // Every linear map x W^T by twins' own kernels (model/gemm.h): one FMA
  // chain per entry instead of the BLAS's order, 1e-13. CPU only, and only
  // when the process chose them (--matmul).
  bool fma_chain = false;
};

// Whether the token table pays: more sequences than the vocabulary has
// tokens, on the CPU.
bool uses_token_table(const ModelConfig& config, int64_t sequences, bool cuda);

// The paths TransformerImpl::forward takes for `sequences` sequences of
// `positions` tokens on the CPU or on CUDA: every one the device allows.
SpeedPaths speed_paths(const ModelConfig& config, int64_t sequences,
                       int64_t positions, bool cuda);

// The model's function on `tokens` (B, T) by `paths`. With none it runs the
// very operations of reference_forward.
torch::Tensor fast_forward(TransformerImpl& model, const torch::Tensor& tokens,
                           const SpeedPaths& paths);
// The same by speed_paths() for the tokens' batch and device.
torch::Tensor fast_forward(TransformerImpl& model, const torch::Tensor& tokens);

// x * sqrt(d) / ||x|| * gain over the last dimension d, no epsilon
// (docs/protocol.md §3). x (..., d), gain (d), float32 or float64, CPU.
// Differentiable in x and gain. Row sums run over eight lanes in a fixed
// order, the gain's gradient adds rows in order in double, all on one
// thread: the result does not depend on the thread count.
torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& gain);

// fused_rms_norm of x (B, T, d) and, beside it, the input of the residual
// branch that x also feeds: x itself, or with `last` its last position
// (B, 1, d). Both from one autograd node, whose backward adds the
// residual's gradient into x's in the norm's loop: the bits of autograd's
// sum of the norm's gradient and the residual's (a zero-filled slice's
// with `last`), without its passes.
std::pair<torch::Tensor, torch::Tensor> fused_rms_norm_keep(
    const torch::Tensor& x, const torch::Tensor& gain, bool last);

// table.index_select(0, rows) for a (R, w) float32 / float64 CPU table and
// int64 rows in [0, R), differentiable in the table with index_select's
// bits: each gathered row's gradient added into its table row in the order
// of `rows`, into zeros (index_add_'s order), in one loop rather than a
// LibTorch operation per row. The token table's gathers.
torch::Tensor gather_rows(const torch::Tensor& table,
                          const torch::Tensor& rows);

}  // namespace model
