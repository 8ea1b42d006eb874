// The lockstep pair, and the group of pairs that share copy 1 (docs/
// architecture.md, "the flow of one pair"). Copy 1 of a pair — the
// reference — depends on every field of its spec but the twin kind, the
// twin seed and the noise scale (PairSpec::reference_key), so pairs that
// differ only there train the very same copy 1. A Lockstep builds the base
// model once, keeps it as the reference, makes one twin per spec (copy 2 of
// that pair), trains all of them on the same batches, and measures each twin
// against the reference at the checkpoints exactly as a pair of two models
// would: a group of one is a pair, and every pair's record is bitwise the
// same whichever group it trains in.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "data/task.h"
#include "model/transformer.h"
#include "optim/registry.h"
#include "twins/group_state.h"
#include "twins/result.h"
#include "twins/spec.h"

namespace twins {

// The task of `spec` (mod<p> split or char-LM batch stream) on `device`.
std::unique_ptr<data::Task> make_task(const PairSpec& spec,
                                      const torch::Device& device);

// Builds the task on CPU and discards it: throws the task's one-line error
// (unknown task, missing or too short corpus) before anything is written.
void check_task(const PairSpec& spec);

// The model shape of `spec` on its task.
model::ModelConfig model_config(const PairSpec& spec,
                                const data::TaskShape& shape);

// The parameters of `m` split as the optimizer registry hands them over.
optim::ParamSplit param_split(const model::Transformer& m);

// Called after each training step of copy 1 with the step (1..steps).
using Progress = std::function<void(int64_t step)>;

class Lockstep {
 public:
  // `specs`: one per twin, all with the same reference_key() (throws
  // otherwise). `threads`: models trained at once; with more than one, each
  // model trains on a thread of its own with one LibTorch / OpenBLAS thread,
  // and with one the caller's thread trains them in turn at the caller's
  // thread settings. Every model runs the same operations either way, so the
  // numbers do not depend on it.
  explicit Lockstep(std::vector<PairSpec> specs, int threads = 1);
  ~Lockstep();
  Lockstep(const Lockstep&) = delete;
  Lockstep& operator=(const Lockstep&) = delete;

  // Trains the reference and every live twin through steps done()+1 .. to
  // on the same batches.
  void train_to(int64_t to, const Progress& progress = {});
  // Reads back the losses trained since the last call (a host
  // synchronisation on CUDA). Returns, per twin, the first step at which
  // the reference's or the twin's loss is not finite (the pair's divergence
  // step), or -1; retired twins get -1.
  std::vector<int64_t> check_losses();
  // Every live copy whose rule has evaluation weights (schedule-free:
  // optim::EvaluationWeights) swaps them in, and back to the iterate it
  // trains; once each per measurement checkpoint, whatever the group's
  // size, so that a pair's numbers do not depend on its group.
  void to_evaluation();
  void to_training();

  // The reference on the validation set at the current step.
  Evaluation evaluate_reference();
  // Twin i against the reference at the current step; `reference` is
  // evaluate_reference()'s result when the caller has one (it is then not
  // evaluated again).
  CurvePoint measure(size_t twin, const Evaluation* reference = nullptr);
  // Stops training twin i (its pair has ended).
  void retire(size_t twin);

  size_t twins() const;
  bool live(size_t twin) const;
  int64_t done() const { return done_; }
  const PairSpec& spec(size_t twin) const { return specs_.at(twin); }
  model::Transformer& reference();
  model::Transformer& twin(size_t i);
  // Every step's training loss read back so far: the reference's, twin i's.
  const std::vector<double>& reference_losses() const;
  const std::vector<double>& twin_losses(size_t i) const;
  const data::Task& task() const { return *task_; }

  // The training state of the reference and of every live twin (their
  // weights, optimizer states and every loss so far, pending ones read
  // back first) into `archive`; twin i under "twin<i>".
  void save_state(torch::serialize::OutputArchive& archive);
  // Back from an archive save_state wrote at step `step`: twin i of this
  // group from the archive's twin source[i]. Throws naming what does not
  // fit (another model shape or optimizer state).
  void load_state(torch::serialize::InputArchive& archive,
                  const std::vector<size_t>& source, int64_t step);

 private:
  struct Copy;
  void for_each_copy(const std::function<void(Copy&)>& f);  // the live ones
  std::vector<PairSpec> specs_;
  int threads_;
  std::unique_ptr<data::Task> task_;
  std::unique_ptr<Copy> reference_;
  std::vector<std::unique_ptr<Copy>> twins_;  // null once retired
  std::vector<std::vector<double>> retired_losses_;
  int64_t done_ = 0;
};

struct GroupOptions {
  int threads = 1;    // models trained at once (see Lockstep)
  Progress progress;  // after each step of copy 1
  // Called once per pair as it ends (diverged, or at the last step), with
  // the record final, the step its models are at and both of them.
  std::function<void(const PairResult&, int64_t step,
                     model::Transformer& reference, model::Transformer& twin)>
      pair_done;
  // The group's state file (twins/group_state.h); empty: none. With one,
  // the group resumes from it when it exists, writes it as `state` says
  // and when a stop is requested (then throws Stopped).
  std::string state_file;
  StatePolicy state;
  // Notes about the state file (resumed, restarted), one line each.
  std::function<void(const std::string&)> note;
};

// Runs the pairs of `specs` (one reference, see Lockstep) through their
// checkpoints. A pair whose copy 1 or copy 2 has a non-finite training loss
// ends there: status diverged, diverged_step set, its curve ends at the
// last checkpoint before, and the group trains on without it (a diverging
// reference ends every pair). Returns the results in the order of `specs`.
// Throws for an invalid spec (unknown task or optimizer, impossible shape,
// unavailable device).
std::vector<PairResult> run_group(const std::vector<PairSpec>& specs,
                                  const GroupOptions& options = {});

// One pair: run_group of a group of one.
PairResult run_pair(const PairSpec& spec, const Progress& progress = {},
                    int threads = 1);

}  // namespace twins
