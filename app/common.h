// The little every command shares after a sweep: records to results, the
// closing line, and a table's job list in the report layer's terms.
#pragma once

#include <string>
#include <vector>

#include "report/aggregate.h"
#include "sweep/engine.h"
#include "sweep/tables.h"

namespace app {

std::vector<twins::PairResult> results_of(
    const std::vector<sweep::StoredRecord>& records);

// "7 pair(s): 7 run now (4 groups, 11 models) in 185.2 s, 0 already
// recorded; records in runs/x.jsonl"
void print_outcome(const sweep::EngineOutcome& run, const std::string& path);

// A table's job list as the report layer expects it.
report::Expected expected_of(const sweep::Table& table);

}  // namespace app
