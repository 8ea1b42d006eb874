#include "app/common.h"

#include <fmt/format.h>

namespace app {

std::vector<twins::PairResult> results_of(
    const std::vector<sweep::StoredRecord>& records) {
  std::vector<twins::PairResult> out;
  for (const auto& r : records)
    out.push_back(r.result);
  return out;
}

void print_outcome(const sweep::EngineOutcome& run, const std::string& path) {
  fmt::print(
      "{} pair(s): {} run now ({} group(s), {} models trained) in {:.1f} s, "
      "{} already recorded; records in {}\n",
      run.records.size(), run.ran, run.groups, run.models, run.wall_s,
      run.already, path);
}

report::Expected expected_of(const sweep::Table& t) {
  return {t.name, t.title, t.deviations, t.pairs};
}

}  // namespace app
