// What a command prints besides its tables and figures: the closing line
// of a run, and the listing of the named tables with their cost. The
// numbers come from sweep/ (its outcome, its estimates); the app hands them
// over in these terms, since report/ does not see sweep/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace report {

// What a command did with its job list.
struct RunTally {
  enum class Kind {
    kTrained,        // the pairs still missing were trained
    kMeasuredSaved,  // merge --models: saved pairs measured
    kNothingRun,     // table --aggregate: records read only
  };
  Kind kind = Kind::kTrained;
  size_t records = 0;        // the job list's records in the file
  size_t ran = 0;            // pairs run now
  size_t groups = 0;         // groups run now
  size_t models = 0;         // models trained now
  size_t already = 0;        // pairs the file held before
  double wall_s = 0;         // seconds spent running pairs
  std::string results_path;  // the results file
};

// The closing line: "7 pair(s): 7 run now (4 group(s), 11 models trained)
// in 185.2 s, 0 already recorded; records in runs/x.jsonl", "2 saved
// pair(s) measured; records in m.jsonl"; empty when nothing ran.
std::string outcome_line(const RunTally& tally);

// One named table of `table --list` and what it costs, group by group (a
// group: the pairs that share copy 1, or one pair with --no-share).
struct TableListRow {
  std::string name;
  size_t pairs = 0;
  size_t models = 0;  // distinct models: each group's twins + copy 1
  int64_t steps = 0;
  std::string dtype;
  size_t tasks = 0;      // groups: the most array tasks (shards) it can use
  double total_s = 0;    // every group, one after the other, one thread
  double longest_s = 0;  // the longest group on one thread (--threads 1)
  int most_models = 0;   // the largest group's models
  double longest_at_most_s = 0;  // the longest group at --threads most_models
  double memory_at_most = 0;     // bytes of the largest group's estimate then
};

// `table --list`: a row per table with its pairs, distinct models (each
// copy 1 once per group when `share`), steps, dtype, estimated wall time at
// 1 and at this machine's cores jobs, the array tasks it can use and its
// longest task at one thread and at one thread per model, with the memory
// that takes; then what the columns mean.
std::string table_list(const std::vector<TableListRow>& rows, bool share);

}  // namespace report
