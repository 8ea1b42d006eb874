// Job slots: the groups of a run on EngineOptions::jobs slots at once,
// each group trained (twins::run_group) or its saved pairs measured, each
// pair's record appended to the results file as the pair ends. The engine
// (sweep/engine.h) decides what runs; this is how it runs.
#pragma once

#include <string>
#include <vector>

#include "sweep/engine.h"

namespace sweep {

// A group to run: its pairs still missing, and its checkpoint file (empty:
// none).
struct Group {
  std::vector<twins::PairSpec> pairs;
  std::string checkpoint_path;
};

// Where --save-models puts a pair's models.
std::string snapshot_dir(const EngineOptions& options,
                         const twins::PairSpec& spec);

// Runs `groups` (of `pairs` pairs in all) on options.jobs slots; `saved`:
// the saved pairs to measure (null: the groups train). On an error no new
// group starts; the running ones finish and are recorded, then the first
// error is rethrown (a rule's error is a record of status "failed" under
// EngineOptions::record_failures).
void run_in_slots(std::vector<Group> groups, size_t pairs,
                  const EngineOptions& options, SavedPairs* saved,
                  EngineOutcome* outcome);

}  // namespace sweep
