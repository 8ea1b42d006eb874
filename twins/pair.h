// One twin pair, end to end (ARCHITECTURE.md "the flow of one pair"): build
// the base model once, copy it twice, turn copy 2 into the twin, train both
// in lockstep on the same batches, measure at the checkpoints.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/task.h"
#include "twins/metrics.h"
#include "twins/spec.h"

namespace twins {

struct PairResult {
  PairSpec spec;
  std::vector<CurvePoint> curve;        // one per checkpoint, step 0 first
  std::vector<double> qk_per_head;      // final, layer-major
  std::array<double, 2> val_acc{};      // final, copy 1 / copy 2
  std::array<double, 2> val_loss{};     // final
  std::array<double, 2> train_loss{};   // loss of the last training step
  std::string status = "ok";            // "ok" or "diverged"
  int64_t diverged_step = -1;           // first step with a non-finite loss
  double wall_s = 0;                    // seconds for the whole pair
  std::string torch_version;
};

// The task of `spec` (mod<p> split or char-LM batch stream) on `device`.
std::unique_ptr<data::Task> make_task(const PairSpec& spec,
                                      const torch::Device& device);

// Builds the task on CPU and discards it: throws the task's one-line error
// (unknown task, missing or too short corpus) before anything is written.
void check_task(const PairSpec& spec);

// Called after each training step with the step number (1..steps).
using Progress = std::function<void(int64_t step)>;

// A pair ready to train: the base model built once and copied twice, copy 2
// turned into the twin, one optimizer per copy, the task's batch stream.
// run_pair drives it through the checkpoints; the benchmark times it.
class Pair {
 public:
  // concurrent_copies: the two copies are independent between
  // synchronisation points; true trains them on two threads (set LibTorch
  // and OpenBLAS to one thread each first, twins::set_threads(1)). Each
  // copy runs the same op sequence either way, so the numbers are bitwise
  // the same.
  explicit Pair(const PairSpec& spec, bool concurrent_copies = false);
  ~Pair();
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  // Trains both copies through steps done()+1 .. `to` on the same batches.
  void train_to(int64_t to, const Progress& progress = {});
  // Reads back the losses of the steps trained since the last call (a host
  // synchronisation on CUDA); returns the first step whose loss of either
  // copy is not finite, or -1.
  int64_t check_losses();
  // Both copies on the validation set at the current step.
  CurvePoint measure();

  int64_t done() const { return done_; }
  // Every step's training loss of copy i (0 or 1) read back so far.
  const std::vector<double>& losses(int i) const;
  model::Transformer& model(int i);
  const data::Task& task() const { return *task_; }

 private:
  struct Copy;
  PairSpec spec_;
  bool concurrent_;
  std::unique_ptr<data::Task> task_;
  std::vector<std::unique_ptr<Copy>> copies_;
  int64_t done_ = 0;
};

// Runs `spec` through its checkpoints. A non-finite training loss of either
// copy stops the pair: status "diverged", diverged_step set, the curve ends
// at the last checkpoint before it. Throws for an invalid spec (unknown task
// or optimizer, impossible shape, unavailable device). concurrent_copies: see
// Pair.
PairResult run_pair(const PairSpec& spec, const Progress& progress = {},
                    bool concurrent_copies = false);

}  // namespace twins
