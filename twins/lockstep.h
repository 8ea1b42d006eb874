// The lockstep training of a group of pairs that share copy 1 (docs/
// architecture.md, "the flow of one pair"). Copy 1 of a pair — the
// reference — depends on every field of its spec but the twin kind, the
// twin seed and the noise scale (PairSpec::reference_key), so pairs that
// differ only there train the very same copy 1. A Lockstep builds the base
// model once, keeps it as the reference, makes one twin per spec (copy 2 of
// that pair), trains all of them on the same batches, and measures each twin
// against the reference exactly as a pair of two models would: a group of
// one is a pair, and every pair's record is bitwise the same whichever group
// it trains in. What it trains is saved and restored by the group's
// checkpoint (twins/checkpoint.h); when to measure, by run_group
// (twins/pair.h).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "data/task.h"
#include "model/transformer.h"
#include "optim/base.h"
#include "twins/metrics.h"
#include "twins/spec.h"

namespace twins {

// Called after each training step of copy 1 with the step (1..steps).
using Progress = std::function<void(int64_t step)>;

// One model of a group as it trains: the model, its optimizer and its
// training losses.
struct TrainingCopy {
  TrainingCopy(model::Transformer model, const PairSpec& spec);

  // The loss of `batch` with its gradients written fresh: reset to
  // undefined (not zeroed), the same behaviour on LibTorch 1.13 and 2.x.
  torch::Tensor evaluate(const data::Batch& batch);
  // Where the parameters and their gradients are: each one's version
  // counter and its gradient's identity and version.
  std::vector<int64_t> versions() const;
  // One step on `batch`: loss, backward, the optimizer's step (which may
  // call its closure: see the definition).
  void step(const data::Batch& batch);
  // The rule's evaluation weights (schedule-free rules), or none.
  optim::EvaluationWeights* evaluation_weights() const;
  // Steps first+1, first+2, ... on `batches`, each reported to `progress`.
  void train(const std::vector<data::Batch>& batches, int64_t first,
             const Progress& progress);
  // Appends the pending losses to `losses`, unchecked.
  void flush();
  // Reads back the pending losses; returns the first non-finite step
  // (1-based) among those not checked before, or -1.
  int64_t read_losses();

  model::Transformer model{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<torch::Tensor> parameters;  // the model's, in build order
  std::vector<torch::Tensor> pending;     // detached losses not read back
  std::vector<double> losses;             // every step's loss, read back
  size_t checked = 0;  // losses checked for divergence (read_losses)
};

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
  model::Transformer& twin(size_t twin);
  // Every step's training loss read back so far: the reference's, twin i's.
  const std::vector<double>& reference_losses() const;
  const std::vector<double>& twin_losses(size_t twin) const;
  const data::Task& task() const { return *task_; }

  // What a checkpoint saves and restores (twins/checkpoint.h): the
  // reference's and a live twin's model, optimizer and losses.
  TrainingCopy& reference_copy() { return *reference_; }
  TrainingCopy& twin_copy(size_t twin);
  // After a checkpoint restored every copy to `step`: training goes on
  // from there. Throws for a step outside 0..steps.
  void restored_at(int64_t step);

 private:
  // `visit` on the reference and every live twin.
  void for_each_copy(const std::function<void(TrainingCopy&)>& visit);
  std::vector<PairSpec> specs_;
  int threads_;
  std::unique_ptr<data::Task> task_;
  std::unique_ptr<TrainingCopy> reference_;
  std::vector<std::unique_ptr<TrainingCopy>> twins_;  // null once retired
  std::vector<std::vector<double>> retired_losses_;
  int64_t done_ = 0;
};

}  // namespace twins
