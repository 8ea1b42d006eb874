#include "sweep/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "sweep/estimate.h"
#include "sweep/slots.h"
#include "sweep/tables.h"
#include "twins/corpus.h"
#include "twins/device.h"
#include "twins/environment.h"
#include "twins/io.h"
#include "twins/pair.h"
#include "twins/record.h"

namespace sweep {

namespace fs = std::filesystem;
using twins::PairSpec;

// ===========================================================================
// Resume

namespace {

// Why `record` (of the same pair as `spec`) has another key, in words.
std::string key_difference(const StoredRecord& record, const PairSpec& spec) {
  const int schema = twins::record_schema(record.json);
  if (schema != twins::kRecordSchema) {
    return fmt::format(
        "was written with record schema {} and this twin-run writes schema "
        "{}",
        schema, twins::kRecordSchema);
  }
  const std::string hparams =
      twins::hparams_difference(record.result.spec.hparams, spec.hparams);
  if (!hparams.empty()) {
    return fmt::format(
        "was run with other {} hyperparameters ({}: file vs this run)",
        spec.opt, hparams);
  }
  if (record.result.spec.merge_at != spec.merge_at) {
    return "was run with other --merge-at steps";
  }
  const std::string corpus = twins::corpus_difference(record.result.spec, spec);
  if (!corpus.empty())
    return corpus;
  return fmt::format("has key '{}', this run '{}'", record.key, spec.key());
}

}  // namespace

std::vector<StoredRecord> job_records(const ResultsFile& file,
                                      const std::vector<PairSpec>& pairs) {
  std::map<std::string, const StoredRecord*> by_id;  // first of each pair
  for (const auto& record : file.records) {
    by_id.emplace(record.result.spec.pair_id(), &record);
  }
  std::vector<StoredRecord> out;
  for (const auto& pair : pairs) {
    auto it = by_id.find(pair.pair_id());
    if (it == by_id.end())
      continue;
    const StoredRecord& record = *it->second;
    TORCH_CHECK(record.key == pair.key(), "results file '", file.path,
                "', line ", record.line, ": pair '", twins::pair_label(pair),
                "' ", key_difference(record, pair),
                "; resume into a new --out (or move the file away) rather "
                "than mix the two");
    out.push_back(record);
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
  for (const auto& record : job_records(file, pairs))
    have.insert(record.key);
  std::vector<PairSpec> todo;
  for (const auto& pair : pairs) {
    if (!have.count(pair.key()))
      todo.push_back(pair);
  }
  return todo;
}

// The groups the engine forms of `pairs`: by reference when sharing, each
// capped at options.max_twins, or so that `jobs` of them fit in the memory
// this process may use (machine_memory_bytes).
std::vector<std::vector<PairSpec>> groups_of(const std::vector<PairSpec>& pairs,
                                             const EngineOptions& options) {
  int max_twins = options.max_twins > 0 ? options.max_twins : 1 << 20;
  if (options.max_twins <= 0 && options.check_memory && !pairs.empty()) {
    const double machine = machine_memory_bytes();
    if (machine > 0)
      max_twins = max_twins_per_group(pairs.front(), options.jobs,
                                      options.threads, machine);
  }
  return group_pairs(pairs, options.share, max_twins);
}

// Resume, under the lock: the pairs still missing (another process may have
// finished some since the first read), a crash's half line cut off.
std::vector<PairSpec> resume(const std::vector<PairSpec>& pairs,
                             const EngineOptions& options,
                             EngineOutcome* outcome) {
  const ResultsFile existing =
      read_results(options.results_path, /*missing_ok=*/true);
  std::vector<PairSpec> todo = missing(existing, pairs);
  outcome->already = pairs.size() - todo.size();
  if (todo.empty())
    return todo;
  if (existing.missing_newline)
    drop_truncated_tail(existing);  // adds the newline; the record stays
  if (existing.truncated_tail) {
    drop_truncated_tail(existing);
    outcome->dropped_truncated = true;
    if (!options.quiet) {
      fmt::print(options.log,
                 "{}: cut off a truncated last line (a record interrupted "
                 "mid-write); its pair runs again\n",
                 options.results_path);
    }
  }
  if (!options.quiet && outcome->already > 0) {
    fmt::print(options.log, "{}: {} of {} pairs already recorded; running {}\n",
               options.results_path, outcome->already, pairs.size(),
               todo.size());
  }
  return todo;
}

// --save-models, before the first step: the folder writable, and each
// pair's snapshot folder absent or a folder (a rerun replaces its files).
// Says that pairs already recorded are not saved: they do not train again.
void check_save_targets(const std::vector<PairSpec>& todo, size_t already,
                        const EngineOptions& options) {
  if (options.save_models.empty())
    return;
  twins::check_output_directory(options.save_models, "--save-models");
  for (const auto& pair : todo) {
    const std::string dir = snapshot_dir(options, pair);
    std::error_code ec;
    TORCH_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec),
                "--save-models: '", dir,
                "' exists and is not a directory (where pair '",
                twins::pair_label(pair), "' would be saved)");
    if (fs::is_directory(dir, ec)) {
      for (const std::string& file :
           {std::string(twins::kSnapshotSpecFile),
            std::string(twins::kSnapshotModelFiles[0]),
            std::string(twins::kSnapshotModelFiles[1])})
        twins::check_output_file((fs::path(dir) / file).string(),
                                 "--save-models");
    } else {
      twins::check_output_directory(dir, "--save-models");
    }
  }
  if (already > 0) {
    fmt::print(options.log,
               "twin-run: note: --save-models: {} pair(s) already recorded in "
               "{} do not train again, so their models are not saved; only "
               "the {} pair(s) run now are\n",
               already, options.results_path, todo.size());
  }
}

// The groups of the whole job list, less the pairs already recorded: a
// resumed run forms the very groups the first run formed, and so finds
// their checkpoints (twins::checkpoint_paths), however many of their pairs
// were recorded since (a pair that diverges is recorded at once). Largest
// first, so that with several job slots the longest work starts early and
// the small groups fill in (a group's cost is about its number of models).
std::vector<Group> order(const std::vector<PairSpec>& pairs,
                         const std::vector<PairSpec>& todo,
                         const EngineOptions& options, bool checkpointed) {
  const auto whole = groups_of(pairs, options);
  const std::vector<std::string> paths =
      checkpointed ? twins::checkpoint_paths(options.results_path, whole)
                   : std::vector<std::string>(whole.size());
  std::set<std::string> to_run;
  for (const auto& pair : todo)
    to_run.insert(pair.key());
  std::vector<Group> groups;
  for (size_t index = 0; index < whole.size(); ++index) {
    Group left;
    for (const auto& pair : whole[index]) {
      if (to_run.count(pair.key()))
        left.pairs.push_back(pair);
    }
    if (left.pairs.empty())
      continue;
    left.checkpoint_path = paths[index];
    groups.push_back(std::move(left));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group& first, const Group& second) {
                     return first.pairs.size() > second.pairs.size();
                   });
  return groups;
}

// The job list's own checks: the engine's settings and no pair twice.
void check_job_list(const std::vector<PairSpec>& pairs,
                    const EngineOptions& options) {
  check_run(pairs, options);
  std::set<std::string> ids;
  for (const auto& pair : pairs) {
    TORCH_CHECK(ids.insert(pair.pair_id()).second, "job list has pair ",
                twins::pair_label(pair), " twice");
  }
}

// Runs the groups of `todo` under the results file's lock; `existed`: the
// file was there before the lock. Leaves no empty file behind when the run
// created it and recorded nothing.
void run_groups(const std::vector<PairSpec>& pairs,
                const std::vector<PairSpec>& todo, const EngineOptions& options,
                SavedPairs* saved, bool existed, EngineOutcome* outcome) {
  const auto start = Clock::now();
  auto remove_if_empty = [&] {
    std::error_code ec;
    if (!existed && outcome->ran == 0)
      fs::remove(options.results_path, ec);
  };
  const bool checkpointed = options.state.enabled() && !saved;
  try {
    const twins::StopSignals signals(checkpointed && options.stop_signals);
    std::vector<Group> groups = order(pairs, todo, options, checkpointed);
    for (const Group& group : groups) {
      if (!group.checkpoint_path.empty())
        twins::GroupCheckpoint(group.checkpoint_path, options.state)
            .check_before_start(group.pairs.front());
    }
    run_in_slots(std::move(groups), todo.size(), options, saved, outcome);
  } catch (const twins::Stopped& stopped) {
    remove_if_empty();
    throw twins::Stopped(
        stopped.signal(),
        fmt::format("stopped by {}: {} pair(s) recorded now in {}; the "
                    "groups that had trained are checkpointed in {}/",
                    twins::signal_name(stopped.signal()), outcome->ran,
                    options.results_path,
                    twins::checkpoint_folder(options.results_path)));
  } catch (...) {
    remove_if_empty();
    throw;
  }
  outcome->wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (checkpointed)
    twins::remove_empty_checkpoint_folder(options.results_path);
}

}  // namespace

void check_run(const std::vector<PairSpec>& pairs,
               const EngineOptions& options) {
  TORCH_CHECK(options.jobs >= 1, "Invalid --jobs: ", options.jobs,
              " (must be >= 1)");
  TORCH_CHECK(options.threads >= 1, "Invalid --threads: ", options.threads,
              " (must be >= 1)");
  if (options.check_memory)
    check_memory(groups_of(pairs, options), options.jobs, options.threads);
}

// The setting of a table's pair as its records show it (steps, dtype,
// device, protocol; a --stop-after run continues into the full run's file
// and is not another setting): config_name of its overrides.
std::string table_setting(const std::string& table, const PairSpec& pair) {
  TableOverrides o = overrides_of(table, pair);
  o.stop_after = 0;
  return config_name(table, o);
}

// One results file per table and setting: records of another table (or of
// runs that are not a table), or of this table at other steps, dtype,
// device or protocol, are refused before anything is written, so that a
// table's summaries never describe another's records
// (docs/output-format.md).
void check_one_table(const ResultsFile& file, const std::vector<PairSpec>& pairs,
                     const EngineOptions& options) {
  auto named = [](const std::string& table) {
    return table.empty() ? std::string("runs that are not a table")
                         : "table " + table;
  };
  const std::string setting = options.table.empty() || pairs.empty()
                                  ? std::string()
                                  : table_setting(options.table, pairs.front());
  std::set<std::string> keys, rules;  // listed_rates_only: the job list's
  if (options.listed_rates_only) {
    for (const PairSpec& pair : pairs) {
      keys.insert(pair.key());
      rules.insert(pair.opt);
    }
  }
  for (const StoredRecord& record : file.records) {
    const std::string table = record.json.value("table", "");
    TORCH_CHECK(table == options.table, "--out '", options.results_path,
                "' holds records of ", named(table), " (line ", record.line,
                ") and this run writes ", named(options.table),
                ": one results file per table, use another --out");
    if (setting.empty())
      continue;
    const std::string theirs = table_setting(table, record.result.spec);
    TORCH_CHECK(theirs == setting, "--out '", options.results_path,
                "' holds table ", table, " at another setting (", theirs,
                ", line ", record.line, ") and this run is ", setting,
                ": one results file per setting, use another --out");
    const PairSpec& spec = record.result.spec;
    TORCH_CHECK(!options.listed_rates_only || keys.count(record.key) > 0 ||
                    rules.count(spec.opt) == 0,
                "--default-rates: --out '", options.results_path, "' holds ",
                spec.opt, " at lr ", spec.lr, " (line ", record.line,
                "), a rate other than its default: its summary, of the "
                "default rates alone, would replace that census's; run "
                "without --default-rates, or use another --out");
  }
}

EngineOutcome run_sweep(const std::vector<PairSpec>& pairs,
                        const EngineOptions& options, SavedPairs* saved) {
  check_job_list(pairs, options);
  EngineOutcome outcome;
  // Validate what is there before creating or locking anything.
  const ResultsFile before =
      read_results(options.results_path, /*missing_ok=*/true);
  check_one_table(before, pairs, options);
  const std::vector<PairSpec> first_todo = missing(before, pairs);
  outcome.already = pairs.size() - first_todo.size();
  if (!first_todo.empty()) {
    // Its records and this run's must be bitwise comparable.
    check_one_environment(
        before.records, &twins::numeric_env(pairs.front().device),
        options.allow_mixed_env, "resume into a new --out", options.log);
    check_save_targets(first_todo, outcome.already, options);
    const bool existed = fs::exists(options.results_path);
    FileLock lock(options.results_path);
    const std::vector<PairSpec> todo = resume(pairs, options, &outcome);
    if (!todo.empty())
      run_groups(pairs, todo, options, saved, existed, &outcome);
  }
  outcome.records = job_records(
      read_results(options.results_path, /*missing_ok=*/true), pairs);
  return outcome;
}

}  // namespace sweep
