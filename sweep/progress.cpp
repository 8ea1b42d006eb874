#include "sweep/progress.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)
#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>

namespace sweep {

Progress::Progress(size_t pairs, size_t groups, bool quiet, std::FILE* out)
    : pairs_(pairs),
      groups_(groups),
      quiet_(quiet),
      tty_(isatty(fileno(out)) != 0),
      out_(out) {}

void Progress::line(const std::string& text) {
  if (tty_)
    fmt::print(out_, "\r\033[K");
  fmt::print(out_, "{}\n", text);
  if (tty_)
    status();
  std::fflush(out_);
}

void Progress::status() {
  std::vector<std::string> running;
  for (const auto& r : slots_) {
    if (r.active) {
      running.push_back(fmt::format("{}/{} {} {}/{}", r.group + 1, groups_,
                                    r.label, r.step, r.steps));
    }
  }
  std::string s = fmt::format("{}", fmt::join(running, " | "));
  // One terminal line, or the carriage return cannot rewrite it.
  winsize ws{};
  const size_t width =
      ioctl(fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 10
          ? ws.ws_col - 1
          : 119;
  if (s.size() > width)
    s = s.substr(0, width - 3) + "...";
  fmt::print(out_, "\r{}\033[K", s);
  std::fflush(out_);
  last_draw_ = std::chrono::steady_clock::now();
}

void Progress::begin(size_t slot, size_t group,
                     const std::vector<twins::PairSpec>& specs) {
  if (quiet_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (slots_.size() <= slot)
    slots_.resize(slot + 1);
  const twins::PairSpec& s = specs.front();
  std::vector<std::string> labels;
  for (const auto& p : specs)
    labels.push_back(twins::twin_label(p));
  const std::string twins = fmt::format("{}", fmt::join(labels, ", "));
  Running& r = slots_[slot];
  r = Running{true, fmt::format("{} (init {})", s.opt, s.init_seed), group, 0,
              s.steps};
  if (!tty_) {
    line(fmt::format("group {}/{} {}: {} twin(s) on one copy 1 ({}), {} steps",
                     group + 1, groups_, r.label, specs.size(), twins,
                     s.steps));
  } else {
    status();
  }
}

void Progress::step(size_t slot, int64_t t) {
  if (quiet_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  Running& r = slots_[slot];
  r.step = t;
  if (tty_) {
    if (std::chrono::steady_clock::now() - last_draw_ >
        std::chrono::milliseconds(200)) {
      status();
    }
  } else if (r.steps >= 100 && t % (r.steps / 10) == 0 && t != r.steps) {
    line(fmt::format("group {}/{} {}: step {}/{}", r.group + 1, groups_,
                     r.label, t, r.steps));
  }
}

void Progress::end(size_t slot, const twins::PairResult& result) {
  if (quiet_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  ++done_;
  const double last =
      result.curve.empty() ? std::nan("") : result.curve.back().logit_drift;
  line(fmt::format(
      "group {}/{} {}: {} in {:.1f} s, drift step 1 {}, last {} "
      "({} of {} pairs done)",
      slots_[slot].group + 1, groups_, twins::pair_label(result.spec),
      result.ok() ? "done"
      : result.status == twins::PairStatus::kDiverged
          ? fmt::format("DIVERGED at step {}", result.diverged_step)
          : "FAILED (" + result.error + ")",
      result.wall_s, twins::format_drift(twins::drift_at(result, 1)),
      twins::format_drift(last), done_, pairs_));
}

void Progress::finish_group(size_t slot) {
  if (quiet_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  slots_[slot].active = false;
  if (tty_)
    status();
}

}  // namespace sweep
