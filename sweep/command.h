// The one entry point of every command that trains or measures pairs (the
// default run, `verdict`, `table`, `merge`, `merge --models`) and of
// re-aggregating results files (`table --aggregate`), in four phases:
//   validate: every value of the request, before anything is read or
//             written (one-line errors naming the value);
//   resolve:  the job list (fully resolved PairSpecs, or the saved pairs),
//             the device, the results file and where its summaries go;
//   run:      the engine (sweep/engine.h) against the results file;
//   results:  the job list's records, with what a report needs to
//             aggregate them.
// The Markdown, CSV, figures and the lines a person reads are the report
// layer's (report/output.h, report/command_lines.h), which sweep/ does not
// see: the caller hands the outcome over to it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sweep/engine.h"
#include "sweep/parallelism.h"
#include "sweep/plan.h"
#include "sweep/tables.h"

namespace sweep {

enum class CommandKind {
  kRun,         // the pairs of `plan` (the Table-3 set by default)
  kVerdict,     // verdict_specs(plan): the diagnostic twins per optimizer
  kTable,       // the named table `table`, `overrides` applied, one shard
  kMerge,       // the pairs of `plan` merged at plan.merge_at (default: 1,
                // 100 and the last step)
  kMergeSaved,  // the pairs saved under `models`, measured as saved
  kAggregate,   // the records of `inputs`, nothing run
};

// A command as its flags ask for it, every list already parsed.
struct CommandRequest {
  explicit CommandRequest(CommandKind kind = CommandKind::kRun) : kind(kind) {}
  CommandKind kind;
  PlanRequest plan;  // run, verdict, merge: the pairs; merge --models: the
                     // device only
  std::string table;         // table: its name; aggregate: read the records
                             // as this table (empty: each record's own)
  TableOverrides overrides;  // table
  std::string shard;         // table: "I/N", this machine's part; empty: all
  std::string models;        // merge --models: a directory of saved pairs
  std::vector<std::string> inputs;  // aggregate: results files
  // results_path: --out, empty for the command's default under runs/;
  // threads: the command's default is default_threads(kind); table and log
  // are the command's own.
  EngineOptions engine;
  // Whether engine.jobs / engine.threads were asked for (--jobs, --threads).
  // One that was not is derived from the CPUs of a SLURM task when the
  // process runs as one (resolve_parallelism); a request built in code
  // keeps the values it sets.
  bool jobs_given = true;
  bool threads_given = true;
  // aggregate: the layout name of records that name no table (the report
  // layer's report::infer_layout).
  std::function<std::string(const std::vector<twins::PairResult>&)> layout_of;
};

struct CommandOutcome {
  CommandKind kind = CommandKind::kRun;
  std::string results_path;  // the results file (aggregate: the first)
  // Where the aggregate goes: <stem>.md, <stem>.csv and the figures (table,
  // merge, aggregate); empty for run and verdict, which print a summary.
  std::string summary_stem;
  std::string layout;           // the aggregate's layout; empty: none
  std::vector<Table> expected;  // the job lists the records fill; empty:
                                // every record counts
  std::vector<std::string> notes;  // for the aggregate (a shard's part)
  EngineOutcome run;  // the records, in job-list order, and the counts
  std::vector<twins::PairResult> results() const;
};

// Models of a group trained at once unless --threads says otherwise: a
// table's groups are many, one thread each; a list of pairs puts the
// copies of a pair side by side.
int default_threads(CommandKind kind);

// Validates, resolves and runs `request` (see the top of this file).
// Throws a one-line error, before any file is created, for anything the
// request gets wrong; see run_sweep for errors while running.
CommandOutcome run_command(const CommandRequest& request);

// Throws a one-line error naming a table override's dtype or protocol that
// is not one (`table` and `table --list` check them first).
void check_overrides(const TableOverrides& overrides);

}  // namespace sweep
