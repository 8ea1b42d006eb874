#include "twins/pair.h"

#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <exception>
#include <memory>
#include <thread>

#include "data/task.h"
#include "model/loss.h"
#include "model/transformer.h"
#include "optim/registry.h"
#include "twins/device.h"
#include "twins/gauge.h"

namespace twins {

namespace {

// Losses are read back (a host synchronisation on CUDA) only at checkpoints
// and every kSyncEvery steps, to catch a non-finite loss early.
constexpr int64_t kSyncEvery = 50;

// One copy of the pair: its model, optimizer and unread losses.
struct Copy {
  model::Transformer model{nullptr};
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> pending;  // detached losses since the last read
  std::vector<double> losses;          // every step's loss, read back
};

Copy make_copy(const model::Transformer& base, const model::ModelConfig& cfg,
               const PairSpec& spec, const torch::Device& device) {
  Copy c;
  c.model = model::build(cfg, spec.init_seed, spec.dtype, device);
  model::copy_parameters(base, c.model);
  c.params = c.model->parameters();
  return c;
}

void attach_optimizer(Copy& c, const PairSpec& spec) {
  optim::ParamSplit split{c.model->matrix_parameters(),
                          c.model->other_parameters()};
  c.opt = optim::make_optimizer(spec.opt, split, spec.lr);
}

void train_step(Copy& c, const data::Batch& batch) {
  // Gradients are reset to undefined (not zeroed) so that backward writes
  // them fresh; the same behaviour on LibTorch 1.13 and 2.x.
  for (auto& p : c.params) p.mutable_grad().reset();
  torch::Tensor loss = model::cross_entropy(c.model->forward(batch.x), batch.y);
  loss.backward();
  c.opt->step();
  c.pending.push_back(loss.detach());
}

// Reads back pending losses; returns the first step (1-based) whose loss is
// not finite, or -1.
int64_t read_losses(Copy& c) {
  if (c.pending.empty()) return -1;
  torch::Tensor l = torch::stack(c.pending).to(torch::kCPU, torch::kDouble);
  c.pending.clear();
  int64_t bad = -1;
  const double* v = l.data_ptr<double>();
  for (int64_t i = 0; i < l.numel(); ++i) {
    c.losses.push_back(v[i]);
    if (bad < 0 && !std::isfinite(v[i])) {
      bad = static_cast<int64_t>(c.losses.size());
    }
  }
  return bad;
}

model::ModelConfig model_config(const PairSpec& spec,
                                 const data::TaskShape& shape) {
  model::ModelConfig cfg;
  cfg.vocab_in = shape.vocab_in;
  cfg.vocab_out = shape.vocab_out;
  cfg.n_ctx = shape.n_ctx;
  cfg.causal = shape.causal;
  cfg.last_only = shape.last_only;
  cfg.depth = spec.depth;
  cfg.d_model = spec.d_model;
  cfg.heads = spec.heads;
  cfg.mlp = spec.mlp;
  cfg.validate();
  return cfg;
}

}  // namespace

std::unique_ptr<data::Task> make_task(const PairSpec& spec,
                                      const torch::Device& device) {
  data::TaskOptions topt;
  topt.name = spec.task;
  topt.data_seed = spec.data_seed;
  topt.device = device;
  topt.corpus = spec.corpus;
  topt.ctx = spec.ctx;
  topt.batch = spec.batch;
  topt.steps = spec.steps;
  return data::make_task(topt);
}

void check_task(const PairSpec& spec) {
  make_task(spec, torch::kCPU);
}

namespace {

// Trains `c` on `batches` (steps first+1, first+2, ...), reporting each
// step to `progress` when given.
void train_segment(Copy& c, const std::vector<data::Batch>& batches,
                   int64_t first, const Progress& progress) {
  for (size_t i = 0; i < batches.size(); ++i) {
    train_step(c, batches[i]);
    if (progress) progress(first + 1 + static_cast<int64_t>(i));
  }
}

// Both copies through one segment: sequentially, or copy 0 on a worker
// thread while copy 1 runs here. Each copy's op sequence is the same either
// way, so the numbers are too.
void train_both(Copy (&copies)[2], const std::vector<data::Batch>& batches,
                int64_t first, const Progress& progress, bool concurrent) {
  if (!concurrent) {
    train_segment(copies[0], batches, first, {});
    train_segment(copies[1], batches, first, progress);
    return;
  }
  std::exception_ptr error;
  std::thread worker([&] {
    try {
      train_segment(copies[0], batches, first, {});
    } catch (...) {
      error = std::current_exception();
    }
  });
  try {
    train_segment(copies[1], batches, first, progress);
  } catch (...) {
    worker.join();
    throw;
  }
  worker.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

PairResult run_pair(const PairSpec& spec, const Progress& progress,
                    bool concurrent_copies) {
  const auto t0 = std::chrono::steady_clock::now();
  TORCH_CHECK(spec.steps >= 1, "Invalid steps: ", spec.steps,
              " (must be >= 1)");
  configure_determinism();
  const torch::Device device = resolve_device(spec.device);
  std::unique_ptr<data::Task> task = make_task(spec, device);
  const model::ModelConfig cfg = model_config(spec, task->shape());

  // Build once, copy twice: both copies start from the same base weights.
  model::Transformer base =
      model::build(cfg, spec.init_seed, spec.dtype, device);
  Copy copies[2] = {make_copy(base, cfg, spec, device),
                    make_copy(base, cfg, spec, device)};
  apply_twin(copies[1].model, spec.twin, spec.twin_seed, spec.noise_scale);
  for (auto& c : copies) attach_optimizer(c, spec);

  PairResult r;
  r.spec = spec;
  r.torch_version = TORCH_VERSION;
  const std::vector<int64_t> checkpoints = checkpoint_steps(spec.steps);
  size_t next_checkpoint = 0;
  if (checkpoints[0] == 0) {
    r.curve.push_back(measure(copies[0].model, copies[1].model, *task, 0));
    ++next_checkpoint;
  }
  // Segments end at checkpoints and every kSyncEvery steps; the losses are
  // read back (and checked) only there.
  int64_t t = 0;
  while (t < spec.steps) {
    const int64_t end = std::min((t / kSyncEvery + 1) * kSyncEvery,
                                 checkpoints[next_checkpoint]);
    std::vector<data::Batch> batches;  // the very same tensors for both
    for (int64_t s = t + 1; s <= end; ++s) {
      batches.push_back(task->train_batch(s));
    }
    train_both(copies, batches, t, progress, concurrent_copies);
    t = end;
    int64_t bad = -1;
    for (auto& c : copies) {
      const int64_t b = read_losses(c);
      if (b > 0 && (bad < 0 || b < bad)) bad = b;
    }
    if (bad > 0) {
      r.status = "diverged";
      r.diverged_step = bad;
      break;
    }
    if (t == checkpoints[next_checkpoint]) {
      CurvePoint c = measure(copies[0].model, copies[1].model, *task, t);
      c.train_loss = {copies[0].losses[t - 1], copies[1].losses[t - 1]};
      r.curve.push_back(c);
      ++next_checkpoint;
    }
  }

  // Final state: the last checkpoint, or a fresh measurement after a
  // divergence (then mostly NaN, recorded as null).
  CurvePoint last = r.status == "ok"
                        ? r.curve.back()
                        : measure(copies[0].model, copies[1].model, *task,
                                  r.diverged_step);
  r.val_acc = last.val_acc;
  r.val_loss = last.val_loss;
  for (int i = 0; i < 2; ++i) {
    r.train_loss[i] = copies[i].losses.empty() ? std::nan("")
                                               : copies[i].losses.back();
  }
  r.qk_per_head = qk_drift_per_head(copies[0].model, copies[1].model);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                           t0)
                 .count();
  return r;
}

}  // namespace twins
