// A group of pairs that share copy 1, run through its schedule (docs/
// architecture.md, "the flow of one pair"): the group trains in lockstep
// (twins/lockstep.h), is measured at its measurement steps (docs/
// protocol.md §6), ends a pair that diverges, keeps its checkpoint
// (twins/checkpoint.h) and hands each pair's record over as the pair
// ends. A group of one is a pair.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "twins/checkpoint.h"
#include "twins/lockstep.h"
#include "twins/result.h"
#include "twins/spec.h"

namespace twins {

struct GroupOptions {
  int threads = 1;    // models trained at once (see Lockstep)
  Progress progress;  // after each step of copy 1
  // Called once per pair as it ends (diverged, or at the last step), with
  // the record final, the step its models are at and both of them.
  std::function<void(const PairResult& result, int64_t step,
                     model::Transformer& reference, model::Transformer& twin)>
      pair_done;
  // The group's checkpoint; none by default. With one, the group resumes
  // from its file when there is one, writes it as its policy says and when
  // a stop is requested (then throws Stopped), and removes it at the end.
  GroupCheckpoint checkpoint;
};

// Runs the pairs of `specs` (one reference, see Lockstep) through their
// measurement steps. A pair whose copy 1 or copy 2 has a non-finite
// training loss ends there: status diverged, diverged_step set, its curve
// ends at the last measurement before, and the group trains on without it
// (a diverging reference ends every pair). Returns the results in the
// order of `specs`. Throws for an invalid spec (unknown task or optimizer,
// impossible shape, unavailable device).
std::vector<PairResult> run_group(const std::vector<PairSpec>& specs,
                                  const GroupOptions& options = {});

// One pair: run_group of a group of one.
PairResult run_pair(const PairSpec& spec, const Progress& progress = {},
                    int threads = 1);

}  // namespace twins
