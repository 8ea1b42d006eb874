#include "twins/lockstep.h"

#include <algorithm>
#include <cmath>

#include "model/loss.h"
#include "twins/device.h"
#include "twins/gauge.h"
#include "twins/setup.h"

namespace twins {

// ---------------------------------------------------------------------------
// TrainingCopy

TrainingCopy::TrainingCopy(model::Transformer trained, const PairSpec& spec)
    : model(std::move(trained)) {
  parameters = model->parameters();
  optimizer = optim::make_optimizer(spec.opt, param_split(model), spec.lr);
}

torch::Tensor TrainingCopy::evaluate(const data::Batch& batch) {
  for (auto& p : parameters)
    p.mutable_grad().reset();
  torch::Tensor loss = model::cross_entropy(model->forward(batch.x), batch.y);
  loss.backward();
  return loss.detach();
}

std::vector<int64_t> TrainingCopy::versions() const {
  std::vector<int64_t> v;
  for (const auto& p : parameters) {
    const torch::Tensor& g = p.grad();
    v.push_back(static_cast<int64_t>(p._version()));
    v.push_back(g.defined() ? reinterpret_cast<intptr_t>(
                                  g.unsafeGetTensorImpl())
                            : 0);
    v.push_back(g.defined() ? static_cast<int64_t>(g._version()) : -1);
  }
  return v;
}

void TrainingCopy::step(const data::Batch& batch) {
  const torch::Tensor loss = evaluate(batch);
  // The closure a rule may call (the SAM family and L-BFGS evaluate the
  // loss where they have moved the parameters): this batch's loss and
  // gradients at the parameters as they are. While neither parameters
  // nor gradients have changed since the evaluation above, that would
  // reproduce its gradients bit for bit, so its loss is returned as is.
  const std::vector<int64_t> evaluated = versions();
  optimizer->step([&]() -> torch::Tensor {
    if (versions() == evaluated)
      return loss;
    torch::AutoGradMode enable_grad(true);
    return evaluate(batch);
  });
  pending.push_back(loss);
}

optim::EvaluationWeights* TrainingCopy::evaluation_weights() const {
  auto* weights = dynamic_cast<optim::EvaluationWeights*>(optimizer.get());
  return weights && weights->has_evaluation_weights() ? weights : nullptr;
}

void TrainingCopy::train(const std::vector<data::Batch>& batches, int64_t first,
                         const Progress& progress) {
  for (size_t i = 0; i < batches.size(); ++i) {
    step(batches[i]);
    if (progress)
      progress(first + 1 + static_cast<int64_t>(i));
  }
}

void TrainingCopy::flush() {
  if (pending.empty())
    return;
  torch::Tensor read = torch::stack(pending).to(torch::kCPU, torch::kDouble);
  pending.clear();
  const double* values = read.data_ptr<double>();
  losses.insert(losses.end(), values, values + read.numel());
}

int64_t TrainingCopy::read_losses() {
  flush();
  int64_t bad = -1;
  for (size_t i = checked; i < losses.size() && bad < 0; ++i) {
    if (!std::isfinite(losses[i]))
      bad = static_cast<int64_t>(i) + 1;
  }
  checked = losses.size();
  return bad;
}

// ---------------------------------------------------------------------------
// Lockstep

Lockstep::Lockstep(std::vector<PairSpec> specs, int threads)
    : specs_(std::move(specs)), threads_(std::max(1, threads)) {
  TORCH_CHECK(!specs_.empty(), "Lockstep: no pairs");
  const PairSpec& first = specs_.front();
  for (const auto& spec : specs_) {
    TORCH_CHECK(spec.reference_key() == first.reference_key(),
                "Lockstep: pairs '", pair_label(first), "' and '",
                pair_label(spec), "' do not share copy 1");
  }
  TORCH_CHECK(first.steps >= 1, "Invalid steps: ", first.steps,
              " (must be >= 1)");
  configure_determinism();
  const torch::Device device = resolve_device(first.device);
  task_ = make_task(first, device);
  const model::ModelConfig config = model_config(first, task_->shape());
  // Build once: the base model is the reference, every twin a copy of it.
  model::Transformer base = model::build(config, first.init_seed, first.dtype,
                                         device, model_init(first.protocol));
  for (const auto& spec : specs_) {
    model::Transformer copy =
        model::build(config, spec.init_seed, spec.dtype, device);
    model::copy_parameters(base, copy);
    apply_twin(copy, spec.twin, spec.twin_seed, spec.noise_scale,
               draw_dtype(spec.protocol));
    twins_.push_back(std::make_unique<TrainingCopy>(std::move(copy), spec));
  }
  reference_ = std::make_unique<TrainingCopy>(std::move(base), first);
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

model::Transformer& Lockstep::twin(size_t twin) {
  return twin_copy(twin).model;
}

TrainingCopy& Lockstep::twin_copy(size_t twin) {
  TORCH_CHECK(live(twin), "Lockstep: twin ", twin, " is retired");
  return *twins_[twin];
}

const std::vector<double>& Lockstep::reference_losses() const {
  return reference_->losses;
}

const std::vector<double>& Lockstep::twin_losses(size_t twin) const {
  return twins_.at(twin) ? twins_[twin]->losses : retired_losses_.at(twin);
}

void Lockstep::train_to(int64_t to, const Progress& progress) {
  TORCH_CHECK(to >= done_ && to <= specs_.front().steps, "train_to: step ", to,
              " outside ", done_, "..", specs_.front().steps);
  std::vector<data::Batch> batches;  // the very same tensors for every copy
  for (int64_t step = done_ + 1; step <= to; ++step) {
    batches.push_back(task_->train_batch(step));
  }
  std::vector<TrainingCopy*> copies{reference_.get()};
  for (auto& twin : twins_) {
    if (twin)
      copies.push_back(twin.get());
  }
  // One model per worker, the reference's steps reported to `progress`.
  run_on_threads(
      copies.size(), static_cast<size_t>(threads_), [&](size_t i, size_t) {
        copies[i]->train(batches, done_, i == 0 ? progress : Progress{});
      });
  done_ = to;
}

std::vector<int64_t> Lockstep::check_losses() {
  const int64_t reference_bad = reference_->read_losses();
  std::vector<int64_t> out(twins_.size(), -1);
  for (size_t i = 0; i < twins_.size(); ++i) {
    if (!twins_[i])
      continue;
    const int64_t own = twins_[i]->read_losses();
    int64_t bad = reference_bad;
    if (own > 0 && (bad < 0 || own < bad))
      bad = own;
    out[i] = bad;
  }
  return out;
}

void Lockstep::to_evaluation() {
  for_each_copy([](TrainingCopy& copy) {
    if (auto* weights = copy.evaluation_weights())
      weights->to_evaluation();
  });
}

void Lockstep::to_training() {
  for_each_copy([](TrainingCopy& copy) {
    if (auto* weights = copy.evaluation_weights())
      weights->to_training();
  });
}

void Lockstep::for_each_copy(
    const std::function<void(TrainingCopy&)>& visit) {
  visit(*reference_);
  for (auto& twin : twins_) {
    if (twin)
      visit(*twin);
  }
}

Evaluation Lockstep::evaluate_reference() {
  return evaluate(reference_->model, *task_);
}

CurvePoint Lockstep::measure(size_t twin, const Evaluation* reference) {
  TORCH_CHECK(live(twin), "Lockstep: twin ", twin, " is retired");
  const Evaluation ref = reference ? *reference : evaluate_reference();
  const Evaluation own = evaluate(twins_[twin]->model, *task_);
  CurvePoint point = compare(ref, reference_->model, own, twins_[twin]->model,
                             done_, acts_on_vo(specs_[twin].twin));
  const auto& l1 = reference_->losses;
  const auto& l2 = twins_[twin]->losses;
  if (done_ > 0 && static_cast<int64_t>(l1.size()) >= done_ &&
      static_cast<int64_t>(l2.size()) >= done_) {
    point.train_loss = {l1[done_ - 1], l2[done_ - 1]};
  }
  return point;
}

void Lockstep::restored_at(int64_t step) {
  TORCH_CHECK(step >= 0 && step <= specs_.front().steps, "restored_at: step ",
              step, " outside 0..", specs_.front().steps);
  done_ = step;
}

}  // namespace twins
