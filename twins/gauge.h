// Twin construction (docs/protocol.md §2), applied in place to copy 2 of a
// pair.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/transformer.h"
#include "twins/spec.h"

namespace twins {

// Random orthogonal A_h per layer and head: a CPU generator seeded with
// `seed` draws, layer by layer and head by head, a Gaussian hd x hd float64
// matrix in `draw` (float32 or float64); A_h is the Q of its QR
// decomposition in that dtype. Returned as CPU tensors, [layer][head].
std::vector<std::vector<torch::Tensor>> gauge_matrices(
    int64_t depth, int64_t heads, int64_t head_dim, uint64_t seed,
    torch::Dtype draw = torch::kDouble);

// Left-multiplies rows h*hd..(h+1)*hd of W_Q and of W_K of every layer by
// A[layer][head] (cast to the model's dtype and device). In place, under
// NoGradGuard, so parameter identity is preserved.
void rotate_heads(model::Transformer& model,
                  const std::vector<std::vector<torch::Tensor>>& A);

// W_Q then W_K of every layer += N(0, 1) * scale: the Gaussian drawn in
// `draw` from a CPU generator seeded with `seed`, cast to the model's dtype,
// then scaled.
void add_qk_noise(model::Transformer& model, uint64_t seed, double scale,
                  torch::Dtype draw = torch::kDouble);

// Makes copy 2 of a pair: gauge (seeded A_h), identity (A_h = I, the same
// code path) or noise.
void apply_twin(model::Transformer& model, TwinKind kind, uint64_t seed,
                double noise_scale, torch::Dtype draw = torch::kDouble);

}  // namespace twins
