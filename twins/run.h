// A run: a list of pairs executed in order, each record appended to the
// results file as soon as its pair ends.
#pragma once

#include <vector>

#include "twins/pair.h"
#include "twins/report.h"
#include "twins/sink.h"

namespace twins {

// concurrent_copies: see run_pair.
std::vector<PairResult> run_pairs(const std::vector<PairSpec>& specs,
                                  JsonlSink& sink, ProgressPrinter& progress,
                                  bool concurrent_copies = false);

}  // namespace twins
