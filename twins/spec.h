// PairSpec: everything that determines one twin pair, fully resolved (no
// "default" left in it), and its stable key.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace twins {

// PROTOCOL §2: how copy 2 differs from copy 1.
enum class TwinKind {
  kGauge,     // per-head orthogonal A_h on the W_Q / W_K row blocks
  kIdentity,  // the same operation with A_h = I: must stay exactly equal
  kNoise,     // W_Q, W_K + scale * N(0, 1), no rotation
};

const char* to_string(TwinKind kind);
// Throws "Unknown twin kind: 'x' (known: gauge, identity, noise)".
TwinKind parse_twin_kind(const std::string& name);

// "float32" / "float64" <-> dtype; throws naming the value otherwise.
torch::Dtype parse_dtype(const std::string& name);
std::string dtype_name(torch::Dtype dtype);

constexpr uint64_t kDefaultGaugeSeed = 777;  // Table 3's gauge draw
constexpr uint64_t kDefaultNoiseSeed = 888;  // Table 3's noise draw

struct PairSpec {
  std::string task = "mod47";        // mod<p> or charlm
  std::string opt = "adam";          // a registered optimizer name
  TwinKind twin = TwinKind::kGauge;
  uint64_t init_seed = 42;           // torch::manual_seed before the build
  uint64_t twin_seed = kDefaultGaugeSeed;  // gauge / noise generator seed
  double noise_scale = 1e-7;         // noise twins: std of the perturbation
  int64_t steps = 1500;              // training steps
  double lr = 1e-3;                  // learning rate (resolved default)
  torch::Dtype dtype = torch::kFloat;
  std::string device = "cpu";        // cpu, cuda or cuda:N
  int64_t depth = 2;                 // transformer blocks
  int64_t d_model = 64;              // residual width
  int64_t heads = 4;                 // attention heads
  int64_t mlp = 256;                 // MLP hidden width
  uint64_t data_seed = 42;           // split / batch-stream seed
  // char-LM only
  int64_t ctx = 128;                 // context length
  int64_t batch = 32;                // windows per step
  std::string corpus;                // text file; empty = shipped corpus

  bool uses_twin_seed() const { return twin != TwinKind::kIdentity; }
  bool uses_noise_scale() const { return twin == TwinKind::kNoise; }

  // A stable string naming every field that changes the numbers; two specs
  // with the same key produce bitwise the same record.
  std::string key() const;
};

}  // namespace twins
