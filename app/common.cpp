#include "app/common.h"

#include "bridge/bridge.h"
#include "report/aggregate.h"
#include "report/output.h"

namespace app {

void write_aggregate(const sweep::CommandOutcome& o, bool plot) {
  const std::vector<twins::PairResult> results = o.results();
  std::vector<report::Expected> expected;
  for (const auto& t : o.expected)
    expected.push_back({t.name, t.title, t.deviations, t.pairs});
  report::Aggregate a =
      report::aggregate(report::parse_layout(o.layout), results, expected);
  a.notes.insert(a.notes.end(), o.notes.begin(), o.notes.end());
  report::write_outputs(a, results, o.summary_stem, plot, a.title);
}

sweep::CommandRequest with_python_rules(sweep::CommandRequest r,
                                        const std::string& opt_args) {
  r.plan.opts = bridge::resolve_rules(r.plan.opts, opt_args);
  return r;
}

std::string inferred_layout(const std::vector<twins::PairResult>& results) {
  return report::infer_layout(results).name;
}

}  // namespace app
