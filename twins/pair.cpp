#include "twins/pair.h"

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <thread>

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

void check_task(const PairSpec& spec) { make_task(spec, torch::kCPU); }

// ---------------------------------------------------------------------------
// Pair

// One copy of the pair: its model, optimizer and unread losses.
struct Pair::Copy {
  model::Transformer model{nullptr};
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> pending;  // detached losses since the last read
  std::vector<double> losses;          // every step's loss, read back

  void step(const data::Batch& batch) {
    // Gradients are reset to undefined (not zeroed) so that backward
    // writes them fresh; the same behaviour on LibTorch 1.13 and 2.x.
    for (auto& p : params) p.mutable_grad().reset();
    torch::Tensor loss = model::cross_entropy(model->forward(batch.x), batch.y);
    loss.backward();
    opt->step();
    pending.push_back(loss.detach());
  }

  // Steps first+1, first+2, ... on `batches`, each reported to `progress`.
  void train(const std::vector<data::Batch>& batches, int64_t first,
             const Progress& progress) {
    for (size_t i = 0; i < batches.size(); ++i) {
      step(batches[i]);
      if (progress) progress(first + 1 + static_cast<int64_t>(i));
    }
  }

  // Appends the pending losses to `losses`; returns the first non-finite
  // step (1-based) among them, or -1.
  int64_t read_losses() {
    if (pending.empty()) return -1;
    torch::Tensor l = torch::stack(pending).to(torch::kCPU, torch::kDouble);
    pending.clear();
    int64_t bad = -1;
    const double* v = l.data_ptr<double>();
    for (int64_t i = 0; i < l.numel(); ++i) {
      losses.push_back(v[i]);
      if (bad < 0 && !std::isfinite(v[i])) {
        bad = static_cast<int64_t>(losses.size());
      }
    }
    return bad;
  }
};

Pair::Pair(const PairSpec& spec, bool concurrent_copies)
    : spec_(spec), concurrent_(concurrent_copies) {
  TORCH_CHECK(spec.steps >= 1, "Invalid steps: ", spec.steps,
              " (must be >= 1)");
  configure_determinism();
  const torch::Device device = resolve_device(spec.device);
  task_ = make_task(spec, device);
  const model::ModelConfig cfg = model_config(spec, task_->shape());
  // Build once, copy twice: both copies start from the same base weights.
  model::Transformer base =
      model::build(cfg, spec.init_seed, spec.dtype, device);
  for (int i = 0; i < 2; ++i) {
    auto c = std::make_unique<Copy>();
    c->model = model::build(cfg, spec.init_seed, spec.dtype, device);
    model::copy_parameters(base, c->model);
    if (i == 1) {
      apply_twin(c->model, spec.twin, spec.twin_seed, spec.noise_scale);
    }
    c->params = c->model->parameters();
    c->opt = optim::make_optimizer(
        spec.opt,
        {c->model->matrix_parameters(), c->model->other_parameters()},
        spec.lr);
    copies_.push_back(std::move(c));
  }
}

Pair::~Pair() = default;

void Pair::train_to(int64_t to, const Progress& progress) {
  TORCH_CHECK(to >= done_ && to <= spec_.steps, "train_to: step ", to,
              " outside ", done_, "..", spec_.steps);
  std::vector<data::Batch> batches;  // the very same tensors for both
  for (int64_t s = done_ + 1; s <= to; ++s) {
    batches.push_back(task_->train_batch(s));
  }
  if (!concurrent_) {
    copies_[0]->train(batches, done_, {});
    copies_[1]->train(batches, done_, progress);
  } else {
    // Copy 0 on a worker thread, copy 1 (and the progress) here.
    std::exception_ptr error;
    std::thread worker([&] {
      try {
        copies_[0]->train(batches, done_, {});
      } catch (...) {
        error = std::current_exception();
      }
    });
    try {
      copies_[1]->train(batches, done_, progress);
    } catch (...) {
      worker.join();
      throw;
    }
    worker.join();
    if (error) std::rethrow_exception(error);
  }
  done_ = to;
}

int64_t Pair::check_losses() {
  int64_t bad = -1;
  for (auto& c : copies_) {
    const int64_t b = c->read_losses();
    if (b > 0 && (bad < 0 || b < bad)) bad = b;
  }
  return bad;
}

CurvePoint Pair::measure() {
  CurvePoint c = twins::measure(copies_[0]->model, copies_[1]->model, *task_,
                                done_);
  if (done_ > 0 && static_cast<int64_t>(losses(0).size()) >= done_) {
    c.train_loss = {losses(0)[done_ - 1], losses(1)[done_ - 1]};
  }
  return c;
}

const std::vector<double>& Pair::losses(int i) const {
  return copies_.at(i)->losses;
}

model::Transformer& Pair::model(int i) { return copies_.at(i)->model; }

// ---------------------------------------------------------------------------
// run_pair

PairResult run_pair(const PairSpec& spec, const Progress& progress,
                    bool concurrent_copies) {
  const auto t0 = std::chrono::steady_clock::now();
  Pair pair(spec, concurrent_copies);
  PairResult r;
  r.spec = spec;
  r.torch_version = TORCH_VERSION;
  const std::vector<int64_t> checkpoints = checkpoint_steps(spec.steps);
  size_t next = 0;  // the next checkpoint
  if (checkpoints[0] == 0) {
    r.curve.push_back(pair.measure());
    ++next;
  }
  // Segments end at checkpoints and every kSyncEvery steps; the losses are
  // read back (and checked) only there.
  while (pair.done() < spec.steps) {
    pair.train_to(std::min((pair.done() / kSyncEvery + 1) * kSyncEvery,
                           checkpoints[next]),
                  progress);
    const int64_t bad = pair.check_losses();
    if (bad > 0) {
      r.status = "diverged";
      r.diverged_step = bad;
      break;
    }
    if (pair.done() == checkpoints[next]) {
      r.curve.push_back(pair.measure());
      ++next;
    }
  }
  // Final state: the last checkpoint, or a fresh measurement after a
  // divergence (then mostly NaN, recorded as null).
  const CurvePoint last = r.status == "ok" ? r.curve.back() : pair.measure();
  r.val_acc = last.val_acc;
  r.val_loss = last.val_loss;
  for (int i = 0; i < 2; ++i) {
    r.train_loss[i] =
        pair.losses(i).empty() ? std::nan("") : pair.losses(i).back();
  }
  r.qk_per_head = qk_drift_per_head(pair.model(0), pair.model(1));
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                           t0)
                 .count();
  return r;
}

}  // namespace twins
