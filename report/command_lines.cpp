#include "report/command_lines.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "twins/units.h"

namespace report {

std::string outcome_line(const RunTally& tally) {
  switch (tally.kind) {
    case RunTally::Kind::kNothingRun:
      return "";
    case RunTally::Kind::kMeasuredSaved:
      return fmt::format("{} saved pair(s) measured; records in {}\n",
                         tally.records, tally.results_path);
    case RunTally::Kind::kTrained:
      break;
  }
  return fmt::format(
      "{} pair(s): {} run now ({} group(s), {} models trained) in {:.1f} s, "
      "{} already recorded; records in {}\n",
      tally.records, tally.ran, tally.groups, tally.models, tally.wall_s,
      tally.already, tally.results_path);
}

std::string table_list(const std::vector<TableListRow>& rows, bool share) {
  using twins::format_bytes;
  using twins::format_duration;
  const int cores =
      std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  std::string out = fmt::format(
      "{:<17} {:>5} {:>6} {:>6} {:<8} {:>14} {:>14}  {:>5} {:>8} {:>3} "
      "{:>9} {:>9}\n",
      "table", "pairs", "models", "steps", "dtype", "est. --jobs 1",
      fmt::format("est. --jobs {}", cores), "tasks", "longest", "M", "at M",
      "mem at M");
  for (const TableListRow& row : rows) {
    out += fmt::format(
        "{:<17} {:>5} {:>6} {:>6} {:<8} {:>14} {:>14}  {:>5} {:>8} {:>3} "
        "{:>9} {:>9}\n",
        row.name, row.pairs, row.models, row.steps, row.dtype,
        format_duration(row.total_s),
        format_duration(std::max(row.total_s / cores, row.longest_s)),
        row.tasks, format_duration(row.longest_s), row.most_models,
        format_duration(row.longest_at_most_s),
        format_bytes(row.memory_at_most));
  }
  return out +
         fmt::format(
             "Estimates: the models' matrix-multiply FLOPs at this machine's "
             "measured one-thread rate (docs/performance.md), +-50 %; models "
             "counts each copy 1 once per group of pairs that share it{}; "
             "other load on the machine slows them.\n"
             "tasks: the table's groups, the most array tasks it can use "
             "(--shard I/N gives each task whole groups; beyond N = tasks a "
             "shard is empty). longest: the longest task at N = tasks, its "
             "group on one thread (--threads 1). M: the most models in a "
             "group, the --threads at which each group trains all its models "
             "at once, one CPU per model; at M: the longest task then, about "
             "one model's time; mem at M: the memory estimate of the largest "
             "group at --threads M (sweep/estimate.h).\n",
             share ? "" : " (here: once per pair, --no-share)");
}

}  // namespace report
