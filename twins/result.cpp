#include "twins/result.h"

#include <c10/util/Exception.h>
#include <torch/version.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace twins {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double mean(const std::vector<double>& v) {
  if (v.empty())
    return kNaN;
  double s = 0;
  for (double x : v)
    s += x;
  return s / double(v.size());
}

}  // namespace

const char* to_string(PairStatus status) {
  switch (status) {
    case PairStatus::kOk:
      return "ok";
    case PairStatus::kDiverged:
      return "diverged";
    case PairStatus::kFailed:
      return "failed";
  }
  return "?";
}

PairStatus parse_pair_status(const std::string& text) {
  if (text == "ok")
    return PairStatus::kOk;
  if (text == "diverged")
    return PairStatus::kDiverged;
  if (text == "failed")
    return PairStatus::kFailed;
  TORCH_CHECK(false, "Unknown pair status: '", text,
              "' (known: ok, diverged, failed)");
}

PairResult failed_result(const PairSpec& spec, const std::string& error) {
  PairResult result;
  result.spec = spec;
  result.status = PairStatus::kFailed;
  result.error = error;
  result.torch_version = TORCH_VERSION;
  result.numeric_env = numeric_env(spec.device);
  return result;
}

std::string status_text(const PairResult& result) {
  switch (result.status) {
    case PairStatus::kOk:
      return "ok";
    case PairStatus::kDiverged:
      return fmt::format("diverged at step {}", result.diverged_step);
    case PairStatus::kFailed:
      return "failed: " + result.error;
  }
  return "?";
}

double drift_at(const PairResult& result, int64_t step) {
  for (const auto& c : result.curve) {
    if (c.step == step)
      return c.logit_drift;
  }
  return kNaN;
}

double final_drift(const PairResult& result) {
  if (!result.ok() || result.curve.empty() ||
      result.curve.back().step != result.spec.steps) {
    return kNaN;
  }
  return result.curve.back().logit_drift;
}

double final_qk_drift(const PairResult& result) {
  return mean(result.qk_per_head);
}

double largest_drift(const PairResult& result) {
  double worst = 0;
  auto take = [&](double v) {
    if (std::isnan(worst))
      return;
    worst = std::isnan(v) ? v : std::max(worst, std::abs(v));
  };
  for (const auto& c : result.curve) {
    take(c.logit_drift);
    take(c.qk_drift_max);
  }
  for (double v : result.qk_per_head)
    take(v);
  return worst;
}

std::vector<double> decades_apart(const PairResult& gauge,
                                  const PairResult& noise, int64_t from,
                                  double floor) {
  std::vector<double> out;
  for (const auto& c : gauge.curve) {
    if (c.step < from)
      continue;
    const double g = c.logit_drift, n = drift_at(noise, c.step);
    if (!std::isfinite(g) || !std::isfinite(n))
      continue;
    out.push_back(g == n ? 0.0
                         : std::abs(std::log10((g + floor) / (n + floor))));
  }
  return out;
}

double chaos_metric(const PairResult& gauge, const PairResult& noise) {
  return mean(decades_apart(gauge, noise, 100, 1e-12));
}

double tracking(const PairResult& gauge, const PairResult& noise) {
  const std::vector<double> d = decades_apart(gauge, noise, 101, 0.0);
  return d.empty() ? kNaN : *std::max_element(d.begin(), d.end());
}

int64_t first_moving_step(const PairResult& result) {
  if (result.curve.empty() || result.curve.front().step != 0)
    return -1;
  const double start = result.curve.front().val_loss[0];
  for (const auto& c : result.curve) {
    if (c.step > 0 && c.val_loss[0] != start)
      return c.step;
  }
  return -1;
}

std::string format_drift(double v) {
  if (std::isnan(v))
    return "nan";
  if (v == 0)
    return "0";
  return fmt::format("{:.1e}", v);
}

}  // namespace twins
