// A group's checkpoint — its state file (docs/output-format.md,
// "Checkpoints"): everything a group of pairs (twins/pair.h) needs to go on
// from the step it was written at and end with records bitwise equal to a
// run straight through. Not to be confused with the measurement steps of a
// curve (docs/protocol.md §6): a state file may be written at any step.
//
// Every checkpoint decision is made here, by GroupCheckpoint: where a
// group's file lives and what it is called, when a save is due (a period in
// steps or time, a stop request), what is saved and how it is restored,
// what is refused, when a file is removed. run_group only asks it between
// steps; the engine (sweep/engine.h) only names the results file and the
// policy.
//
//
// What the file holds is written and checked by twins/state_file.h; the
// stop requests a group polls between steps are twins/stop.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "twins/result.h"
#include "twins/spec.h"
#include "twins/state_file.h"
#include "twins/stop.h"

namespace twins {

class Lockstep;

// When a group writes its state file. Off unless a period is set.
struct StatePolicy {
  int64_t every_steps = 0;   // at most this many steps apart (0: no bound)
  double every_seconds = 0;  // at most this long apart (0: no bound)
  // A state file that cannot be used (damaged, another configuration,
  // pairs this group does not hold) is removed and its group starts at
  // step 0 with a note; otherwise it is a one-line error.
  bool restart = false;
  bool enabled() const { return every_steps > 0 || every_seconds > 0; }
};

// ---------------------------------------------------------------------------
// Where checkpoints live

// The folder of a results file's checkpoints: "<results>.ckpt".
std::string checkpoint_folder(const std::string& results_path);

// The checkpoint file of each of `groups` (the groups a job list forms,
// each a list of pairs that share copy 1) run into `results_path`: in
// checkpoint_folder(results_path), named after the group's reference — and
// after its first pair too where the reference's pairs form several groups
// (--no-share, a memory cap) — so that a rerun which forms the same groups
// finds them, whichever of their pairs were recorded since.
std::vector<std::string> checkpoint_paths(
    const std::string& results_path,
    const std::vector<std::vector<PairSpec>>& groups);

// Removes checkpoint_folder(results_path) when no checkpoint is left in it
// (every group's records written).
void remove_empty_checkpoint_folder(const std::string& results_path);

// ---------------------------------------------------------------------------
// One group's checkpoint

// How far a group has got beside its models: what a checkpoint restores
// with them.
struct GroupProgress {
  size_t next_measurement = 0;  // index of the next measurement step
  double elapsed_s = 0;         // seconds run, over every resume
};

// One line about a group's checkpoint (written, resumed, restarted).
using CheckpointNote = std::function<void(const std::string& line)>;

// Thrown by GroupCheckpoint::resume when StatePolicy::restart removed an
// unusable file: the caller builds its group anew, so that nothing a
// half-read file put into its models, optimizers or curves survives.
struct StartAfresh {};

class GroupCheckpoint {
 public:
  // No checkpoint: nothing is resumed, written or removed.
  GroupCheckpoint() = default;
  // The state file `path`, written as `policy` says and when a stop is
  // requested; `note` hears of every write, resume and restart.
  GroupCheckpoint(std::string path, StatePolicy policy,
                  CheckpointNote note = {});

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // Before any group of the run trains: the file's place can take a file
  // (its folder a directory this process may write in, no pipe, directory
  // or link at its name), and a file already there is one `reference`'s
  // group can resume (its framing and header: of its configuration and
  // numeric environment; the archive's digest is checked by resume())
  // — so that a bad checkpoint is not found after other groups trained,
  // nor at the first write. With policy.restart an unusable file is left
  // to resume(), which removes it. Throws naming the file.
  void check_before_start(const PairSpec& reference) const;

  // Before the group's first step: restores `group` and the live twins'
  // curves and merges in `results` from the file when there is one (after
  // removing what a process killed mid-write left beside it), and returns
  // the progress it holds; nothing when the group starts at step 0.
  // `measurement_steps`: the group's (checkpoint_steps). A file that cannot
  // be used is a one-line error naming it, or with policy.restart removed
  // with a note, and StartAfresh thrown.
  std::optional<GroupProgress> resume(
      Lockstep& group, std::vector<PairResult>& results,
      const std::vector<int64_t>& measurement_steps);

  // Saves fall due counting from `step`, and from now.
  void count_from(int64_t step);

  // Between two training steps: on a stop request, writes the state (unless
  // the file holds this step, or nothing has trained) and throws Stopped;
  // otherwise writes it when the policy says it is due.
  void between_steps(Lockstep& group, const std::vector<PairResult>& results,
                     const GroupProgress& progress);

  // Every pair of the group is recorded: its file is of no more use.
  void discard() const;

 private:
  using Clock = std::chrono::steady_clock;

  void save(Lockstep& group, const std::vector<PairResult>& results,
            const GroupProgress& progress);
  // Resumes `group` from a file's two parts; a header field missing or of
  // another type is named as damage (load_checked does the work).
  GroupProgress load(const nlohmann::json& header, const std::string& payload,
                     Lockstep& group, std::vector<PairResult>& results,
                     const std::vector<int64_t>& measurement_steps);
  GroupProgress load_checked(const nlohmann::json& header,
                             const std::string& payload, Lockstep& group,
                             std::vector<PairResult>& results,
                             const std::vector<int64_t>& measurement_steps);
  void remove_unfinished_writes() const;
  void say(const std::string& line) const;

  std::string path_;
  StatePolicy policy_;
  CheckpointNote note_;
  int64_t saved_step_ = -1;  // the step the file holds; -1: none
  int64_t period_step_ = 0;  // the last save, or where counting started
  Clock::time_point period_start_ = Clock::now();
};

}  // namespace twins
