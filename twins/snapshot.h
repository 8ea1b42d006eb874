// Saved pairs: both copies of a pair at one step, with the resolved spec
// beside them, so that a merge (docs/protocol.md §9) can be measured later
// without retraining.
//
// A snapshot directory holds
//   spec.json   the pair's spec as the result record writes it, plus the
//               step the copies were saved at ("saved_step") and the
//               SHA-256 of model1.pt and model2.pt ("model_sha256"): a
//               copy is read back only beside its own spec;
//   model1.pt   copy 1: a LibTorch archive, one tensor per named parameter
//   model2.pt   copy 2  (named as Module::named_parameters() names them),
//               on the CPU in the run's dtype.
// Every file is written to a temporary name and renamed into place, the
// spec last, so a directory with a spec.json is complete.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/task.h"
#include "model/transformer.h"
#include "twins/result.h"
#include "twins/spec.h"

namespace twins {

inline constexpr const char* kSnapshotSpecFile = "spec.json";
inline constexpr const char* kSnapshotModelFiles[2] = {"model1.pt",
                                                       "model2.pt"};

// The directory name of a pair's snapshot inside a --save-models directory:
// its label in file-name characters and a hash of its key, e.g.
// "adam-gauge-init42-seed777-3f2a9c1d".
std::string snapshot_name(const PairSpec& spec);

// Writes both copies and the spec into `dir` (created if missing). An older
// snapshot there is replaced: its spec.json goes first, so a crash midway
// leaves a directory that does not load rather than a mixed pair. Throws
// naming the file that cannot be written.
void save_pair(const std::string& dir, const PairSpec& spec, int64_t step,
               const model::Transformer& m1, const model::Transformer& m2);

// A pair read back: its spec, the step it was saved at, the two copies in
// freshly built models and the spec's task (for measure_merge).
struct SavedPair {
  PairSpec spec;
  int64_t step = 0;
  model::Transformer m1{nullptr};
  model::Transformer m2{nullptr};
  std::unique_ptr<data::Task> task;
};

// Reads the snapshot in `dir` onto `device`. When `expected` is given the
// saved spec must agree with it in task, dtype and model shape. Every error
// is one line naming the file: missing, unreadable or corrupt, a spec that
// disagrees with `expected`, or a model file whose tensors do not match the
// spec (a missing or unexpected name, another shape or dtype).
SavedPair load_pair(const std::string& dir,
                    const torch::Device& device = torch::kCPU,
                    const PairSpec* expected = nullptr);

// The saved pairs under `dir`: `dir` itself when it holds one, else every
// subdirectory that does, in name order (empty when none does).
std::vector<std::string> find_saved_pairs(const std::string& dir);

// The spec of a saved pair's record: the saved spec merged at the saved
// step. Its key names the measurement, so a results file holds it once.
PairSpec saved_spec(const SavedPair& pair);

// The record of a saved pair as saved, without training it: its drift,
// invariant drift and validation figures at the saved step (train losses
// unknown: NaN), and the merge measured there (docs/protocol.md §9).
PairResult measure_saved(SavedPair& pair);

}  // namespace twins
