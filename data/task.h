// Tasks hand out the training batch for step t and the validation set. Both
// copies of a twin pair ask for step t and get the very same tensors.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

namespace data {

struct Batch {
  torch::Tensor x;  // (B, T) int64 tokens
  torch::Tensor y;  // (B) int64 targets (last position) or (B, T) (every one)
};

// What the model needs to know about a task.
struct TaskShape {
  int64_t vocab_in = 0;
  int64_t vocab_out = 0;
  int64_t n_ctx = 0;
  bool causal = false;     // causal attention
  bool last_only = false;  // predict from the last position only
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual TaskShape shape() const = 0;
  // Training batch of step t (t counts from 1), already on the task's device.
  virtual Batch train_batch(int64_t step) const = 0;
  virtual const Batch& validation() const = 0;
};

// Everything a task may need; fields a task does not use are ignored.
struct TaskOptions {
  std::string name = "mod47";  // mod<p> or charlm
  uint64_t data_seed = 42;     // the split / batch-stream generator's seed
  torch::Device device = torch::kCPU;
  // char-LM only
  std::string corpus;  // path; empty = the shipped tinyshakespeare.txt
  int64_t ctx = 128;   // context length
  int64_t batch = 32;  // windows per training step
  int64_t steps = 0;   // training steps the batch stream must cover
};

// Builds the task named options.name; throws naming the value if unknown.
std::unique_ptr<Task> make_task(const TaskOptions& options);

// "mod" for mod<p>, "charlm" for charlm (the learning-rate column and the
// model defaults); throws naming the value for anything else. Reads no file.
std::string task_family(const std::string& name);

// The defaults of a task (docs/protocol.md §4): model shape, training length
// and, for the char-LM, the batch stream. Plans, tables, the benchmark and
// --help read them here.
struct TaskDefaults {
  int64_t depth;    // transformer blocks
  int64_t d_model;  // residual width
  int64_t heads;    // attention heads
  int64_t steps;    // training steps
  int64_t ctx;      // char-LM context length
  int64_t batch;    // char-LM windows per step
};
// Throws like task_family for an unknown task.
const TaskDefaults& task_defaults(const std::string& name);

// The MLP's hidden width when none is given: 4 x d_model (256 for the
// mod-47 model, as the paper has it).
inline int64_t default_mlp(int64_t d_model) {
  return 4 * d_model;
}

}  // namespace data
