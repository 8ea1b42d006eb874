// Twin construction (docs/protocol.md §2), applied in place to copy 2 of a
// pair.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/transformer.h"
#include "twins/spec.h"

namespace twins {

// One hd x hd matrix per layer and key/value head: [layer][head].
using HeadMatrices = std::vector<std::vector<torch::Tensor>>;

// Throws "WHAT: N layers of matrices for depth D" or "WHAT: N matrices for
// K key/value heads" unless `m` has one matrix per layer and key/value head
// of `config`.
void check_head_matrices(const HeadMatrices& m,
                         const model::ModelConfig& config, const char* what);

// Random orthogonal A_h per layer and head: a CPU generator seeded with
// `seed` draws, layer by layer and head by head, a Gaussian hd x hd float64
// matrix in `draw` (float32 or float64); A_h is the Q of its QR
// decomposition in that dtype. Returned as CPU tensors, [layer][head].
HeadMatrices gauge_matrices(int64_t depth, int64_t heads, int64_t head_dim,
                            uint64_t seed, torch::Dtype draw = torch::kDouble);

// The gauge of one twin: the matrices per layer and key/value head that act
// on the query/key side (A) and on the value/output side (B); a side the
// twin leaves alone is empty.
struct GaugeDraw {
  HeadMatrices qk;
  HeadMatrices vo;
};

// The draw of a twin of `kind` on a model of `config` (docs/protocol.md §2):
// one CPU generator seeded with `seed` draws the QK matrices, layer by layer
// and key head by key head, then the VO matrices the same way. A QK matrix
// is orthogonal (gauge_matrices' draw), or under rotary positions a rotation
// of each frequency pair by an angle uniform in [0, 2pi) (the subgroup that
// commutes with every position's rotation); `gauge-full` draws the
// orthogonal one under rotary positions too, which is not a symmetry there.
// A VO matrix is orthogonal. Empty for the identity and noise twins.
GaugeDraw gauge_draw(const model::ModelConfig& config, TwinKind kind,
                     uint64_t seed, torch::Dtype draw = torch::kDouble);

// Left-multiplies the rows of key head j of W_K, and those of each of its
// query heads in W_Q, by A[layer][j] (cast to the model's dtype and
// device). In place, under NoGradGuard, so parameter identity is preserved.
void rotate_heads(model::Transformer& model, const HeadMatrices& A);

// Value head j of every layer: its rows of W_V become B W_V,j, and the W_O
// columns of each of its query heads W_O,h B^T, B = B[layer][j]. In place.
void rotate_values(model::Transformer& model, const HeadMatrices& B);

// W_Q then W_K of every layer += N(0, 1) * scale: the Gaussian drawn in
// `draw` from a CPU generator seeded with `seed`, cast to the model's dtype,
// then scaled.
void add_qk_noise(model::Transformer& model, uint64_t seed, double scale,
                  torch::Dtype draw = torch::kDouble);

// Every matrix of `m` transposed (the inverse of an orthogonal draw).
HeadMatrices transposed(const HeadMatrices& m);

// rotate_heads by gauge.qk, then rotate_values by gauge.vo; a side that is
// empty is left alone.
void apply_gauge(model::Transformer& model, const GaugeDraw& gauge);

// Makes copy 2 of a pair: a gauge twin (gauge_draw), identity (A_h = I, the
// QK gauge's code path), noise, or the round trip (gauge-all's draw applied
// and undone).
void apply_twin(model::Transformer& model, TwinKind kind, uint64_t seed,
                double noise_scale, torch::Dtype draw = torch::kDouble);

}  // namespace twins
