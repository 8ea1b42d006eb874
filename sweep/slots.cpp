#include "sweep/slots.h"

#include <fmt/format.h>

#include <filesystem>
#include <mutex>
#include <new>
#include <set>

#include "sweep/progress.h"
#include "twins/device.h"
#include "twins/pair.h"
#include "twins/record.h"

namespace sweep {

namespace fs = std::filesystem;
using twins::PairSpec;

namespace {

// Slots: the groups on options.jobs job slots, each pair's record appended
// as it ends. On an error no new group starts; the running ones finish and
// are recorded, then the first error is rethrown.
class Slots {
 public:
  // `saved`: the saved pairs to measure (null: the groups train).
  Slots(std::vector<Group> groups, size_t pairs, const EngineOptions& options,
        SavedPairs* saved, EngineOutcome* outcome)
      : groups_(std::move(groups)),
        options_(options),
        saved_(saved),
        outcome_(outcome),
        sink_(options.results_path),
        progress_(pairs, groups_.size(), options.quiet, options.log) {
    if (options_.counts) {
      options_.counts->pairs = pairs;
      int64_t steps = 0;
      for (const auto& group : groups_)
        steps += group.pairs.front().last_step();
      options_.counts->steps = steps;
    }
  }

  void run() {
    // One thread per model: a model's reductions never depend on how many
    // models or groups run beside it.
    twins::set_threads(1);
    twins::run_on_threads(
        groups_.size(), static_cast<size_t>(options_.jobs),
        [this](size_t group, size_t slot) { run_in_slot(group, slot); });
  }

 private:
  void run_in_slot(size_t group, size_t slot) {
    progress_.begin(slot, group, groups_[group].pairs);
    try {
      if (saved_)
        measure_saved(groups_[group].pairs, slot);
      else
        train(groups_[group], slot);
    } catch (const twins::Stopped& stopped) {
      progress_.finish_group(slot);
      say(stopped.what());
      throw;
    } catch (...) {
      progress_.finish_group(slot);
      throw;
    }
    progress_.finish_group(slot);
    std::lock_guard<std::mutex> lock(mutex_);
    ++outcome_->groups;
    outcome_->models += groups_[group].pairs.size() + 1;
  }

  void train(const Group& group, size_t slot) {
    twins::GroupOptions group_options;
    group_options.threads = options_.threads;
    if (!group.checkpoint_path.empty()) {
      group_options.checkpoint = twins::GroupCheckpoint(
          group.checkpoint_path, options_.state,
          [this](const std::string& line) { say(line); });
    }
    int64_t counted = 0;  // this group's steps in options_.counts
    group_options.progress = [&](int64_t step) {
      progress_.step(slot, step);
      if (options_.counts) {
        options_.counts->steps_done += step - counted;
        counted = step;
      }
    };
    std::set<std::string> recorded;   // this group's pairs with a record
    std::exception_ptr write_error;  // a record that could not be written
    group_options.pair_done = [&](const twins::PairResult& result, int64_t step,
                                  model::Transformer& reference,
                                  model::Transformer& twin) {
      try {
        record(slot, result, step, reference, twin);
      } catch (...) {
        write_error = std::current_exception();
        throw;
      }
      recorded.insert(result.spec.key());
    };
    try {
      twins::run_group(group.pairs, group_options);
    } catch (const twins::Stopped&) {
      throw;  // a stop signal: the group resumes from its checkpoint
    } catch (const std::bad_alloc&) {
      throw;  // the machine's limit, not the rule's
    } catch (const std::exception& error) {
      // A rule's error is a c10::Error, or another type where LibTorch's
      // Python layer raised it outside the rule's step().
      if (!options_.record_failures || write_error)
        throw;
      const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
      record_failure(group, slot, recorded,
                     torch_error ? torch_error->what_without_backtrace()
                                 : error.what());
      return;
    }
    if (options_.counts)  // a group whose pairs all diverged ends early
      options_.counts->steps_done += group.pairs.front().last_step() - counted;
  }

  // EngineOptions::record_failures: the group's pairs without a record get
  // one of status "failed"; its checkpoint, if any, is discarded.
  void record_failure(const Group& group, size_t slot,
                      const std::set<std::string>& recorded,
                      const std::string& what) {
    const std::string error = what.substr(0, what.find('\n'));
    if (!group.checkpoint_path.empty())
      twins::GroupCheckpoint(group.checkpoint_path, options_.state).discard();
    for (const auto& spec : group.pairs) {
      if (recorded.count(spec.key()))
        continue;
      const twins::PairResult result = twins::failed_result(spec, error);
      append(twins::to_json(result));
      progress_.end(slot, result);
    }
  }

  void measure_saved(const std::vector<PairSpec>& pairs, size_t slot) {
    for (const auto& spec : pairs) {
      twins::SavedPair& pair = saved_->at(spec.key());
      record(slot, twins::measure_saved(pair), pair.step, pair.m1, pair.m2);
    }
  }

  void record(size_t slot, const twins::PairResult& result, int64_t step,
              model::Transformer& reference, model::Transformer& twin) {
    append(twins::to_json(result));
    // After the record: a save that fails (a full disk) loses the models,
    // never the measurement.
    if (!options_.save_models.empty()) {
      twins::save_pair(snapshot_dir(options_, result.spec), result.spec, step,
                       reference, twin);
    }
    progress_.end(slot, result);
  }

  // A pair's record into the results file, counted.
  void append(nlohmann::json json) {
    if (!options_.table.empty())
      json["table"] = options_.table;
    std::lock_guard<std::mutex> lock(mutex_);
    sink_.append(json);
    ++outcome_->ran;
    if (options_.counts)
      ++options_.counts->pairs_done;
  }

  void say(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex_);
    fmt::print(options_.log, "{}\n", line);
  }

  const std::vector<Group> groups_;
  const EngineOptions& options_;
  SavedPairs* const saved_;
  EngineOutcome* outcome_;
  JsonlSink sink_;
  Progress progress_;
  std::mutex mutex_;  // the sink, the counters and the log
};

}  // namespace

std::string snapshot_dir(const EngineOptions& options, const PairSpec& spec) {
  return (fs::path(options.save_models) / twins::snapshot_name(spec)).string();
}

void run_in_slots(std::vector<Group> groups, size_t pairs,
                  const EngineOptions& options, SavedPairs* saved,
                  EngineOutcome* outcome) {
  Slots(std::move(groups), pairs, options, saved, outcome).run();
}

}  // namespace sweep
