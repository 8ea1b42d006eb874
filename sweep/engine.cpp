#include "sweep/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include <signal.h>

#include "sweep/estimate.h"
#include "sweep/progress.h"
#include "twins/corpus.h"
#include "data/sha256.h"
#include "twins/device.h"
#include "twins/group_state.h"
#include "twins/io.h"
#include "twins/pair.h"
#include "twins/record.h"
#include "twins/snapshot.h"

namespace sweep {

namespace fs = std::filesystem;
using twins::PairSpec;

// ===========================================================================
// Groups and shards

std::vector<std::vector<PairSpec>> group_pairs(
    const std::vector<PairSpec>& pairs, bool share, int max_twins) {
  TORCH_CHECK(max_twins >= 1, "group_pairs: max_twins ", max_twins);
  std::vector<std::vector<PairSpec>> groups;
  std::map<std::string, size_t> open;  // reference key -> its last group
  for (const auto& p : pairs) {
    const std::string ref = share ? p.reference_key() : p.key();
    auto it = open.find(ref);
    if (it == open.end() ||
        groups[it->second].size() >= static_cast<size_t>(max_twins)) {
      open[ref] = groups.size();
      groups.push_back({p});
    } else {
      groups[it->second].push_back(p);
    }
  }
  return groups;
}

Shard parse_shard(const std::string& text) {
  auto number = [](const std::string& s, int* out) {
    if (s.empty() || s.size() > 6)
      return false;
    for (char c : s) {
      if (c < '0' || c > '9')
        return false;
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
                               const Shard& shard, bool share) {
  TORCH_CHECK(
      shard.count >= 1 && shard.index >= 1 && shard.index <= shard.count,
      "Invalid shard ", shard.index, "/", shard.count);
  const auto groups = group_pairs(pairs, share);
  std::vector<PairSpec> out;
  for (size_t i = static_cast<size_t>(shard.index - 1); i < groups.size();
       i += static_cast<size_t>(shard.count)) {
    out.insert(out.end(), groups[i].begin(), groups[i].end());
  }
  return out;
}

// ===========================================================================
// Resume

namespace {

// Why record `r` (of the same pair as `spec`) has another key, in words.
std::string key_difference(const StoredRecord& r, const PairSpec& spec) {
  const int schema = twins::record_schema(r.json);
  if (schema != twins::kRecordSchema) {
    return fmt::format(
        "was written with record schema {} and this twin-run writes schema "
        "{}",
        schema, twins::kRecordSchema);
  }
  const std::string hp =
      twins::hparams_difference(r.result.spec.hparams, spec.hparams);
  if (!hp.empty()) {
    return fmt::format(
        "was run with other {} hyperparameters ({}: file vs this run)",
        spec.opt, hp);
  }
  if (r.result.spec.merge_at != spec.merge_at) {
    return "was run with other --merge-at steps";
  }
  const std::string corpus = twins::corpus_difference(r.result.spec, spec);
  if (!corpus.empty())
    return corpus;
  return fmt::format("has key '{}', this run '{}'", r.key, spec.key());
}

}  // namespace

std::vector<StoredRecord> job_records(const ResultsFile& file,
                                      const std::vector<PairSpec>& pairs) {
  std::map<std::string, const StoredRecord*> by_id;  // first of each pair
  for (const auto& r : file.records) {
    by_id.emplace(r.result.spec.pair_id(), &r);
  }
  std::vector<StoredRecord> out;
  for (const auto& p : pairs) {
    auto it = by_id.find(p.pair_id());
    if (it == by_id.end())
      continue;
    const StoredRecord& r = *it->second;
    TORCH_CHECK(r.key == p.key(), "results file '", file.path, "', line ",
                r.line, ": pair '", twins::pair_label(p), "' ",
                key_difference(r, p),
                "; resume into a new --out (or move the file away) rather "
                "than mix the two");
    out.push_back(r);
  }
  return out;
}

// ===========================================================================
// Running

namespace {

using Clock = std::chrono::steady_clock;

// The pairs of `pairs` whose record `file` does not hold.
std::vector<PairSpec> missing(const ResultsFile& file,
                              const std::vector<PairSpec>& pairs) {
  std::set<std::string> have;
  for (const auto& r : job_records(file, pairs))
    have.insert(r.key);
  std::vector<PairSpec> todo;
  for (const auto& p : pairs) {
    if (!have.count(p.key()))
      todo.push_back(p);
  }
  return todo;
}

// The groups the engine forms of `pairs`: by reference when sharing, each
// capped at o.max_twins, or so that `jobs` of them fit in the memory this
// process may use (machine_memory_bytes).
std::vector<std::vector<PairSpec>> groups_of(const std::vector<PairSpec>& pairs,
                                             const EngineOptions& o) {
  int max_twins = o.max_twins > 0 ? o.max_twins : 1 << 20;
  if (o.max_twins <= 0 && o.check_memory && !pairs.empty()) {
    const double machine = machine_memory_bytes();
    if (machine > 0)
      max_twins =
          max_twins_per_group(pairs.front(), o.jobs, o.threads, machine);
  }
  return group_pairs(pairs, o.share, max_twins);
}

// Resume, under the lock: the pairs still missing (another process may have
// finished some since the first read), a crash's half line cut off.
std::vector<PairSpec> resume(const std::vector<PairSpec>& pairs,
                             const EngineOptions& o, EngineOutcome* out) {
  const ResultsFile existing =
      read_results(o.results_path, /*missing_ok=*/true);
  std::vector<PairSpec> todo = missing(existing, pairs);
  out->already = pairs.size() - todo.size();
  if (todo.empty())
    return todo;
  if (existing.missing_newline)
    drop_truncated_tail(existing);  // adds the newline; the record stays
  if (existing.truncated_tail) {
    drop_truncated_tail(existing);
    out->dropped_truncated = true;
    if (!o.quiet) {
      fmt::print(o.log,
                 "{}: cut off a truncated last line (a record interrupted "
                 "mid-write); its pair runs again\n",
                 o.results_path);
    }
  }
  if (!o.quiet && out->already > 0) {
    fmt::print(o.log, "{}: {} of {} pairs already recorded; running {}\n",
               o.results_path, out->already, pairs.size(), todo.size());
  }
  return todo;
}

std::string snapshot_dir(const EngineOptions& o, const PairSpec& spec) {
  return (fs::path(o.save_models) / twins::snapshot_name(spec)).string();
}

// --save-models, before the first step: the folder writable, and each
// pair's snapshot folder absent or a folder (a rerun replaces its files).
// Says that pairs already recorded are not saved: they do not train again.
void check_save_targets(const std::vector<PairSpec>& todo, size_t already,
                        const EngineOptions& o) {
  if (o.save_models.empty())
    return;
  twins::check_output_directory(o.save_models, "--save-models");
  for (const auto& p : todo) {
    const std::string dir = snapshot_dir(o, p);
    std::error_code ec;
    TORCH_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec),
                "--save-models: '", dir,
                "' exists and is not a directory (where pair '",
                twins::pair_label(p), "' would be saved)");
    if (fs::is_directory(dir, ec)) {
      for (const std::string& f :
           {std::string(twins::kSnapshotSpecFile),
            std::string(twins::kSnapshotModelFiles[0]),
            std::string(twins::kSnapshotModelFiles[1])})
        twins::check_output_file((fs::path(dir) / f).string(), "--save-models");
    } else {
      twins::check_output_directory(dir, "--save-models");
    }
  }
  if (already > 0) {
    fmt::print(o.log,
               "twin-run: note: --save-models: {} pair(s) already recorded in "
               "{} do not train again, so their models are not saved; only "
               "the {} pair(s) run now are\n",
               already, o.results_path, todo.size());
  }
}

// A group to run: its pairs still missing, and the name of its checkpoint.
struct Group {
  std::vector<PairSpec> pairs;
  // Its reference's state key, and its first pair's key too where the
  // reference's pairs are split over several groups (--no-share, or groups
  // capped to fit in memory).
  std::string state_id;
};

// The groups of the whole job list, less the pairs already recorded: a
// resumed run forms the very groups the first run formed, and so finds
// their checkpoints, however many of their pairs were recorded since (a
// pair that diverges is recorded at once). Largest first, so that with
// several job slots the longest work starts early and the small groups
// fill in (a group's cost is about its number of models).
std::vector<Group> order(const std::vector<PairSpec>& pairs,
                         const std::vector<PairSpec>& todo,
                         const EngineOptions& o) {
  const auto whole = groups_of(pairs, o);
  std::map<std::string, int> groups_of_reference;
  for (const auto& g : whole)
    ++groups_of_reference[twins::group_state_key(g.front())];
  std::set<std::string> to_run;
  for (const auto& p : todo)
    to_run.insert(p.key());
  std::vector<Group> groups;
  for (const auto& g : whole) {
    Group left;
    for (const auto& p : g) {
      if (to_run.count(p.key()))
        left.pairs.push_back(p);
    }
    if (left.pairs.empty())
      continue;
    left.state_id = twins::group_state_key(g.front());
    if (groups_of_reference[left.state_id] > 1)
      left.state_id += "|" + g.front().key();
    groups.push_back(std::move(left));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group& a, const Group& b) {
                     return a.pairs.size() > b.pairs.size();
                   });
  return groups;
}

// Slots: the groups on o.jobs job slots, each pair's record appended as it
// ends. On an error no new group starts; the running ones finish and are
// recorded, then the first error is rethrown.
class Slots {
 public:
  // `trains`: the runner trains the groups (and so keeps their state).
  Slots(std::vector<Group> groups, size_t pairs, const EngineOptions& o,
        GroupRunner runner, bool trains, EngineOutcome* out)
      : groups_(std::move(groups)),
        o_(o),
        runner_(std::move(runner)),
        trains_(trains),
        out_(out),
        sink_(o.results_path),
        progress_(pairs, groups_.size(), o.quiet, o.log) {
    if (o_.counts) {
      o_.counts->pairs = pairs;
      int64_t steps = 0;
      for (const auto& g : groups_)
        steps += g.pairs.front().last_step();
      o_.counts->steps = steps;
    }
  }

  void run() {
    // One thread per model: a model's reductions never depend on how many
    // models or groups run beside it.
    twins::set_threads(1);
    name_state_files();
    twins::run_on_threads(groups_.size(), static_cast<size_t>(o_.jobs),
                          [this](size_t g, size_t slot) { group(g, slot); });
  }

 private:
  // Each group's checkpoint: named by its state id.
  void name_state_files() {
    if (!o_.state.enabled() || !trains_)
      return;
    for (const auto& g : groups_) {
      state_files_.push_back(
          (fs::path(state_dir(o_.results_path)) /
           (data::sha256_hex(g.state_id).substr(0, 16) + ".ckpt"))
              .string());
    }
  }

  // A write killed before its rename leaves "<file>.tmp<pid>" beside the
  // file; the results file's lock keeps every other writer out, so any
  // such file is a dead process's.
  static void remove_unfinished_writes(const std::string& file) {
    const fs::path f(file);
    const std::string prefix = f.filename().string() + ".tmp";
    std::error_code ec;
    if (!fs::is_directory(f.parent_path(), ec))
      return;
    for (const auto& e : fs::directory_iterator(f.parent_path(), ec)) {
      if (e.path().filename().string().rfind(prefix, 0) == 0)
        fs::remove(e.path(), ec);
    }
  }

  void group(size_t g, size_t slot) {
    progress_.begin(slot, g, groups_[g].pairs);
    twins::GroupOptions go;
    go.threads = o_.threads;
    if (!state_files_.empty()) {
      go.state_file = state_files_[g];
      remove_unfinished_writes(go.state_file);
      go.state = o_.state;
      go.note = [this](const std::string& line) {
        std::lock_guard<std::mutex> lock(mutex_);
        fmt::print(o_.log, "{}\n", line);
      };
    }
    int64_t counted = 0;  // this group's steps in o_.counts
    go.progress = [&](int64_t t) {
      progress_.step(slot, t);
      if (o_.counts) {
        o_.counts->steps_done += t - counted;
        counted = t;
      }
    };
    go.pair_done = [&](const twins::PairResult& r, int64_t step,
                       model::Transformer& ref, model::Transformer& twin) {
      record(slot, r, step, ref, twin);
    };
    try {
      runner_(groups_[g].pairs, go);
    } catch (const twins::Stopped& e) {
      progress_.finish_group(slot);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        fmt::print(o_.log, "{}\n", e.what());
      }
      throw;
    } catch (...) {
      progress_.finish_group(slot);
      throw;
    }
    progress_.finish_group(slot);
    if (o_.counts)  // a group whose pairs all diverged ends early
      o_.counts->steps_done += groups_[g].pairs.front().last_step() - counted;
    // Every pair of the group is recorded: its state is of no more use.
    if (!go.state_file.empty()) {
      std::error_code ec;
      fs::remove(go.state_file, ec);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++out_->groups;
    out_->models += groups_[g].pairs.size() + 1;
  }

  void record(size_t slot, const twins::PairResult& r, int64_t step,
              model::Transformer& ref, model::Transformer& twin) {
    nlohmann::json j = twins::to_json(r);
    if (!o_.table.empty())
      j["table"] = o_.table;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sink_.append(j);
      ++out_->ran;
      if (o_.counts)
        ++o_.counts->pairs_done;
    }
    // After the record: a save that fails (a full disk) loses the models,
    // never the measurement.
    if (!o_.save_models.empty())
      twins::save_pair(snapshot_dir(o_, r.spec), r.spec, step, ref, twin);
    progress_.end(slot, r);
  }

  const std::vector<Group> groups_;
  const EngineOptions& o_;
  const GroupRunner runner_;
  const bool trains_;
  EngineOutcome* out_;
  JsonlSink sink_;
  Progress progress_;
  std::vector<std::string> state_files_;  // per group; empty: none
  std::mutex mutex_;  // the sink, the counters and the log
};

// While groups run with checkpoints: SIGTERM, SIGUSR1 and SIGINT ask every
// group to write its state and stop at its next step (twins::Stopped). A
// second SIGTERM or SIGINT ends the process at once, as without them.
extern "C" void on_stop_signal(int signal) {
  twins::request_stop(signal);
  if (signal != SIGUSR1)
    ::signal(signal, SIG_DFL);
}

class StopSignals {
 public:
  explicit StopSignals(bool install) : installed_(install) {
    if (!installed_)
      return;
    twins::clear_stop();
    struct sigaction sa = {};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;  // other threads' reads and writes go on
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i)
      ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~StopSignals() {
    if (!installed_)
      return;
    for (size_t i = 0; i < kSignals.size(); ++i)
      ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGTERM, SIGUSR1, SIGINT};
  bool installed_;
  std::array<struct sigaction, 3> old_{};
};

void train_group(const std::vector<PairSpec>& group,
                 const twins::GroupOptions& options) {
  twins::run_group(group, options);
}

// The job list's own checks: the engine's settings and no pair twice.
void check_job_list(const std::vector<PairSpec>& pairs,
                    const EngineOptions& o) {
  check_run(pairs, o);
  std::set<std::string> ids;
  for (const auto& p : pairs) {
    TORCH_CHECK(ids.insert(p.pair_id()).second, "job list has pair ",
                twins::pair_label(p), " twice");
  }
}

}  // namespace

std::string state_dir(const std::string& results_path) {
  return results_path + ".ckpt";
}

void check_run(const std::vector<PairSpec>& pairs, const EngineOptions& o) {
  TORCH_CHECK(o.jobs >= 1, "Invalid --jobs: ", o.jobs, " (must be >= 1)");
  TORCH_CHECK(o.threads >= 1, "Invalid --threads: ", o.threads,
              " (must be >= 1)");
  if (o.check_memory)
    check_memory(groups_of(pairs, o), o.jobs, o.threads);
}

EngineOutcome run_sweep(const std::vector<PairSpec>& pairs,
                        const EngineOptions& o, const GroupRunner& runner) {
  check_job_list(pairs, o);
  EngineOutcome out;
  // Validate what is there before creating or locking anything.
  const ResultsFile before = read_results(o.results_path, /*missing_ok=*/true);
  const std::vector<PairSpec> first_todo = missing(before, pairs);
  out.already = pairs.size() - first_todo.size();
  if (!first_todo.empty()) {
    // Its records and this run's must be bitwise comparable.
    check_one_environment(before.records,
                          &twins::numeric_env(pairs.front().device),
                          o.allow_mixed_env, "resume into a new --out", o.log);
    check_save_targets(first_todo, out.already, o);
    const bool existed = fs::exists(o.results_path);
    FileLock lock(o.results_path);
    const std::vector<PairSpec> todo = resume(pairs, o, &out);
    if (!todo.empty()) {
      const auto t0 = Clock::now();
      // Leave no empty file behind when the lock created it.
      auto remove_if_empty = [&] {
        std::error_code ec;
        if (!existed && out.ran == 0)
          fs::remove(o.results_path, ec);
      };
      try {
        // Saved pairs measured by another runner keep no state: a signal
        // then ends the process as it would without checkpoints.
        const StopSignals signals(o.state.enabled() && o.stop_signals &&
                                  !runner);
        Slots(order(pairs, todo, o), todo.size(), o,
              runner ? runner : train_group,
              !runner, &out)
            .run();
      } catch (const twins::Stopped& e) {
        remove_if_empty();
        throw twins::Stopped(
            e.signal(),
            fmt::format("stopped by {}: {} pair(s) recorded now in {}; the "
                        "groups that had trained are checkpointed in {}/",
                        twins::signal_name(e.signal()), out.ran,
                        o.results_path, state_dir(o.results_path)));
      } catch (...) {
        remove_if_empty();
        throw;
      }
      out.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
      // The checkpoint folder goes with its last checkpoint.
      std::error_code ec;
      if (o.state.enabled() && fs::is_empty(state_dir(o.results_path), ec))
        fs::remove(state_dir(o.results_path), ec);
    }
  }
  out.records =
      job_records(read_results(o.results_path, /*missing_ok=*/true), pairs);
  return out;
}

}  // namespace sweep
