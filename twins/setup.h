// From a PairSpec to what trains: its task on a device, its model's shape
// on that task, and the parameters of a model split as the optimizer
// registry hands them over (docs/protocol.md §3, §5).
#pragma once

#include <memory>

#include "data/task.h"
#include "model/transformer.h"
#include "optim/registry.h"
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

// The parameters of `model` split as the optimizer registry hands them
// over: the matrices, W_Q / W_K, and each parameter's role.
optim::ParamSplit param_split(const model::Transformer& model);

}  // namespace twins
