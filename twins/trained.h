// Whether a pair trained: the census's test of a learning rate
// (docs/results.md, "The census"), read by the job list that tries more
// rates for a rule its default did not train and by the census's table,
// and those rates.
#pragma once

#include <vector>

#include "twins/result.h"

namespace twins {

// Trained: copy 1's training loss at the last step at most this fraction
// of its loss at step 0. The validation loss is not the test: on the
// modular tasks it rises while the training set is memorised, long before
// it generalises (Adam on mod-47: 4.01 at step 0, 4.23 at step 50).
constexpr double kTrainedLossFraction = 0.5;

// The loss at step 0 is the initial model's validation loss (no training
// step has run, so the training loss is not recorded there). False for a
// pair that did not train through every step (diverged, failed) or has no
// checkpoint.
inline bool trained(const PairResult& result) {
  if (!result.ok() || result.curve.empty())
    return false;
  return result.train_loss[0] <=
         kTrainedLossFraction * result.curve.front().val_loss[0];
}

// The rates the census tries for a rule its library's default rate did not
// train, each with the verdict's five twins (docs/results.md, "The
// census"); the default itself is left out.
inline std::vector<double> census_rates() { return {1e-4, 1e-3, 1e-2, 0.1, 1}; }

}  // namespace twins
