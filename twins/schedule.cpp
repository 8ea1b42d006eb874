#include "twins/schedule.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>
#include <thread>

#include "twins/device.h"
#include "twins/record.h"
#include "twins/report.h"
#include "twins/results.h"
#include "twins/sink.h"

namespace twins {

namespace fs = std::filesystem;

// ===========================================================================
// Shards

Shard parse_shard(const std::string& text) {
  auto number = [](const std::string& s, int* out) {
    if (s.empty() || s.size() > 6) {
      return false;
    }
    for (char c : s) {
      if (c < '0' || c > '9') {
        return false;
      }
    }
    *out = std::stoi(s);
    return true;
  };
  const size_t slash = text.find('/');
  Shard s;
  const bool ok = slash != std::string::npos &&
                  number(text.substr(0, slash), &s.index) &&
                  number(text.substr(slash + 1), &s.count) && s.count >= 1 &&
                  s.index >= 1 && s.index <= s.count;
  TORCH_CHECK(ok, "Invalid --shard: '", text,
              "' (expected I/N with 1 <= I <= N, e.g. 1/4)");
  return s;
}

std::vector<PairSpec> shard_of(const std::vector<PairSpec>& pairs,
                               const Shard& shard) {
  TORCH_CHECK(
      shard.count >= 1 && shard.index >= 1 && shard.index <= shard.count,
      "Invalid shard ", shard.index, "/", shard.count);
  std::vector<PairSpec> out;
  for (size_t i = static_cast<size_t>(shard.index - 1); i < pairs.size();
       i += static_cast<size_t>(shard.count)) {
    out.push_back(pairs[i]);
  }
  return out;
}

// ===========================================================================
// Estimates

namespace {

// One-thread throughput of this machine's LibTorch 1.13 + OpenBLAS on these
// small models, in FLOPs of the plain model (no token table, full last
// block), from the Table-3 pair (4.9e12 such FLOPs in ~70 s) and the
// float64 / float32 ratio measured on the mod-97 models (about 1.85).
constexpr double kFlopsPerSecondF32 = 7.0e10;
constexpr double kFlopsPerSecondF64 = 3.0e10;
constexpr double kSetupSeconds = 0.3;  // task, build, copies, gauge

}  // namespace

double estimate_seconds(const PairSpec& s) {
  if (s.device != "cpu") {
    return std::nan("");
  }
  double train_tokens = 0, val_tokens = 0, vocab = 0, n_ctx = 0;
  if (s.task == "charlm") {
    n_ctx = double(s.ctx);
    train_tokens = double(s.batch) * n_ctx;
    val_tokens = 64 * n_ctx;  // PROTOCOL §4: 64 validation windows
    vocab = 65;
  } else {
    const double p = std::stod(s.task.substr(3));
    const double n_train = std::floor(0.4 * p * p);
    n_ctx = 3;
    train_tokens = 3 * n_train;
    val_tokens = 3 * (p * p - n_train);
    vocab = p;
  }
  const double d = double(s.d_model);
  // Multiply-adds per token: the block matrices, attention scores and
  // mixing over the context, and the head.
  const double macs =
      double(s.depth) * (4 * d * d + 2 * d * double(s.mlp) + 2 * n_ctx * d) +
      vocab * d;
  const double forward = 2 * macs;  // FLOPs per token
  const double train =
      2 /*copies*/ * 3 /*fwd+bwd*/ * forward * train_tokens * double(s.steps);
  const double eval =
      2 * forward * val_tokens * double(checkpoint_steps(s.steps).size());
  const double rate =
      s.dtype == torch::kDouble ? kFlopsPerSecondF64 : kFlopsPerSecondF32;
  return kSetupSeconds + (train + eval) / rate;
}

std::string format_duration(double s) {
  if (!std::isfinite(s)) {
    return "unknown";
  }
  if (s < 90) {
    return fmt::format("{:.0f} s", s);
  }
  if (s < 90 * 60) {
    return fmt::format("{:.0f} min", s / 60);
  }
  if (s < 48 * 3600) {
    return fmt::format("{:.1f} h", s / 3600);
  }
  return fmt::format("{:.1f} days", s / 86400);
}

// ===========================================================================
// Progress

JobsProgress::JobsProgress(size_t total, bool quiet, std::FILE* out)
    : total_(total), quiet_(quiet), tty_(isatty(fileno(out)) != 0), out_(out) {}

void JobsProgress::line(const std::string& text) {
  if (tty_) {
    fmt::print(out_, "\r\033[K");
  }
  fmt::print(out_, "{}\n", text);
  if (tty_) {
    status();
  }
  std::fflush(out_);
}

void JobsProgress::status() {
  std::string s;
  for (const auto& r : slots_) {
    if (!r.active) {
      continue;
    }
    s += fmt::format("{}{}/{} {} {}/{}", s.empty() ? "" : " | ", r.index + 1,
                     total_, r.label, r.step, r.steps);
  }
  // One terminal line, or the carriage return cannot rewrite it.
  winsize ws{};
  const size_t width =
      ioctl(fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 10
          ? ws.ws_col - 1
          : 119;
  if (s.size() > width) {
    s = s.substr(0, width - 3) + "...";
  }
  fmt::print(out_, "\r{}\033[K", s);
  std::fflush(out_);
  last_draw_ = std::chrono::steady_clock::now();
}

void JobsProgress::begin(size_t slot, size_t index, const PairSpec& spec) {
  if (quiet_) {
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (slots_.size() <= slot) {
    slots_.resize(slot + 1);
  }
  Running& r = slots_[slot];
  r = Running{true, pair_label(spec), index, 0, spec.steps};
  if (!tty_) {
    line(fmt::format("pair {}/{} {}: start, {} steps", index + 1, total_,
                     r.label, spec.steps));
  } else {
    status();
  }
}

void JobsProgress::step(size_t slot, int64_t t) {
  if (quiet_) {
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Running& r = slots_[slot];
  r.step = t;
  if (tty_) {
    if (std::chrono::steady_clock::now() - last_draw_ >
        std::chrono::milliseconds(200)) {
      status();
    }
  } else if (r.steps >= 100 && t % (r.steps / 10) == 0 && t != r.steps) {
    line(fmt::format("pair {}/{} {}: step {}/{}", r.index + 1, total_, r.label,
                     t, r.steps));
  }
}

void JobsProgress::end(size_t slot, const PairResult& res) {
  if (quiet_) {
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Running& r = slots_[slot];
  r.active = false;
  ++done_;
  const double step1 =
      res.curve.size() > 1 ? res.curve[1].logit_drift : std::nan("");
  const double last =
      res.curve.empty() ? std::nan("") : res.curve.back().logit_drift;
  line(fmt::format(
      "pair {}/{} {}: {} in {:.1f} s, drift step 1 {}, last {} "
      "({} of {} done)",
      r.index + 1, total_, r.label, res.status == "ok" ? "done" : "DIVERGED",
      res.wall_s, format_drift(step1), format_drift(last), done_, total_));
}

// ===========================================================================
// Running

std::vector<PairResult> run_jobs(
    const std::vector<PairSpec>& pairs, int jobs,
    const std::function<void(const PairResult&)>& done,
    JobsProgress* progress) {
  TORCH_CHECK(jobs >= 1, "Invalid --jobs: ", jobs, " (must be >= 1)");
  // One thread per pair: a pair's reductions then never depend on how
  // many pairs run beside it.
  set_threads(1);
  std::vector<PairResult> results(pairs.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::exception_ptr error;

  auto worker = [&](size_t slot) {
    set_threads(1);
    while (!failed) {
      const size_t i = next++;
      if (i >= pairs.size()) {
        return;
      }
      try {
        if (progress) {
          progress->begin(slot, i, pairs[i]);
        }
        PairResult r = run_pair(pairs[i], [&](int64_t t) {
          if (progress) {
            progress->step(slot, t);
          }
        });
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (done) {
            done(r);
          }
        }
        if (progress) {
          progress->end(slot, r);
        }
        results[i] = std::move(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) {
          error = std::current_exception();
        }
        failed = true;
      }
    }
  };

  const size_t n = std::min(static_cast<size_t>(jobs), pairs.size());
  if (n <= 1) {
    worker(0);
  } else {
    std::vector<std::thread> threads;
    for (size_t slot = 0; slot < n; ++slot) {
      threads.emplace_back(worker, slot);
    }
    for (auto& t : threads) {
      t.join();
    }
  }
  if (error) {
    std::rethrow_exception(error);
  }
  return results;
}

namespace {

// An exclusive, non-blocking flock on the results file for the lifetime of
// the object; creates the file (empty) when it does not exist.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    const fs::path parent = fs::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) {
      fs::create_directories(parent, ec);
    }
    TORCH_CHECK(!ec, "Cannot create directory '", parent.string(),
                "': ", ec.message());
    fd_ = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    TORCH_CHECK(fd_ >= 0, "Cannot open results file '", path,
                "': ", std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd_);
      TORCH_CHECK(err != EWOULDBLOCK, "results file '", path,
                  "' is in use by another twin-run process; wait for it or "
                  "choose another --out");
      TORCH_CHECK(false, "Cannot lock results file '", path,
                  "': ", std::strerror(err));
    }
  }
  ~FileLock() {
    if (fd_ >= 0)
      ::close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

ResumeOutcome run_resumable(const std::vector<PairSpec>& pairs,
                            const ResumeOptions& o) {
  TORCH_CHECK(o.jobs >= 1, "Invalid --jobs: ", o.jobs, " (must be >= 1)");
  std::set<std::string> keys;
  for (const auto& p : pairs) {
    TORCH_CHECK(keys.insert(p.key()).second, "job list has pair ", p.key(),
                " twice");
  }
  // Validate what is there before creating or locking anything.
  ResultsFile existing = read_results(o.results_path, /*missing_ok=*/true);
  std::set<std::string> recorded;
  for (const auto& r : existing.records) {
    recorded.insert(r.key);
  }
  std::vector<PairSpec> todo;
  for (const auto& p : pairs) {
    if (!recorded.count(p.key())) {
      todo.push_back(p);
    }
  }
  ResumeOutcome out;
  out.already = pairs.size() - todo.size();
  if (todo.empty()) {
    return out;
  }

  const bool existed = fs::exists(o.results_path);
  FileLock lock(o.results_path);
  // Reread under the lock: another process may have finished pairs.
  existing = read_results(o.results_path, /*missing_ok=*/true);
  recorded.clear();
  for (const auto& r : existing.records) {
    recorded.insert(r.key);
  }
  todo.clear();
  for (const auto& p : pairs) {
    if (!recorded.count(p.key())) {
      todo.push_back(p);
    }
  }
  out.already = pairs.size() - todo.size();
  if (todo.empty()) {
    return out;
  }
  if (existing.truncated_tail) {
    drop_truncated_tail(existing);
    out.dropped_truncated = true;
    if (!o.quiet) {
      fmt::print(o.log,
                 "{}: cut off a truncated last line (a record interrupted "
                 "mid-write); its pair runs again\n",
                 o.results_path);
    }
  }
  if (!o.quiet && out.already > 0) {
    fmt::print(o.log, "{}: {} of {} pairs already recorded; running {}\n",
               o.results_path, out.already, pairs.size(), todo.size());
  }

  JsonlSink sink(o.results_path);
  JobsProgress progress(todo.size(), o.quiet, o.log);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_jobs(
        todo, o.jobs,
        [&](const PairResult& r) {
          nlohmann::json j = to_json(r);
          if (!o.table.empty()) {
            j["table"] = o.table;
          }
          sink.append(j);
          ++out.ran;
        },
        &progress);
  } catch (...) {
    // Leave no empty file behind when the lock created it.
    std::error_code ec;
    if (!existed && out.ran == 0) {
      fs::remove(o.results_path, ec);
    }
    throw;
  }
  out.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  return out;
}

}  // namespace twins
