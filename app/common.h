// What every command does around the entry point: the Python rules of
// --opt named canonically before it (sweep/ does not see bridge/), and the
// outcome in the report layer's terms after it (sweep/ does not see
// report/): the aggregate of a table, a merge or results files, written
// beside its results.
#pragma once

#include <string>
#include <vector>

#include "report/command_lines.h"
#include "sweep/command.h"

namespace app {

// Aggregates the outcome's records in its layout against its job lists and
// writes <summary_stem>.md, .csv (and with `plot` the figures), printing
// the Markdown (report/output.h).
void write_aggregate(const sweep::CommandOutcome& outcome, bool plot);

// `request` with the Python rules of its --opt list (torch:, py:) resolved
// to their canonical names, `opt_args` (--opt-args) merged into each
// (bridge/bridge.h): what the records and their keys carry.
sweep::CommandRequest with_python_rules(sweep::CommandRequest request,
                                        const std::string& opt_args);

// The closing line of a command (report::outcome_line) from its outcome.
std::string outcome_line(const sweep::CommandOutcome& outcome);

// `table --list` (report::table_list): every named table with its steps,
// dtype and cost (sweep::table_cost) under `overrides`.
std::string table_list(const sweep::TableOverrides& overrides, bool share);

// The layout name of records that name no table (report::infer_layout),
// for CommandRequest::layout_of.
std::string inferred_layout(const std::vector<twins::PairResult>& results);

}  // namespace app
