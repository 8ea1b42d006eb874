// From what the user asked for (lists of optimizers, twins, seeds...) to the
// fully resolved list of PairSpecs a run executes. Every default comes from
// the task (data::task_defaults), the learning-rate table
// (twins::default_lr) and the optimizer registry (hyperparameters).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "twins/spec.h"

namespace sweep {

// Zero / empty fields mean "the task's default".
struct PlanRequest {
  std::string task = "mod47";
  std::vector<std::string> opts;   // empty with twins empty: Table-3 set
  std::vector<double> adam_ps;     // --p: exponents of a bare adam-p
  std::vector<std::string> twins;  // gauge, identity, noise
  std::vector<uint64_t> init_seeds{42};
  std::vector<uint64_t> twin_seeds;  // empty: 777 for gauge, 888 for noise
  std::vector<double> noise_scales{twins::kTripletNoiseScale};
  std::string protocol;  // empty: paper-cpu (docs/protocol.md §2a)
  int64_t steps = 0;     // 0: the task's
  int64_t stop_after = 0;  // train only through this step; 0: every step
  double lr = 0;      // 0: the optimizer's default for the task
  std::string dtype;  // empty: float32 on CPU, float64 on CUDA
  std::string device = "cpu";
  int64_t depth = 0;    // 0: the task's
  int64_t d_model = 0;  // 0: the task's
  int64_t heads = 0;    // 0: the task's
  int64_t mlp = 0;      // 0: 4 * d_model
  int64_t kv_heads = 0;  // key/value heads; 0: as many as heads
  bool rope = false;     // rotary positions instead of learned ones
  double rope_base = 0;  // 0: 10000 (with rope only)
  uint64_t data_seed = 42;
  int64_t ctx = 0;                // char-LM context; 0: the task's
  int64_t batch = 0;              // char-LM batch; 0: the task's
  std::string corpus;             // char-LM text file
  std::vector<int64_t> merge_at;  // head-merging checkpoints; empty: none
};

// Expands the request into pairs: for every (opt, twin) row and init seed,
// every twin seed (gauge and noise twins) and every noise scale (noise
// twins). Identity twins use neither. Validates every value and throws a
// one-line message naming it (unknown task/optimizer/twin, impossible shape,
// non-positive steps or lr, bad dtype or device name, a merge step beyond
// the last step).
std::vector<twins::PairSpec> expand(const PlanRequest& request);

// The steps the pairs of `request` train: --steps, or the task's default.
// Throws for an unknown task or steps < 1.
int64_t planned_steps(const PlanRequest& request);

// The hyperparameters the registry builds `opt` with.
optim::Hparams registry_hparams(const std::string& opt);

}  // namespace sweep
