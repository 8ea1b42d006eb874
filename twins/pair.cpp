#include "twins/pair.h"

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "model/loss.h"
#include "twins/device.h"
#include "twins/environment.h"
#include "twins/gauge.h"
#include "twins/merge.h"
#include "twins/record.h"

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
  size_t checked = 0;  // losses checked for divergence (read_losses)

  Copy(model::Transformer m, const PairSpec& spec) : model(std::move(m)) {
    params = model->parameters();
    opt = optim::make_optimizer(spec.opt, param_split(model), spec.lr);
  }

  // The loss of `batch` with its gradients written fresh: reset to
  // undefined (not zeroed), the same behaviour on LibTorch 1.13 and 2.x.
  torch::Tensor evaluate(const data::Batch& batch) {
    for (auto& p : params)
      p.mutable_grad().reset();
    torch::Tensor loss = model::cross_entropy(model->forward(batch.x), batch.y);
    loss.backward();
    return loss.detach();
  }

  // Where the parameters and their gradients are: each one's version
  // counter and its gradient's identity and version.
  std::vector<int64_t> versions() const {
    std::vector<int64_t> v;
    for (const auto& p : params) {
      const torch::Tensor& g = p.grad();
      v.push_back(static_cast<int64_t>(p._version()));
      v.push_back(g.defined() ? reinterpret_cast<intptr_t>(
                                    g.unsafeGetTensorImpl())
                              : 0);
      v.push_back(g.defined() ? static_cast<int64_t>(g._version()) : -1);
    }
    return v;
  }

  void step(const data::Batch& batch) {
    const torch::Tensor loss = evaluate(batch);
    // The closure a rule may call (the SAM family and L-BFGS evaluate the
    // loss where they have moved the parameters): this batch's loss and
    // gradients at the parameters as they are. While neither parameters
    // nor gradients have changed since the evaluation above, that would
    // reproduce its gradients bit for bit, so its loss is returned as is.
    const std::vector<int64_t> evaluated = versions();
    opt->step([&]() -> torch::Tensor {
      if (versions() == evaluated)
        return loss;
      torch::AutoGradMode enable_grad(true);
      return evaluate(batch);
    });
    pending.push_back(loss);
  }

  // The rule's evaluation weights (schedule-free rules), or none.
  optim::EvaluationWeights* evaluation_weights() const {
    auto* w = dynamic_cast<optim::EvaluationWeights*>(opt.get());
    return w && w->has_evaluation_weights() ? w : nullptr;
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

  // Appends the pending losses to `losses`, unchecked.
  void flush() {
    if (pending.empty())
      return;
    torch::Tensor l = torch::stack(pending).to(torch::kCPU, torch::kDouble);
    pending.clear();
    const double* v = l.data_ptr<double>();
    losses.insert(losses.end(), v, v + l.numel());
  }

  // Reads back the pending losses; returns the first non-finite step
  // (1-based) among those not checked before, or -1.
  int64_t read_losses() {
    flush();
    int64_t bad = -1;
    for (size_t i = checked; i < losses.size() && bad < 0; ++i) {
      if (!std::isfinite(losses[i]))
        bad = static_cast<int64_t>(i) + 1;
    }
    checked = losses.size();
    return bad;
  }

  // The weights (by position: the build fixes the order), the optimizer's
  // state and the losses.
  void save(torch::serialize::OutputArchive& a) {
    flush();
    torch::serialize::OutputArchive weights, state;
    for (size_t i = 0; i < params.size(); ++i)
      weights.write(fmt::format("p{}", i), params[i].detach());
    opt->save(state);
    a.write("weights", weights);
    a.write("optimizer", state);
    a.write("losses", torch::tensor(losses, torch::kDouble));
    a.write("checked", torch::tensor(static_cast<int64_t>(checked)));
  }

  void load(torch::serialize::InputArchive& a, int64_t step) {
    torch::serialize::InputArchive weights, state;
    a.read("weights", weights);
    a.read("optimizer", state);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      torch::Tensor w;
      weights.read(fmt::format("p{}", i), w);
      TORCH_CHECK(w.sizes() == params[i].sizes() &&
                      w.scalar_type() == params[i].scalar_type(),
                  "parameter ", i, " is ", w.sizes(), " ", w.scalar_type(),
                  " in the checkpoint, ", params[i].sizes(), " ",
                  params[i].scalar_type(), " here");
      params[i].copy_(w);
    }
    opt->load(state);
    torch::Tensor l, c;
    a.read("losses", l);
    a.read("checked", c);
    l = l.to(torch::kDouble).contiguous();
    TORCH_CHECK(l.numel() == step, "the checkpoint holds ", l.numel(),
                " losses for step ", step);
    losses.assign(l.data_ptr<double>(), l.data_ptr<double>() + l.numel());
    checked = static_cast<size_t>(c.item<int64_t>());
    pending.clear();
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

void Lockstep::to_evaluation() {
  for_each_copy([](Copy& c) {
    if (auto* w = c.evaluation_weights())
      w->to_evaluation();
  });
}

void Lockstep::to_training() {
  for_each_copy([](Copy& c) {
    if (auto* w = c.evaluation_weights())
      w->to_training();
  });
}

void Lockstep::for_each_copy(const std::function<void(Copy&)>& f) {
  f(*reference_);
  for (auto& t : twins_) {
    if (t)
      f(*t);
  }
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

void Lockstep::save_state(torch::serialize::OutputArchive& archive) {
  torch::serialize::OutputArchive ref;
  reference_->save(ref);
  archive.write("reference", ref);
  for (size_t i = 0; i < twins_.size(); ++i) {
    if (!twins_[i])
      continue;
    torch::serialize::OutputArchive t;
    twins_[i]->save(t);
    archive.write(fmt::format("twin{}", i), t);
  }
}

void Lockstep::load_state(torch::serialize::InputArchive& archive,
                          const std::vector<size_t>& source, int64_t step) {
  TORCH_CHECK(source.size() == twins_.size(), "load_state: ", source.size(),
              " sources for ", twins_.size(), " twins");
  TORCH_CHECK(step >= 0 && step <= specs_.front().steps, "load_state: step ",
              step, " outside 0..", specs_.front().steps);
  torch::serialize::InputArchive ref;
  archive.read("reference", ref);
  reference_->load(ref, step);
  for (size_t i = 0; i < twins_.size(); ++i) {
    TORCH_CHECK(twins_[i], "load_state: twin ", i, " is retired");
    torch::serialize::InputArchive t;
    archive.read(fmt::format("twin{}", source[i]), t);
    twins_[i]->load(t, step);
  }
  done_ = step;
}

// ---------------------------------------------------------------------------
// run_group

namespace {

// Thrown by GroupRun::resume when StatePolicy::restart removed an unusable
// state file: run_group builds the group anew, so that nothing a half-read
// file put into its models, optimizers or curves survives.
struct StartAfresh {};

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
      results_[i].numeric_env = numeric_env(specs[i].device);
      results_[i].group_pairs = static_cast<int>(specs.size());
      // A gauge twin's merge is also compared with the rotation that made
      // it (docs/protocol.md §9).
      if (!merge_at_.empty())
        gauges_[i] = twin_gauge(specs[i]);
    }
  }

  std::vector<PairResult> run() {
    if (!resume() && checkpoints_[next_] == 0)
      checkpoint();
    last_save_ = {group_.done(), Clock::now()};
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
  // With a state file the segment is trained step by step, and before each
  // step the state is written when it is due or a stop is requested: the
  // state between two steps of a segment, or at its start (after the
  // previous segment's checks and measurements), is all a resumed group
  // needs to run the same segments, checks and measurements as a group
  // run straight through.
  void train_segment() {
    const int64_t sync = (group_.done() / kSyncEvery + 1) * kSyncEvery;
    const int64_t end = std::min(sync, checkpoints_[next_]);
    if (options_.state_file.empty()) {
      group_.train_to(end, options_.progress);
      return;
    }
    while (group_.done() < end) {
      between_steps();
      group_.train_to(group_.done() + 1, options_.progress);
    }
  }

  void between_steps() {
    if (const int signal = stop_requested()) {
      const int64_t step = group_.done();
      if (step > 0 && step > saved_step_)
        save_state();
      throw Stopped(
          signal,
          saved_step_ < 0
              ? fmt::format("{}: group '{}' stopped before its first step; "
                            "nothing to save",
                            signal_name(signal), group_label())
              : fmt::format("{}: group '{}' stopped at step {} of {}; its "
                            "state is in {}",
                            signal_name(signal), group_label(), step, steps_,
                            options_.state_file));
    }
    const StatePolicy& p = options_.state;
    const bool by_steps =
        p.every_steps > 0 && group_.done() - last_save_.step >= p.every_steps;
    const bool by_time =
        p.every_seconds > 0 &&
        std::chrono::duration<double>(Clock::now() - last_save_.time)
                .count() >= p.every_seconds;
    if ((by_steps || by_time) && group_.done() > saved_step_)
      save_state();
  }

  std::string group_label() const {
    const PairSpec& s = group_.spec(0);
    return fmt::format("{} (init {})", s.opt, s.init_seed);
  }

  // The header's pairs: every live twin's key, in the group's order.
  nlohmann::json live_keys() const {
    nlohmann::json keys = nlohmann::json::array();
    for (size_t i = 0; i < group_.twins(); ++i) {
      if (group_.live(i))
        keys.push_back(group_.spec(i).key());
    }
    return keys;
  }

  void save_state() {
    const auto start = Clock::now();
    torch::serialize::OutputArchive archive;
    group_.save_state(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    nlohmann::json h;
    h["group"] = group_state_key(group_.spec(0));
    h["step"] = group_.done();
    h["next_checkpoint"] = next_;
    h["elapsed_s"] = seconds();
    h["torch_version"] = TORCH_VERSION;
    h["numeric_env"] = to_json(numeric_env(group_.spec(0).device));
    h["pairs"] = live_keys();
    nlohmann::json partial = nlohmann::json::array();
    for (size_t i = 0; i < group_.twins(); ++i) {
      if (!group_.live(i))
        continue;
      const nlohmann::json record = to_json(results_[i]);
      partial.push_back(
          {{"curve", record.at("curve")},
           {"merges", record.value("merge", nlohmann::json::array())},
           {"twin", i}});
    }
    h["partial"] = partial;
    const std::string payload = bytes.str();
    write_state_file(options_.state_file, h, payload);
    saved_step_ = group_.done();
    last_save_ = {group_.done(), Clock::now()};
    if (options_.note) {
      options_.note(fmt::format(
          "group '{}': checkpoint at step {} ({:.1f} MB in {:.2f} s): {}",
          group_label(), saved_step_, payload.size() / 1e6,
          std::chrono::duration<double>(last_save_.time - start).count(),
          options_.state_file));
    }
  }

  // Resumes from the state file when there is one; false when the group
  // starts at step 0. A file that cannot be used is an error, or with
  // StatePolicy::restart removed with a note (then StartAfresh).
  bool resume() {
    const std::string& path = options_.state_file;
    std::error_code ec;
    if (path.empty() || !std::filesystem::exists(path, ec))
      return false;
    try {
      load(read_state_file(path));
    } catch (const std::exception& e) {
      if (!options_.state.restart)
        throw;
      std::filesystem::remove(path, ec);
      if (options_.note) {
        const std::string why = e.what();
        options_.note(fmt::format(
            "{} (removed: --checkpoint-restart; group '{}' starts at step 0)",
            why.substr(0, why.find('\n')), group_label()));
      }
      throw StartAfresh{};
    }
    if (options_.note) {
      options_.note(fmt::format("group '{}': resumed at step {} from {}",
                                group_label(), group_.done(), path));
    }
    return true;
  }

  void load(const StateFile& f) {
    const std::string& path = options_.state_file;
    const nlohmann::json& h = f.header;
    const std::string want = group_state_key(group_.spec(0));
    const std::string have = h.value("group", std::string());
    TORCH_CHECK(have == want, "checkpoint '", path,
                "' was written for another configuration ('", have,
                "'; this run: '", want,
                "'); rerun with --checkpoint-restart to start the group "
                "afresh");
    // Steps from another kind of machine would make the pair's bits a mix
    // of two environments (docs/output-format.md, "What is reproducible
    // across machines").
    const std::string env = environment_difference(
        numeric_env_from_json(h.value("numeric_env", nlohmann::json::object())),
        numeric_env(group_.spec(0).device));
    TORCH_CHECK(env.empty(), "checkpoint '", path,
                "' was written under another numeric environment (", env,
                ": checkpoint vs this process); resume it on the same kind "
                "of node, or with the --portable-kernels it was written "
                "with, or rerun with --checkpoint-restart");
    const auto& keys = h.at("pairs");
    const auto& partial = h.at("partial");
    std::vector<size_t> source;
    for (size_t i = 0; i < group_.twins(); ++i) {
      const std::string key = group_.spec(i).key();
      auto it = std::find(keys.begin(), keys.end(), key);
      TORCH_CHECK(it != keys.end(), "checkpoint '", path,
                  "' does not hold pair '", pair_label(group_.spec(i)),
                  "' of this group; rerun with --checkpoint-restart to start "
                  "the group afresh");
      const auto& p = partial.at(static_cast<size_t>(it - keys.begin()));
      source.push_back(p.at("twin").get<size_t>());
      nlohmann::json record = to_json(results_[i]);
      record["curve"] = p.at("curve");
      if (!p.at("merges").empty())
        record["merge"] = p.at("merges");
      const PairResult back = from_json(record);
      results_[i].curve = back.curve;
      results_[i].merges = back.merges;
    }
    const int64_t step = h.at("step").get<int64_t>();
    torch::serialize::InputArchive archive;
    try {
      archive.load_from(f.payload.data(), f.payload.size());
      group_.load_state(archive, source, step);
    } catch (const c10::Error& e) {
      const std::string why = e.what_without_backtrace();
      TORCH_CHECK(false, "checkpoint '", path, "' does not fit this group: ",
                  why.substr(0, why.find('\n')),
                  " (rerun with --checkpoint-restart to start it afresh)");
    }
    next_ = h.at("next_checkpoint").get<size_t>();
    TORCH_CHECK(next_ < checkpoints_.size() && checkpoints_[next_] > step &&
                    (next_ == 0 || checkpoints_[next_ - 1] <= step),
                "checkpoint '", path, "' is damaged: step ", step,
                " with next measurement ", next_);
    resumed_s_ = h.value("elapsed_s", 0.0);
    saved_step_ = step;
  }

  double seconds() const {
    return resumed_s_ +
           std::chrono::duration<double>(Clock::now() - t0_).count();
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
  // The measurements of a checkpoint, on the weights each rule evaluates
  // with (schedule-free rules swap theirs in and back once, for the whole
  // group: docs/protocol.md §6).
  void checkpoint() {
    group_.to_evaluation();
    measure_all();
    group_.to_training();
    ++next_;
  }

  void measure_all() {
    const Evaluation ref = group_.evaluate_reference();
    const bool merge = std::find(merge_at_.begin(), merge_at_.end(),
                                 group_.done()) != merge_at_.end();
    for (size_t i = 0; i < group_.twins(); ++i) {
      if (!group_.live(i))
        continue;
      const CurvePoint c = group_.measure(i, &ref);
      if (overflowed(c)) {
        // Finite losses from weights past the float range (a learning
        // rate of 1e30): the pair has diverged as surely as with a
        // non-finite loss (docs/output-format.md, `status`).
        results_[i].status = PairStatus::kDiverged;
        results_[i].diverged_step = group_.done();
        finish(i, c);
        continue;
      }
      results_[i].curve.push_back(c);
      if (merge) {
        results_[i].merges.push_back(measure_merge(
            group_.reference(), group_.twin(i), group_.task(), group_.done(),
            gauges_[i].empty() ? nullptr : &gauges_[i]));
      }
    }
  }

  // A measurement no finite pair of models gives: the drifts and losses
  // are finite for any weights whose norms fit the float range.
  static bool overflowed(const CurvePoint& c) {
    for (double v : {c.logit_drift, c.qk_drift_mean, c.qk_drift_max,
                     c.val_loss[0], c.val_loss[1]}) {
      if (!std::isfinite(v))
        return true;
    }
    return false;
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
    r.wall_s = seconds();
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
  // The state file: the step it holds (-1: none), the last write, and the
  // seconds the group had run when it was written (wall_s goes on from
  // there).
  int64_t saved_step_ = -1;
  struct {
    int64_t step;
    Clock::time_point time;
  } last_save_{0, Clock::now()};
  double resumed_s_ = 0;
};

}  // namespace

std::vector<PairResult> run_group(const std::vector<PairSpec>& specs,
                                  const GroupOptions& options) {
  TORCH_CHECK(!specs.empty(), "Lockstep: no pairs");
  try {
    return GroupRun(specs, options).run();
  } catch (const StartAfresh&) {
    return GroupRun(specs, options).run();  // its file is gone: step 0
  }
}

PairResult run_pair(const PairSpec& spec, const Progress& progress,
                    int threads) {
  GroupOptions o;
  o.threads = threads;
  o.progress = progress;
  return run_group({spec}, o)[0];
}

}  // namespace twins
