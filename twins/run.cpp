#include "twins/run.h"

#include "twins/record.h"

namespace twins {

std::vector<PairResult> run_pairs(const std::vector<PairSpec>& specs,
                                  JsonlSink& sink, ProgressPrinter& progress,
                                  bool concurrent_copies) {
  std::vector<PairResult> results;
  for (size_t i = 0; i < specs.size(); ++i) {
    progress.begin_pair(i, specs.size(), specs[i]);
    PairResult r = run_pair(
        specs[i], [&](int64_t t) { progress.step(t); }, concurrent_copies);
    sink.append(to_json(r));
    progress.end_pair(r);
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace twins
