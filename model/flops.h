// The matrix-multiply work of one training step of the transformer, counted
// from its shapes: the benchmark's model FLOP count and the shapes its
// matrix-multiply roof replays.
//
// Counting rule: a product of an (m x k) and a (k x n) matrix is 2 m k n
// FLOPs. Each linear map x W^T on r rows costs one product forward and two
// backward (dX = dY W and dW = dY^T X); every input needs its gradient,
// since the embedding is trained. Attention adds, per sequence and head,
// Q K^T and A V forward and their four products backward. Elementwise work
// (norms, softmax, SiLU, the optimizer) is not counted: it is what separates
// the model's FLOP rate from the roof.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace model {

struct MatmulShape {
  int64_t m = 0, k = 0, n = 0;  // (m x k) @ (k x n)
  int64_t batch = 1;            // independent products of this shape
  // A is read transposed in place: a weight's gradient dY^T X, the step's
  // long-k products.
  bool a_transposed = false;
  double flops() const { return 2.0 * double(m) * k * n * batch; }
};

// Every product of one forward + backward pass of `cfg` on `sequences`
// inputs of length `len`, as Transformer::forward does it on CPU (or on
// CUDA): the last-position shortcut of a last_only model (its last block
// computes queries, output, MLP and head for the last position only) and
// the first block's token table (model::uses_token_table: W_Q, W_K, W_V on
// one row per (token, position)) included.
std::vector<MatmulShape> training_step_matmuls(const ModelConfig& cfg,
                                               int64_t sequences, int64_t len,
                                               bool cuda = false);

double total_flops(const std::vector<MatmulShape>& shapes);

}  // namespace model
