// Scheduling a job list: shards (a deterministic subset per machine), jobs
// (several pairs at once in one process), resume (skip what the results
// file already holds) and a wall-time estimate. None of it touches a pair's
// numbers: every pair runs single-threaded from its spec alone, so its
// record is the same whichever shard, job slot or rerun executes it.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "twins/pair.h"

namespace twins {

// ---------------------------------------------------------------------------
// Shards

// Shard I of N, 1 <= I <= N (as `--shard I/N`, e.g. a SLURM array index).
struct Shard {
  int index = 1;
  int count = 1;
};

// Parses "I/N"; throws "Invalid --shard: '3/2' (expected I/N with
// 1 <= I <= N, e.g. 1/4)".
Shard parse_shard(const std::string& text);

// Shard I of N takes the pairs at positions I-1, I-1+N, I-1+2N, ... of the
// job list: the shards are disjoint, together cover it exactly once, and
// (the pairs of one table costing about the same) are balanced.
std::vector<PairSpec> shard_of(const std::vector<PairSpec>& pairs,
                               const Shard& shard);

// ---------------------------------------------------------------------------
// Estimates

// Seconds one pair takes on one thread of this machine: training and
// evaluation FLOPs of both copies over a throughput measured here (mod-47
// Table 3: ~70 s per pair, float32, LibTorch 1.13 + OpenBLAS). Rough (about
// +-50 %); CUDA devices are not modelled (NaN).
double estimate_seconds(const PairSpec& spec);

// "45 s", "12 min", "3.4 h", "2.1 days".
std::string format_duration(double seconds);

// ---------------------------------------------------------------------------
// Progress of several pairs at once

// Thread-safe progress on a stream: a line when a pair starts and ends (and
// at each tenth of a pair of 100 steps or more when not on a terminal); on a
// terminal, one rewritten status line with the step of every running pair.
class JobsProgress {
 public:
  JobsProgress(size_t total, bool quiet, std::FILE* out = stderr);
  void begin(size_t slot, size_t index, const PairSpec& spec);
  void step(size_t slot, int64_t t);
  void end(size_t slot, const PairResult& r);

 private:
  struct Running {
    bool active = false;
    std::string label;
    size_t index = 0;
    int64_t step = 0, steps = 0;
  };
  void line(const std::string& text);  // a permanent line (mutex held)
  void status();                       // redraw the status line (held)

  std::mutex mutex_;
  size_t total_, done_ = 0;
  bool quiet_, tty_;
  std::FILE* out_;
  std::vector<Running> slots_;
  std::chrono::steady_clock::time_point last_draw_;
};

// ---------------------------------------------------------------------------
// Running a job list

// Runs `pairs` on `jobs` threads, each pair single-threaded (LibTorch and
// OpenBLAS at 1 thread). `done` is called once per pair as it ends, from
// the worker, serialised under a lock, in completion order. On an
// exception no new pair starts; running pairs finish (and are reported),
// then the first exception is rethrown. Returns the results in job-list
// order.
std::vector<PairResult> run_jobs(
    const std::vector<PairSpec>& pairs, int jobs,
    const std::function<void(const PairResult&)>& done,
    JobsProgress* progress = nullptr);

// A job list run against a results file that may already hold some of it.
struct ResumeOptions {
  std::string results_path;  // JSONL, created when the first pair ends
  int jobs = 1;
  std::string table;        // written as the record's "table" field
  bool quiet = false;       // no progress
  std::FILE* log = stderr;  // where progress and notes go
};

struct ResumeOutcome {
  size_t already = 0;              // pairs found in the file, not rerun
  size_t ran = 0;                  // pairs run now
  bool dropped_truncated = false;  // a crash's half line was cut off
  double wall_s = 0;               // seconds spent running pairs
};

// Runs the pairs of `pairs` whose key the results file does not hold yet,
// appending each record (with "table") as its pair ends. An exclusive lock
// on the file keeps a second process from running the same pairs at the
// same time; a truncated last line is cut off before the first append.
// Validates the existing file before anything runs.
ResumeOutcome run_resumable(const std::vector<PairSpec>& pairs,
                            const ResumeOptions& options);

}  // namespace twins
