#include "twins/report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

namespace twins {

std::string format_drift(double v) {
  if (std::isnan(v)) return "nan";
  if (v == 0) return "0";
  return fmt::format("{:.1e}", v);
}

std::string pair_label(const PairSpec& s) {
  std::string twin = to_string(s.twin);
  if (s.twin == TwinKind::kNoise) twin += fmt::format(" {:g}", s.noise_scale);
  std::string seeds = s.uses_twin_seed()
                          ? fmt::format("init {}, seed {}", s.init_seed,
                                        s.twin_seed)
                          : fmt::format("init {}", s.init_seed);
  return fmt::format("{} {} ({})", s.opt, twin, seeds);
}

namespace {

// The drift at `step`, or NaN when the curve has no such checkpoint.
double drift_at(const PairResult& r, int64_t step) {
  for (const auto& c : r.curve) {
    if (c.step == step) return c.logit_drift;
  }
  return std::nan("");
}

std::string cell(const PairResult& r, int64_t step) {
  const double v = drift_at(r, step);
  return std::isnan(v) && (r.curve.empty() || r.curve.back().step < step)
             ? "-"
             : format_drift(v);
}

}  // namespace

std::string format_drift_table(const std::vector<PairResult>& results) {
  if (results.empty()) return "no pairs\n";
  const bool lm = results.front().spec.task == "charlm";
  std::string out = fmt::format(
      "{:<12} {:<14} {:>5} {:>5} {:>8} {:>8} {:>8} {:>8}  {:>8}  {:<15} {}\n",
      "optimizer", "twin", "init", "seed", "step 0", "step 1", "step 100",
      "last", "QK last", lm ? "val loss 1 / 2" : "val acc 1 / 2", "status");
  for (const auto& r : results) {
    const PairSpec& s = r.spec;
    std::string twin = to_string(s.twin);
    if (s.twin == TwinKind::kNoise) twin += fmt::format(" {:g}", s.noise_scale);
    double qk_mean = 0;
    for (double v : r.qk_per_head) qk_mean += v;
    if (!r.qk_per_head.empty()) qk_mean /= double(r.qk_per_head.size());
    const auto& val = lm ? r.val_loss : r.val_acc;
    const int64_t last = r.curve.empty() ? 0 : r.curve.back().step;
    out += fmt::format(
        "{:<12} {:<14} {:>5} {:>5} {:>8} {:>8} {:>8} {:>8}  {:>8}  "
        "{:<15} {}\n",
        s.opt, twin, s.init_seed,
        s.uses_twin_seed() ? std::to_string(s.twin_seed) : "-", cell(r, 0),
        cell(r, 1), cell(r, 100), format_drift(drift_at(r, last)),
        format_drift(qk_mean),
        fmt::format("{:.4f} / {:.4f}", val[0], val[1]),
        r.status == "ok"
            ? std::string("ok")
            : fmt::format("diverged at step {}", r.diverged_step));
  }
  return out;
}

ProgressPrinter::ProgressPrinter(bool quiet, std::FILE* out)
    : quiet_(quiet), tty_(isatty(fileno(out)) != 0), out_(out) {}

void ProgressPrinter::begin_pair(size_t index, size_t count,
                                 const PairSpec& spec) {
  label_ = fmt::format("pair {}/{} {}", index + 1, count, pair_label(spec));
  steps_ = spec.steps;
  last_ = std::chrono::steady_clock::now();
  if (quiet_) return;
  if (!tty_) fmt::print(out_, "{}: start, {} steps\n", label_, steps_);
}

void ProgressPrinter::step(int64_t t) {
  if (quiet_) return;
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (t != steps_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    fmt::print(out_, "\r{}: step {}/{}\033[K", label_, t, steps_);
    std::fflush(out_);
  } else if (steps_ >= 10 && t % (steps_ / 10) == 0 && t != steps_) {
    fmt::print(out_, "{}: step {}/{}\n", label_, t, steps_);
    std::fflush(out_);
  }
}

void ProgressPrinter::end_pair(const PairResult& r) {
  if (quiet_) return;
  const double last = r.curve.empty() ? std::nan("") : r.curve.back().logit_drift;
  fmt::print(out_, "{}{}: {} in {:.1f} s, drift step 1 {}, last {}\n",
             tty_ ? "\r\033[K" : "", label_,
             r.status == "ok" ? "done" : "DIVERGED", r.wall_s,
             format_drift(r.curve.size() > 1 ? r.curve[1].logit_drift
                                             : std::nan("")),
             format_drift(last));
  std::fflush(out_);
}

}  // namespace twins
