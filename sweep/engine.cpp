#include "sweep/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "sweep/estimate.h"
#include "sweep/progress.h"
#include "twins/corpus.h"
#include "twins/device.h"
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

// The groups the engine forms of `todo`: by reference when sharing, each
// capped so that `jobs` of them fit in this machine's memory.
std::vector<std::vector<PairSpec>> groups_of(const std::vector<PairSpec>& todo,
                                             const EngineOptions& o) {
  const double machine = machine_memory_bytes();
  const int max_twins =
      o.check_memory && machine > 0 && !todo.empty()
          ? max_twins_per_group(todo.front(), o.jobs, o.threads, machine)
          : 1 << 20;
  return group_pairs(todo, o.share, max_twins);
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

// Order: largest groups first, so that with several job slots the longest
// work starts early and the small groups fill in (a group's cost is about
// its number of models).
std::vector<std::vector<PairSpec>> order(const std::vector<PairSpec>& todo,
                                         const EngineOptions& o) {
  auto groups = groups_of(todo, o);
  std::stable_sort(
      groups.begin(), groups.end(),
      [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return groups;
}

// Slots: the groups on o.jobs job slots, each pair's record appended as it
// ends. On an error no new group starts; the running ones finish and are
// recorded, then the first error is rethrown.
class Slots {
 public:
  Slots(std::vector<std::vector<PairSpec>> groups, size_t pairs,
        const EngineOptions& o, GroupRunner runner, EngineOutcome* out)
      : groups_(std::move(groups)),
        o_(o),
        runner_(std::move(runner)),
        out_(out),
        sink_(o.results_path),
        progress_(pairs, groups_.size(), o.quiet, o.log) {}

  void run() {
    // One thread per model: a model's reductions never depend on how many
    // models or groups run beside it.
    twins::set_threads(1);
    twins::run_on_threads(groups_.size(), static_cast<size_t>(o_.jobs),
                          [this](size_t g, size_t slot) { group(g, slot); });
  }

 private:
  void group(size_t g, size_t slot) {
    progress_.begin(slot, g, groups_[g]);
    twins::GroupOptions go;
    go.threads = o_.threads;
    go.progress = [&](int64_t t) { progress_.step(slot, t); };
    go.pair_done = [&](const twins::PairResult& r, int64_t step,
                       model::Transformer& ref, model::Transformer& twin) {
      record(slot, r, step, ref, twin);
    };
    try {
      runner_(groups_[g], go);
    } catch (...) {
      progress_.finish_group(slot);
      throw;
    }
    progress_.finish_group(slot);
    std::lock_guard<std::mutex> lock(mutex_);
    ++out_->groups;
    out_->models += groups_[g].size() + 1;
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
    }
    // After the record: a save that fails (a full disk) loses the models,
    // never the measurement.
    if (!o_.save_models.empty())
      twins::save_pair(snapshot_dir(o_, r.spec), r.spec, step, ref, twin);
    progress_.end(slot, r);
  }

  const std::vector<std::vector<PairSpec>> groups_;
  const EngineOptions& o_;
  const GroupRunner runner_;
  EngineOutcome* out_;
  JsonlSink sink_;
  Progress progress_;
  std::mutex mutex_;  // the sink and the counters
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
  const std::vector<PairSpec> first_todo =
      missing(read_results(o.results_path, /*missing_ok=*/true), pairs);
  out.already = pairs.size() - first_todo.size();
  if (!first_todo.empty()) {
    check_save_targets(first_todo, out.already, o);
    const bool existed = fs::exists(o.results_path);
    FileLock lock(o.results_path);
    const std::vector<PairSpec> todo = resume(pairs, o, &out);
    if (!todo.empty()) {
      const auto t0 = Clock::now();
      try {
        Slots(order(todo, o), todo.size(), o, runner ? runner : train_group,
              &out)
            .run();
      } catch (...) {
        // Leave no empty file behind when the lock created it.
        std::error_code ec;
        if (!existed && out.ran == 0)
          fs::remove(o.results_path, ec);
        throw;
      }
      out.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }
  out.records =
      job_records(read_results(o.results_path, /*missing_ok=*/true), pairs);
  return out;
}

}  // namespace sweep
