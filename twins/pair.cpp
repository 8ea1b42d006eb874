#include "twins/pair.h"

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "model/loss.h"
#include "twins/device.h"
#include "twins/gauge.h"
#include "twins/merge.h"

namespace twins {

namespace {

// Losses are read back (a host synchronisation on CUDA) only at checkpoints
// and every kSyncEvery steps, to catch a non-finite loss early.
constexpr int64_t kSyncEvery = 50;

using Clock = std::chrono::steady_clock;

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

optim::ParamSplit param_split(const model::Transformer& m) {
  using optim::Role;
  optim::ParamSplit split;
  split.matrices = m->matrix_parameters();
  split.others = m->other_parameters();
  // Each parameter's role, matched by identity so that the lists' order
  // need not be known here.
  std::vector<std::pair<torch::Tensor, optim::ParamRole>> roles = {
      {m->tok_emb, {Role::kEmbedding}},
      {m->pos_emb, {Role::kPositional}},
      {m->norm_f->gain, {Role::kGain}},
      {m->head->weight, {Role::kHead}}};
  for (size_t l = 0; l < m->blocks.size(); ++l) {
    const auto& b = m->blocks[l];
    const auto layer = static_cast<int64_t>(l);
    split.qk.push_back(b->attn->wq->weight);
    split.qk.push_back(b->attn->wk->weight);
    const std::pair<torch::Tensor, Role> in_block[] = {
        {b->attn->wq->weight, Role::kWq}, {b->attn->wk->weight, Role::kWk},
        {b->attn->wv->weight, Role::kWv}, {b->attn->wo->weight, Role::kWo},
        {b->w1->weight, Role::kW1},       {b->w2->weight, Role::kW2},
        {b->norm1->gain, Role::kGain},    {b->norm2->gain, Role::kGain}};
    for (const auto& [w, role] : in_block) {
      roles.push_back({w, {role, layer}});
    }
  }
  for (const auto& p : split.all()) {
    auto it = std::find_if(roles.begin(), roles.end(), [&](const auto& r) {
      return r.first.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
    });
    TORCH_CHECK(it != roles.end(), "param_split: a parameter of shape ",
                p.sizes(), " has no role");
    split.roles.push_back(it->second);
  }
  split.heads = m->config().heads;
  return split;
}

// ---------------------------------------------------------------------------
// Copy: one model with its optimizer and unread losses.

struct Lockstep::Copy {
  model::Transformer model{nullptr};
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> pending;  // detached losses since the last read
  std::vector<double> losses;          // every step's loss, read back

  Copy(model::Transformer m, const PairSpec& spec) : model(std::move(m)) {
    params = model->parameters();
    opt = optim::make_optimizer(spec.opt, param_split(model), spec.lr);
  }

  void step(const data::Batch& batch) {
    // Gradients are reset to undefined (not zeroed) so that backward
    // writes them fresh; the same behaviour on LibTorch 1.13 and 2.x.
    for (auto& p : params)
      p.mutable_grad().reset();
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
      if (progress)
        progress(first + 1 + static_cast<int64_t>(i));
    }
  }

  // Appends the pending losses to `losses`; returns the first non-finite
  // step (1-based) among them, or -1.
  int64_t read_losses() {
    if (pending.empty())
      return -1;
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

// ---------------------------------------------------------------------------
// Lockstep

Lockstep::Lockstep(std::vector<PairSpec> specs, int threads)
    : specs_(std::move(specs)), threads_(std::max(1, threads)) {
  TORCH_CHECK(!specs_.empty(), "Lockstep: no pairs");
  const PairSpec& first = specs_.front();
  for (const auto& s : specs_) {
    TORCH_CHECK(s.reference_key() == first.reference_key(), "Lockstep: pairs '",
                pair_label(first), "' and '", pair_label(s),
                "' do not share copy 1");
  }
  TORCH_CHECK(first.steps >= 1, "Invalid steps: ", first.steps,
              " (must be >= 1)");
  configure_determinism();
  const torch::Device device = resolve_device(first.device);
  task_ = make_task(first, device);
  const model::ModelConfig cfg = model_config(first, task_->shape());
  // Build once: the base model is the reference, every twin a copy of it.
  model::Transformer base = model::build(cfg, first.init_seed, first.dtype,
                                         device, model_init(first.protocol));
  for (const auto& s : specs_) {
    model::Transformer m = model::build(cfg, s.init_seed, s.dtype, device);
    model::copy_parameters(base, m);
    apply_twin(m, s.twin, s.twin_seed, s.noise_scale, draw_dtype(s.protocol));
    twins_.push_back(std::make_unique<Copy>(std::move(m), s));
  }
  reference_ = std::make_unique<Copy>(std::move(base), first);
  retired_losses_.resize(specs_.size());
}

Lockstep::~Lockstep() = default;

size_t Lockstep::twins() const {
  return twins_.size();
}

bool Lockstep::live(size_t twin) const {
  return twins_.at(twin) != nullptr;
}

void Lockstep::retire(size_t twin) {
  TORCH_CHECK(live(twin), "Lockstep: twin ", twin, " already retired");
  retired_losses_[twin] = twins_[twin]->losses;
  twins_[twin].reset();
}

model::Transformer& Lockstep::reference() {
  return reference_->model;
}

model::Transformer& Lockstep::twin(size_t i) {
  TORCH_CHECK(live(i), "Lockstep: twin ", i, " is retired");
  return twins_[i]->model;
}

const std::vector<double>& Lockstep::reference_losses() const {
  return reference_->losses;
}

const std::vector<double>& Lockstep::twin_losses(size_t i) const {
  return twins_.at(i) ? twins_[i]->losses : retired_losses_.at(i);
}

void Lockstep::train_to(int64_t to, const Progress& progress) {
  TORCH_CHECK(to >= done_ && to <= specs_.front().steps, "train_to: step ", to,
              " outside ", done_, "..", specs_.front().steps);
  std::vector<data::Batch> batches;  // the very same tensors for every copy
  for (int64_t s = done_ + 1; s <= to; ++s) {
    batches.push_back(task_->train_batch(s));
  }
  std::vector<Copy*> copies{reference_.get()};
  for (auto& t : twins_) {
    if (t)
      copies.push_back(t.get());
  }
  // One model per worker, the reference's steps reported to `progress`.
  run_on_threads(copies.size(), static_cast<size_t>(threads_),
                 [&](size_t i, size_t) {
                   copies[i]->train(batches, done_,
                                    i == 0 ? progress : Progress{});
                 });
  done_ = to;
}

std::vector<int64_t> Lockstep::check_losses() {
  const int64_t ref = reference_->read_losses();
  std::vector<int64_t> out(twins_.size(), -1);
  for (size_t i = 0; i < twins_.size(); ++i) {
    if (!twins_[i])
      continue;
    const int64_t own = twins_[i]->read_losses();
    int64_t bad = ref;
    if (own > 0 && (bad < 0 || own < bad))
      bad = own;
    out[i] = bad;
  }
  return out;
}

Evaluation Lockstep::evaluate_reference() {
  return evaluate(reference_->model, *task_);
}

CurvePoint Lockstep::measure(size_t i, const Evaluation* reference) {
  TORCH_CHECK(live(i), "Lockstep: twin ", i, " is retired");
  const Evaluation ref = reference ? *reference : evaluate_reference();
  const Evaluation own = evaluate(twins_[i]->model, *task_);
  CurvePoint c = compare(ref, reference_->model, own, twins_[i]->model, done_);
  const auto& l1 = reference_->losses;
  const auto& l2 = twins_[i]->losses;
  if (done_ > 0 && static_cast<int64_t>(l1.size()) >= done_ &&
      static_cast<int64_t>(l2.size()) >= done_) {
    c.train_loss = {l1[done_ - 1], l2[done_ - 1]};
  }
  return c;
}

// ---------------------------------------------------------------------------
// run_group

namespace {

// One group's run through its checkpoints, phase by phase: start (step 0),
// then segments of training, each followed by the divergence check and, at
// a checkpoint, the measurements; finally the pairs still live end.
class GroupRun {
 public:
  GroupRun(const std::vector<PairSpec>& specs, const GroupOptions& options)
      : t0_(Clock::now()),
        options_(options),
        group_(specs, options.threads),
        results_(specs.size()),
        gauges_(specs.size()),
        merge_at_(specs.front().merge_at),
        steps_(specs.front().last_step()),
        checkpoints_(checkpoint_steps(specs.front().steps, merge_at_,
                                      specs.front().stop_after)) {
    for (size_t i = 0; i < specs.size(); ++i) {
      results_[i].spec = specs[i];
      results_[i].torch_version = TORCH_VERSION;
      results_[i].group_pairs = static_cast<int>(specs.size());
      // A gauge twin's merge is also compared with the rotation that made
      // it (docs/protocol.md §9).
      if (!merge_at_.empty())
        gauges_[i] = twin_gauge(specs[i]);
    }
  }

  std::vector<PairResult> run() {
    if (checkpoints_[next_] == 0)
      checkpoint();
    while (group_.done() < steps_ && any_live()) {
      train_segment();
      end_diverged();
      if (!any_live())
        break;
      if (group_.done() == checkpoints_[next_])
        checkpoint();
    }
    for (size_t i = 0; i < group_.twins(); ++i) {
      if (group_.live(i))
        finish(i, results_[i].curve.back());
    }
    return std::move(results_);
  }

 private:
  // Segments end at checkpoints and every kSyncEvery steps; the losses are
  // read back (and checked) only there.
  void train_segment() {
    const int64_t sync = (group_.done() / kSyncEvery + 1) * kSyncEvery;
    group_.train_to(std::min(sync, checkpoints_[next_]), options_.progress);
  }

  // A pair whose copy 1 or copy 2 has a non-finite loss ends here.
  void end_diverged() {
    const std::vector<int64_t> bad = group_.check_losses();
    for (size_t i = 0; i < bad.size(); ++i) {
      if (bad[i] < 0)
        continue;
      results_[i].status = PairStatus::kDiverged;
      results_[i].diverged_step = bad[i];
      finish(i, group_.measure(i));  // mostly NaN, recorded as null
    }
  }

  // Every live twin against the reference (evaluated once), and head
  // merging at the merge steps.
  void checkpoint() {
    const Evaluation ref = group_.evaluate_reference();
    const bool merge = std::find(merge_at_.begin(), merge_at_.end(),
                                 group_.done()) != merge_at_.end();
    for (size_t i = 0; i < group_.twins(); ++i) {
      if (!group_.live(i))
        continue;
      results_[i].curve.push_back(group_.measure(i, &ref));
      if (merge) {
        results_[i].merges.push_back(measure_merge(
            group_.reference(), group_.twin(i), group_.task(), group_.done(),
            gauges_[i].empty() ? nullptr : &gauges_[i]));
      }
    }
    ++next_;
  }

  // The pair's final fields from `last` (its last checkpoint, or a fresh
  // measurement after a divergence), then the caller hears of it.
  void finish(size_t i, const CurvePoint& last) {
    PairResult& r = results_[i];
    r.val_acc = last.val_acc;
    r.val_loss = last.val_loss;
    const auto& l1 = group_.reference_losses();
    const auto& l2 = group_.twin_losses(i);
    r.train_loss = {l1.empty() ? std::nan("") : l1.back(),
                    l2.empty() ? std::nan("") : l2.back()};
    r.qk_per_head = qk_drift_per_head(group_.reference(), group_.twin(i));
    r.wall_s = std::chrono::duration<double>(Clock::now() - t0_).count();
    if (options_.pair_done) {
      options_.pair_done(r, group_.done(), group_.reference(), group_.twin(i));
    }
    group_.retire(i);
  }

  bool any_live() const {
    for (size_t i = 0; i < group_.twins(); ++i) {
      if (group_.live(i))
        return true;
    }
    return false;
  }

  const Clock::time_point t0_;
  const GroupOptions& options_;
  Lockstep group_;
  std::vector<PairResult> results_;
  std::vector<HeadMatrices> gauges_;
  const std::vector<int64_t> merge_at_;
  const int64_t steps_;
  const std::vector<int64_t> checkpoints_;
  size_t next_ = 0;  // the next checkpoint
};

}  // namespace

std::vector<PairResult> run_group(const std::vector<PairSpec>& specs,
                                  const GroupOptions& options) {
  TORCH_CHECK(!specs.empty(), "Lockstep: no pairs");
  return GroupRun(specs, options).run();
}

PairResult run_pair(const PairSpec& spec, const Progress& progress,
                    int threads) {
  GroupOptions o;
  o.threads = threads;
  o.progress = progress;
  return run_group({spec}, o)[0];
}

}  // namespace twins
