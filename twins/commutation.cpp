#include "twins/commutation.h"

#include <algorithm>
#include <cmath>

#include "twins/setup.h"

namespace twins {

namespace {

std::vector<torch::Tensor> snapshot(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out;
  out.reserve(params.size());
  for (const torch::Tensor& p : params)
    out.push_back(p.detach().clone());
  return out;
}

bool has_sides(const GaugeDraw& gauge) {
  return !gauge.qk.empty() || !gauge.vo.empty();
}

}  // namespace

StepCommutation commutation_step(const std::vector<torch::Tensor>& before1,
                                 const std::vector<torch::Tensor>& after1,
                                 const std::vector<torch::Tensor>& before2,
                                 const std::vector<torch::Tensor>& after2,
                                 const GaugeDraw& gauge,
                                 model::Transformer& scratch) {
  const size_t n = before1.size();
  TORCH_CHECK(after1.size() == n && before2.size() == n && after2.size() == n,
              "commutation_step: ", n, ", ", after1.size(), ", ",
              before2.size(), " and ", after2.size(), " parameters");
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> d1(n), d2(n);
  for (size_t i = 0; i < n; ++i) {
    d1[i] = after1[i].to(torch::kDouble) - before1[i].to(torch::kDouble);
    d2[i] = after2[i].to(torch::kDouble) - before2[i].to(torch::kDouble);
  }
  std::vector<torch::Tensor> mapped = d1;  // G dW1
  if (has_sides(gauge)) {
    TORCH_CHECK(scratch, "commutation_step: a gauge needs a scratch model");
    std::vector<torch::Tensor> s = scratch->parameters();
    TORCH_CHECK(s.size() == n, "commutation_step: the scratch model has ",
                s.size(), " parameters, not ", n);
    for (size_t i = 0; i < n; ++i)
      s[i].copy_(d1[i]);
    apply_gauge(scratch, gauge);
    for (size_t i = 0; i < n; ++i)
      mapped[i] = s[i].detach().clone();
  }
  // Every parameter's update as one vector: a parameter whose update is
  // small next to the terms it is computed from (W_K at initialisation,
  // where the attention is near uniform) has a relative rounding error far
  // above the unit roundoff, which would otherwise decide (docs/protocol.md
  // §6).
  // The five sums of squares of every parameter, read back at once (one
  // host synchronisation a step on CUDA), then added in parameter order.
  constexpr size_t kSums = 5;
  std::vector<torch::Tensor> squares;
  for (size_t i = 0; i < n; ++i) {
    squares.push_back((d2[i] - mapped[i]).pow(2).sum());
    squares.push_back(d1[i].pow(2).sum());
    squares.push_back(d2[i].pow(2).sum());
    squares.push_back(after1[i].to(torch::kDouble).pow(2).sum());
    squares.push_back(after2[i].to(torch::kDouble).pow(2).sum());
  }
  const torch::Tensor read = torch::stack(squares).to(torch::kCPU);
  const double* sq = read.data_ptr<double>();
  double sum[kSums] = {0, 0, 0, 0, 0};
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < kSums; ++k)
      sum[k] += sq[kSums * i + k];
  }
  const double update = std::sqrt(std::max(sum[1], sum[2]));
  if (update == 0)
    return {};  // neither copy moved
  const double weights = std::sqrt(std::max(sum[3], sum[4]));
  return {std::sqrt(sum[0]) / update, update / weights};
}

CommutationWatch::CommutationWatch(Lockstep& group) : group_(group) {
  const model::ModelConfig& config = group.reference()->config();
  bool any_gauge = false;
  for (size_t i = 0; i < group.twins(); ++i) {
    const PairSpec& spec = group.spec(i);
    gauges_.push_back(is_gauge(spec.twin)
                          ? gauge_draw(config, spec.twin, spec.twin_seed,
                                       draw_dtype(spec.protocol))
                          : GaugeDraw{});
    any_gauge = any_gauge || has_sides(gauges_.back());
  }
  if (any_gauge) {
    const PairSpec& first = group.spec(0);
    scratch_ = model::build(config, first.init_seed, torch::kDouble,
                            group.reference_copy().parameters.front().device());
  }
  twin_before_.resize(group.twins());
}

bool CommutationWatch::watching(const std::vector<PairResult>& results) const {
  for (size_t i = 0; i < group_.twins(); ++i) {
    if (group_.live(i) && results[i].commutation.measured &&
        !results[i].commutation.complete())
      return true;
  }
  return false;
}

void CommutationWatch::before_step() {
  reference_before_ = snapshot(group_.reference_copy().parameters);
  for (size_t i = 0; i < group_.twins(); ++i) {
    twin_before_[i] = group_.live(i)
                          ? snapshot(group_.twin_copy(i).parameters)
                          : std::vector<torch::Tensor>{};
  }
}

void CommutationWatch::after_step(std::vector<PairResult>& results) {
  const std::vector<torch::Tensor>& after1 =
      group_.reference_copy().parameters;
  bool moved = false;
  {
    torch::NoGradGuard no_grad;
    for (size_t p = 0; p < after1.size() && !moved; ++p)
      moved = !torch::equal(after1[p], reference_before_[p]);
  }
  const int64_t step = group_.done();
  for (size_t i = 0; i < group_.twins(); ++i) {
    Commutation& c = results[i].commutation;
    if (!group_.live(i) || !c.measured || c.complete())
      continue;
    if (c.moved_at < 0) {
      if (!moved)
        continue;
      c.moved_at = step;
    }
    const StepCommutation s = commutation_step(
        reference_before_, after1, twin_before_[i],
        group_.twin_copy(i).parameters, gauges_[i], scratch_);
    c.errors.push_back(s.error);
    c.sizes.push_back(s.size);
  }
  reference_before_.clear();
  for (auto& t : twin_before_)
    t.clear();
}

}  // namespace twins
