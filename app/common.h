// What every command does with the entry point's outcome in the report
// layer's terms (sweep/ does not see report/): the aggregate of a table,
// a merge or results files, written beside its results.
#pragma once

#include <string>
#include <vector>

#include "sweep/command.h"

namespace app {

// Aggregates the outcome's records in its layout against its job lists and
// writes <summary_stem>.md, .csv (and with `plot` the figures), printing
// the Markdown (report/output.h).
void write_aggregate(const sweep::CommandOutcome& outcome, bool plot);

// The layout name of records that name no table (report::infer_layout),
// for CommandRequest::layout_of.
std::string inferred_layout(const std::vector<twins::PairResult>& results);

}  // namespace app
