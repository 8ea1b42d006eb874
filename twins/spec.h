// PairSpec: everything that determines one twin pair, fully resolved (no
// "default" left in it), its keys, and the words every report uses for it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/transformer.h"
#include "optim/base.h"

namespace twins {

// docs/protocol.md §2: how copy 2 differs from copy 1.
enum class TwinKind {
  kGauge,     // per-head orthogonal A_h on the W_Q / W_K row blocks
  kIdentity,  // the same operation with A_h = I: must stay exactly equal
  kNoise,     // W_Q, W_K + scale * N(0, 1), no rotation
  kGaugeVo,   // per value head orthogonal B_h: W_V rows, W_O columns
  kGaugeAll,  // the QK and the VO gauge together
  // Under rotary positions, an unrestricted orthogonal A_h on W_Q / W_K:
  // not a symmetry there (the negative control).
  kGaugeFull,
  // Every rotation gauge-all applies (the QK gauge and the VO gauge), each
  // applied and then undone: copy 2 holds copy 1's weights in copy 1's
  // basis, off only by those rotations' rounding — the verdict's yardstick
  // (docs/protocol.md §2, §10).
  kRoundTrip,
};

const char* to_string(TwinKind kind);
// Throws "Unknown twin kind: 'x' (known: gauge, identity, noise, ...)".
TwinKind parse_twin_kind(const std::string& name);
// Whether a twin of `kind` rotates W_Q / W_K (the QK gauge), W_V / W_O
// (the VO gauge); whether it is one of the gauge twins (the round trip,
// which rotates and rotates back, is none of these).
bool acts_on_qk(TwinKind kind);
bool acts_on_vo(TwinKind kind);
bool is_gauge(TwinKind kind);

// docs/protocol.md §2a: the recipe a pair follows — the paper's CPU scripts
// (Table 3, D.5), its GPU suite (Table 9), or the project's own.
enum class Protocol {
  kPaperCpu,  // PyTorch's module init; float32 gauge and noise draws
  kPaperGpu,  // one generator, parameter by parameter; float64 draws
  kTwins,     // PyTorch's module init; float64 draws (exact in float64)
};
const char* to_string(Protocol protocol);
// Throws "Unknown protocol: 'x' (known: paper-cpu, paper-gpu, twins)".
Protocol parse_protocol(const std::string& name);
// The dtype the gauge and noise of `protocol` are drawn in.
torch::Dtype draw_dtype(Protocol protocol);
// How `protocol` initialises the base model.
model::Init model_init(Protocol protocol);
// The protocol of a pair that names none, where `paper` is the one its
// table follows: the paper's CPU scripts ran in float32 only, and their
// float32 draw would leave a float64 gauge 1e-7 off orthogonal, so a
// float64 pair of the Table-3 model follows the project's own protocol
// (docs/protocol.md §2a).
Protocol default_protocol(Protocol paper, torch::Dtype dtype);

// "float32" / "float64" <-> dtype; throws naming the value otherwise.
torch::Dtype parse_dtype(const std::string& name);
std::string dtype_name(torch::Dtype dtype);

constexpr uint64_t kDefaultGaugeSeed = 777;  // Table 3's gauge draw
constexpr uint64_t kDefaultNoiseSeed = 888;  // Table 3's noise draw
// docs/protocol.md §2, §6: the triplet's noise twin, and the 100x stronger
// noise twin the onset and structural ratios divide by.
constexpr double kTripletNoiseScale = 1e-7;
constexpr double kOnsetNoiseScale = 1e-5;

// The version of the result record (docs/output-format.md). Version 1 had
// no "schema" field and no optimizer hyperparameters; version 2 added both
// and the checkpoints 2, 3 and 5; version 3 the protocol (and with it the
// paper's 1e-12 in the drifts' denominators) and stop_after.
constexpr int kRecordSchema = 3;

struct PairSpec {
  Protocol protocol = Protocol::kPaperCpu;  // docs/protocol.md §2a
  std::string task = "mod47";  // mod<p> or charlm
  std::string opt = "adam";    // a registered optimizer name
  // Every hyperparameter of `opt` but lr, as the registry builds it (or as
  // a record read back says it was built).
  optim::Hparams hparams;
  TwinKind twin = TwinKind::kGauge;
  uint64_t init_seed = 42;  // torch::manual_seed before the build
  uint64_t twin_seed = kDefaultGaugeSeed;   // gauge / noise generator seed
  double noise_scale = kTripletNoiseScale;  // noise twins: perturbation std
  int64_t steps = 1500;                     // training steps
  // Train only through this step, with everything else — the data stream,
  // the draws, the checkpoints up to it — exactly as for `steps` steps
  // (docs/protocol.md §6); 0: train all `steps`.
  int64_t stop_after = 0;
  double lr = 1e-3;                         // learning rate (resolved default)
  torch::Dtype dtype = torch::kFloat;
  std::string device = "cpu";  // cpu, cuda or cuda:N
  int64_t depth = 2;           // transformer blocks
  int64_t d_model = 64;        // residual width
  int64_t heads = 4;           // attention heads
  int64_t mlp = 256;           // MLP hidden width
  // Key/value heads (grouped-query attention); 0: as many as `heads`.
  int64_t kv_heads = 0;
  bool rope = false;           // rotary positions instead of learned ones
  double rope_base = 10000;    // their frequency base (rope only)
  uint64_t data_seed = 42;     // split / batch-stream seed
  // char-LM only
  int64_t ctx = 128;   // context length
  int64_t batch = 32;  // windows per step
  std::string corpus;  // text file; empty = shipped corpus
  std::string corpus_sha256;  // its content (twins::bind_corpus); in key()
  // Checkpoints at which the pair also measures head merging
  // (docs/protocol.md §9); empty: none.
  std::vector<int64_t> merge_at;

  bool uses_twin_seed() const { return twin != TwinKind::kIdentity; }
  int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  // Whether copy 2 computes copy 1's function at step 0: every twin but
  // gauge-full under rotary positions (docs/protocol.md §2).
  bool twin_is_symmetry() const {
    return !(rope && twin == TwinKind::kGaugeFull);
  }
  bool uses_noise_scale() const { return twin == TwinKind::kNoise; }
  bool is_charlm() const { return task == "charlm"; }
  // The last step this pair trains: stop_after, or steps.
  int64_t last_step() const { return stop_after > 0 ? stop_after : steps; }

  // Which pair this is, in words that do not depend on the code that runs
  // it: task, optimizer name, twin, seeds, steps, lr, dtype, device, shape,
  // data. Two records with the same pair_id but different key() describe
  // the same pair run by different rules (another schema or other
  // hyperparameters) and must not be mixed.
  std::string pair_id() const;
  // pair_id() plus the optimizer's hyperparameters, the merge checkpoints
  // and the record schema: two specs with the same key produce bitwise the
  // same record.
  std::string key() const;
  // Every field that determines copy 1 (all of key() but the twin kind, the
  // twin seed and the noise scale): pairs with the same reference key train
  // the same copy 1, step for step.
  std::string reference_key() const;
};

// "name=value,..." sorted by name: how hyperparameters enter a key.
std::string hparams_text(const optim::Hparams& hparams);

// The first difference between two hyperparameter lists, in words
// ("beta2 0.99 vs 0.999", "nesterov missing vs 1"); empty when equal.
std::string hparams_difference(const optim::Hparams& first,
                               const optim::Hparams& second);

// A noise scale as the paper writes it: 1e-7, 3e-6, 0.001.
std::string format_scale(double scale);

// The twin in a table's words: "gauge", "A=I", "noise 1e-7".
std::string twin_label(const PairSpec& spec);

// A short label of a pair: "adam gauge (init 42, seed 777)",
// "adam noise 1e-5 (init 42, seed 888)".
std::string pair_label(const PairSpec& spec);

}  // namespace twins
