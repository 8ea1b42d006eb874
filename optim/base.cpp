#include "optim/base.h"

#include <cmath>

namespace optim {

// ---------------------------------------------------------------------------
// ParamState

torch::Tensor& ParamState::at(std::string_view name) {
  auto it = buffers_.find(name);
  TORCH_CHECK(it != buffers_.end(), "optimizer state has no buffer '", name,
              "'");
  return it->second;
}

const torch::Tensor& ParamState::at(std::string_view name) const {
  return const_cast<ParamState&>(*this).at(name);
}

bool ParamState::has(std::string_view name) const {
  return buffers_.find(name) != buffers_.end();
}

torch::Tensor& ParamState::set(const std::string& name, torch::Tensor value) {
  torch::Tensor& slot = buffers_[name];
  slot = std::move(value);
  return slot;
}

// The archive of one state: "step", "size", then per buffer k "name/k" (its
// name) and "buffer/k" (the tensor). Names travel as values, not keys, so
// that any name is allowed.
void ParamState::serialize(torch::serialize::OutputArchive& archive) const {
  archive.write("step", c10::IValue(step));
  archive.write("size", c10::IValue(static_cast<int64_t>(buffers_.size())));
  int64_t k = 0;
  for (const auto& [name, tensor] : buffers_) {
    TORCH_CHECK(tensor.defined(), "optimizer state buffer '", name,
                "' is undefined");
    archive.write("name/" + std::to_string(k), c10::IValue(name));
    archive.write("buffer/" + std::to_string(k), tensor, /*is_buffer=*/true);
    ++k;
  }
}

void ParamState::serialize(torch::serialize::InputArchive& archive) {
  c10::IValue value;
  archive.read("step", value);
  step = value.toInt();
  archive.read("size", value);
  const int64_t size = value.toInt();
  buffers_.clear();
  for (int64_t k = 0; k < size; ++k) {
    archive.read("name/" + std::to_string(k), value);
    torch::Tensor tensor;
    archive.read("buffer/" + std::to_string(k), tensor, /*is_buffer=*/true);
    buffers_[value.toStringRef()] = tensor;
  }
}

// ---------------------------------------------------------------------------
// StatefulOptimizer: "groups", then per group g an archive "group/g" with
// "params" and, per parameter i that has state, its state as "param/i".

void StatefulOptimizer::save(torch::serialize::OutputArchive& archive) const {
  const auto& groups = param_groups_;
  archive.write("groups", c10::IValue(static_cast<int64_t>(groups.size())));
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    torch::serialize::OutputArchive group(archive.compilation_unit());
    group.write("params", c10::IValue(static_cast<int64_t>(params.size())));
    for (size_t i = 0; i < params.size(); ++i) {
      auto it = state_.find(state_key(params[i]));
      if (it == state_.end())
        continue;
      torch::serialize::OutputArchive param(archive.compilation_unit());
      it->second->serialize(param);
      group.write("param/" + std::to_string(i), param);
    }
    archive.write("group/" + std::to_string(g), group);
  }
}

void StatefulOptimizer::load(torch::serialize::InputArchive& archive) {
  c10::IValue value;
  archive.read("groups", value);
  TORCH_CHECK(value.toInt() == static_cast<int64_t>(param_groups_.size()),
              "optimizer state: saved with ", value.toInt(),
              " parameter groups, this optimizer has ", param_groups_.size());
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& params = param_groups_[g].params();
    torch::serialize::InputArchive group;
    archive.read("group/" + std::to_string(g), group);
    group.read("params", value);
    TORCH_CHECK(value.toInt() == static_cast<int64_t>(params.size()),
                "optimizer state: group ", g, " saved with ", value.toInt(),
                " parameters, this optimizer's has ", params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const auto key = state_key(params[i]);
      torch::serialize::InputArchive param;
      if (!group.try_read("param/" + std::to_string(i), param)) {
        state_.erase(key);
        continue;
      }
      auto s = std::make_unique<ParamState>();
      s->serialize(param);
      state_[key] = std::move(s);
    }
  }
}

// ---------------------------------------------------------------------------
// Adam

void check_adam_options(double lr, const std::tuple<double, double>& betas,
                        double eps) {
  TORCH_CHECK(lr >= 0, "Invalid learning rate: ", lr);
  TORCH_CHECK(eps >= 0, "Invalid epsilon value: ", eps);
  TORCH_CHECK(0 <= std::get<0>(betas) && std::get<0>(betas) < 1.0,
              "Invalid beta parameter at index 0: ", std::get<0>(betas));
  TORCH_CHECK(0 <= std::get<1>(betas) && std::get<1>(betas) < 1.0,
              "Invalid beta parameter at index 1: ", std::get<1>(betas));
}

torch::Tensor adam_denominator(const torch::Tensor& exp_avg_sq,
                               double bias_correction2, double eps) {
  return (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(eps);
}

void adam_update_(const torch::Tensor& p, const torch::Tensor& grad,
                  const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
                  int64_t step, double lr, double beta1, double beta2,
                  double eps) {
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  exp_avg.mul_(beta1).add_(grad, 1 - beta1);
  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  p.addcdiv_(exp_avg, adam_denominator(exp_avg_sq, bias_correction2, eps),
             -lr / bias_correction1);
}

torch::Tensor muon_momentum_(const torch::Tensor& grad,
                             const torch::Tensor& momentum_buffer,
                             double momentum, bool nesterov) {
  momentum_buffer.lerp_(grad, 1 - momentum);
  return nesterov ? grad.lerp(momentum_buffer, momentum) : momentum_buffer;
}

void start_adam_moments(ParamState& state, const torch::Tensor& p) {
  state.set("exp_avg", torch::zeros_like(p, torch::MemoryFormat::Preserve));
  state.set("exp_avg_sq", torch::zeros_like(p, torch::MemoryFormat::Preserve));
}

// ---------------------------------------------------------------------------
// The pool

torch::Tensor pooled_rms(const std::vector<torch::Tensor>& exp_avg_sqs,
                         const std::vector<double>& bias_corrections2) {
  TORCH_CHECK(!exp_avg_sqs.empty(), "pooled_rms: no parameters");
  TORCH_CHECK(exp_avg_sqs.size() == bias_corrections2.size(),
              "pooled_rms: ", exp_avg_sqs.size(), " moments but ",
              bias_corrections2.size(), " bias corrections");
  torch::Tensor total;
  int64_t count = 0;
  for (size_t i = 0; i < exp_avg_sqs.size(); ++i) {
    torch::Tensor s = exp_avg_sqs[i].sum() / bias_corrections2[i];
    total = total.defined() ? total + s : s;
    count += exp_avg_sqs[i].numel();
  }
  return (total / double(count)).sqrt();
}

}  // namespace optim
