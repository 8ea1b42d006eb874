#include "app/common.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)

#include "bridge/bridge.h"
#include "sweep/estimate.h"
#include "sweep/tables.h"
#include "report/aggregate.h"
#include "report/output.h"

namespace app {

void write_aggregate(const sweep::CommandOutcome& outcome, bool plot) {
  const std::vector<twins::PairResult> results = outcome.results();
  std::vector<report::Expected> expected;
  for (const auto& t : outcome.expected)
    expected.push_back({t.name, t.title, t.deviations, t.pairs, t.census});
  report::Aggregate a = report::aggregate(report::parse_layout(outcome.layout),
                                          results, expected);
  a.notes.insert(a.notes.end(), outcome.notes.begin(), outcome.notes.end());
  // A figure leaves the notes behind: its title says how one table's run
  // is not the paper's configuration (its steps, its dtype).
  std::string title = a.title;
  if (expected.size() == 1 && !expected.front().deviations.empty())
    title += fmt::format(" ({})", fmt::join(expected.front().deviations, ", "));
  report::write_outputs(a, results, outcome.summary_stem, plot, title);
}

sweep::CommandRequest with_python_rules(sweep::CommandRequest request,
                                        const std::string& opt_args) {
  request.plan.opts = bridge::resolve_rules(request.plan.opts, opt_args);
  return request;
}

std::string outcome_line(const sweep::CommandOutcome& outcome) {
  using Kind = report::RunTally::Kind;
  report::RunTally tally;
  tally.kind =
      outcome.kind == sweep::CommandKind::kAggregate    ? Kind::kNothingRun
      : outcome.kind == sweep::CommandKind::kMergeSaved ? Kind::kMeasuredSaved
                                                        : Kind::kTrained;
  tally.records = outcome.run.records.size();
  tally.ran = outcome.run.ran;
  tally.groups = outcome.run.groups;
  tally.models = outcome.run.models;
  tally.already = outcome.run.already;
  tally.wall_s = outcome.run.wall_s;
  tally.results_path = outcome.results_path;
  return report::outcome_line(tally);
}

std::string table_list(const sweep::TableOverrides& overrides, bool share) {
  sweep::check_overrides(overrides);
  std::vector<report::TableListRow> rows;
  std::vector<std::string> run_time_lists;
  for (const auto& name : sweep::table_names(static_cast<bool>(overrides.census))) {
    if (sweep::listed_when_run(name)) {
      run_time_lists.push_back(name);  // enumerating it imports libraries
      continue;
    }
    const sweep::Table table = sweep::make_table(name, overrides);
    const sweep::TableCost cost = sweep::table_cost(table, share);
    const twins::PairSpec& first = table.pairs.front();
    // In TableListRow's order (a test reads every column back).
    rows.push_back({name, cost.pairs, cost.models, first.steps,
                    twins::dtype_name(first.dtype), cost.tasks, cost.total_s,
                    cost.longest_s, cost.most_models, cost.longest_at_most_s,
                    cost.memory_at_most});
  }
  std::string out = report::table_list(rows, share);
  for (const auto& name : run_time_lists)
    out += fmt::format(
        "{}: its rules are those of the installed libraries, enumerated when "
        "it runs (twin-run census lists them; docs/results.md, \"The "
        "census\", gives its cost)\n",
        name);
  return out;
}

std::string inferred_layout(const std::vector<twins::PairResult>& results) {
  return report::infer_layout(results).name;
}

}  // namespace app
