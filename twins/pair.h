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

// Runs `spec`. A non-finite training loss of either copy stops the pair:
// status "diverged", diverged_step set, the curve ends at the last
// checkpoint before it. Throws for an invalid spec (unknown task or
// optimizer, impossible shape, unavailable device).
//
// concurrent_copies: the two copies are independent between checkpoints;
// true trains them on two threads (set LibTorch and OpenBLAS to one thread
// each first, twins::set_threads(1)). The record is bitwise the same.
PairResult run_pair(const PairSpec& spec, const Progress& progress = {},
                    bool concurrent_copies = false);

}  // namespace twins
