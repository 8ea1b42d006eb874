// Attention over a few positions (the modular tasks have three) as one CPU
// kernel with its own backward. Written with tensor ops, the score and
// output products of a (3 x 16) query block are broadcast multiplies whose
// (B, T, T, heads, head_dim) temporaries, and their backward's, were a fifth
// of a mod47 step; this kernel reads Q, K, V once and keeps only the
// (B, heads, Tq, T) probabilities for the backward.
#pragma once

#include <torch/torch.h>

namespace model {

// The most key positions small_attention takes.
constexpr int64_t kSmallAttentionMaxPositions = 8;

// softmax(Q K^T / sqrt(head_dim)) V per head, on the CPU.
// q (B, Tq, d), k and v (B, T, d), Tq <= T <= kSmallAttentionMaxPositions,
// d = heads * head_dim, float32 or float64; the last dimension contiguous
// (views of a wider projection are fine). Query i sits at position
// T - Tq + i; with `causal` it sees the keys up to its own position.
// Returns (B, Tq, d). Differentiable in q, k and v; every element's sums run
// in a fixed order and batches are independent, so results do not depend on
// the number of threads.
torch::Tensor small_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, int64_t heads,
                              bool causal);

// The same with Q, K and V the column blocks [Q | K | V] of one (B, T, 3d)
// tensor (the stacked projection's output); with `last_query` only the
// last position's query: (B, 1, d). Its gradient is one (B, T, 3d) tensor,
// with the kernel's bits: the three blocks' gradients are not gathered
// into it by a pass of their own.
torch::Tensor small_attention_packed(const torch::Tensor& qkv, int64_t heads,
                                     bool causal, bool last_query);

// The same with q (B, Tq, d) apart and [K | V] packed in one (B, T, 2d)
// tensor.
torch::Tensor small_attention_kv(const torch::Tensor& q,
                                 const torch::Tensor& kv, int64_t heads,
                                 bool causal);

// The same on a table's rows: table (R, 3d) holds [Q | K | V] per row and
// position t of sequence b is its row rows[b * positions + t] (rows: int64,
// B * positions of them); every position's query. Returns (B, positions, d)
// with the bits of small_attention_packed on the gathered (B, positions,
// 3d) tensor, and its gradient, the table's (R, 3d), has the bits of that
// tensor's gradient added row by row into the table in the order of
// `rows`, from zero (gather_rows' backward) — without the gathered tensor
// or its gradient in memory (a non-contiguous table is copied first).
// The backward runs on the calling thread.
torch::Tensor small_attention_table(const torch::Tensor& table,
                                    const torch::Tensor& rows,
                                    int64_t positions, int64_t heads,
                                    bool causal);

// How many times this process called small_attention_table: the tests'
// evidence that a forward pass took it.
int64_t small_attention_table_calls();

}  // namespace model
