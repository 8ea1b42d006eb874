// The one engine every command that trains or measures pairs goes through
// (the default run, `verdict`, `table`, `merge`, `merge --models`, each by
// way of sweep/command.h), and the one writer of results files: a job list
// of PairSpecs run against a results file that may already hold some of
// it. What it does, in order:
//   - resume: pairs whose key the file holds are skipped; a pair the file
//     holds under another key (another record schema, other optimizer
//     hyperparameters, other merge checkpoints) is an error naming the
//     difference, never a silent mix of old and new numbers;
//   - lock: an exclusive lock on the file keeps a second process out;
//   - grouping: pairs that train the same copy 1 (PairSpec::reference_key)
//     form one group that trains the reference once (twins::run_group);
//   - scheduling: `jobs` groups at once, `threads` models of a group at
//     once, each model on one LibTorch / OpenBLAS thread;
//   - records: each pair's record is appended (fsync'd) as the pair ends.
//   - checkpoints: with EngineOptions::state, each group keeps a
//     checkpoint (twins::GroupCheckpoint: its file, when it is written,
//     resumed and removed) and a rerun goes on from there; the engine
//     installs the stop signals' handlers while groups run.
// None of it touches a pair's numbers: a record is the same whichever
// group, shard, job slot, thread or rerun produced it.
#pragma once

#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sweep/results.h"
#include "sweep/shards.h"
#include "twins/checkpoint.h"
#include "twins/snapshot.h"
#include "twins/spec.h"

namespace sweep {

// ---------------------------------------------------------------------------
// Running

// How far a run has come, for a front end that draws its own progress
// (the Python module's bar): written by the engine's threads, read from any.
// Steps count each group's steps once (its reference's), resumed steps
// included.
struct ProgressCounts {
  std::atomic<size_t> pairs{0}, pairs_done{0};
  std::atomic<int64_t> steps{0}, steps_done{0};
};

struct EngineOptions {
  std::string results_path;  // JSONL; created when the first pair ends
  int jobs = 1;              // groups at once
  int threads = 1;           // models of a group at once
  bool share = true;         // group pairs that share copy 1
  std::string table;         // written as each record's "table" field
  bool quiet = false;        // no progress
  std::FILE* log = stderr;   // where progress and notes go
  bool check_memory = true;  // refuse a run whose estimate cannot fit
  // Twins per group at most; 0: as many as `jobs` groups of them fit in this
  // machine's memory (with check_memory), else no limit.
  int max_twins = 0;
  // When set, both copies of every pair are saved there as it ends
  // (twins/snapshot.h), one directory per pair.
  std::string save_models;
  // When enabled, every group that trains keeps a checkpoint
  // (twins::GroupCheckpoint) in twins::checkpoint_folder(results_path),
  // written as the policy says and when SIGTERM, SIGUSR1 or SIGINT asks the
  // run to stop (twins::StopSignals, installed while groups run). A rerun
  // resumes each group from its file; a group's file is removed when its
  // records are written, the folder with the last of them.
  twins::StatePolicy state;
  // Whether the engine installs those handlers; a front end that stops the
  // run itself (twins::request_stop: the Python module) keeps its own.
  bool stop_signals = true;
  // When set, the engine keeps these counts up to date.
  std::shared_ptr<ProgressCounts> counts;
  // Append to a file whose records were written under another numeric
  // environment (twins/environment.h) with a warning instead of an error.
  bool allow_mixed_env = false;
  // A group whose rule raises while it trains (a c10::Error from the
  // training, never a stop or a failed write) is recorded instead of
  // ending the run: each of its pairs not yet recorded gets a record of
  // status "failed" with the error's line (twins::failed_result), its
  // checkpoint is discarded, and the other groups go on. The census runs
  // so, where a rule that cannot run is a row of the table; a rerun finds
  // those records and does not try the rule again.
  bool record_failures = false;
  // A record of `table` for a rule of the job list must be one of its
  // pairs: a census at its default rates alone (--default-rates) refuses a
  // file that holds its rules at other rates, whose summary, "no other
  // rate tried", would replace that census's.
  bool listed_rates_only = false;
};

struct EngineOutcome {
  size_t already = 0;              // pairs found in the file, not rerun
  size_t ran = 0;                  // pairs run now
  size_t groups = 0;               // groups run now
  size_t models = 0;               // models trained now (references + twins)
  bool dropped_truncated = false;  // a crash's half line was cut off
  double wall_s = 0;               // seconds spent running pairs
  // The job list's records, in job-list order (those the file holds).
  std::vector<StoredRecord> records;
};

// Checks what can be checked before anything is read or written: --jobs
// and --threads, and (unless options.check_memory is off) that the largest
// group fits in this machine's memory. Throws a one-line error.
void check_run(const std::vector<twins::PairSpec>& pairs,
               const EngineOptions& options);

// merge --models: saved pairs (twins/snapshot.h), each under the key of
// its record's spec (twins::saved_spec).
using SavedPairs = std::map<std::string, twins::SavedPair>;

// Runs the pairs of `pairs` the results file does not hold yet (see the
// top of this file): each group trained by twins::run_group or, given
// `saved`, each pair measured as saved (twins::measure_saved) — nothing
// trains then, so nothing is checkpointed and a signal ends the process as
// it would without checkpoints. Validates the file, the job list and the
// memory estimate before anything is created; on an error while running,
// no new group starts, running groups finish and are recorded, then the
// first error is rethrown (and an empty file the run created is removed).
EngineOutcome run_sweep(const std::vector<twins::PairSpec>& pairs,
                        const EngineOptions& options,
                        SavedPairs* saved = nullptr);

// The records of `file` whose key is one of `pairs`', in job-list order,
// each once. Throws when a record holds one of the pairs under another key
// (see the top of this file), naming the file, the line and the difference.
std::vector<StoredRecord> job_records(
    const ResultsFile& file, const std::vector<twins::PairSpec>& pairs);

}  // namespace sweep
