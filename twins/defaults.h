// The learning rates of the protocol and of the optimizer zoo, per task
// family (docs/protocol.md §5): the one table that plans, tables, the
// benchmark, --list-optimizers and the docs read. The other defaults of a
// task (model shape, steps, batch stream) are data::task_defaults.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "twins/spec.h"

namespace twins {

// The default learning rate of optimizer `opt` on `task` (mod<p> or
// charlm). Every Adam-p name (adam-p, adam-p0.25, ...) takes the dial's one
// rate, Adam's, so that adam-p1 is adam and the dial moves only the
// denominator. A name the table does not list takes the rate it was
// registered with (OptimizerInfo::lr); throws naming the optimizer when it
// has none (then pass --lr).
double default_lr(const std::string& opt, const std::string& task);

// (optimizer, lr on mod<p>, lr on charlm) for every row of the table, in
// registry order where the registry has the name.
struct LrRow {
  std::string opt;
  double mod = 0;
  double charlm = 0;
};
std::vector<LrRow> lr_table();

// The (optimizer, twin) rows of the paper's Table 3 (docs/protocol.md §7):
// what a run without --opt and --twin trains, and the rows Table-3 reports
// list first.
std::vector<std::pair<std::string, TwinKind>> table3_rows();

// A pair at every default of its task and optimizer: the task's shape,
// steps and batch stream (data::task_defaults), the optimizer's learning
// rate for the task and its registered hyperparameters; init seed 42, the
// default twin seed of `twin`. What plans start from and the benchmark
// times.
PairSpec default_spec(const std::string& task, const std::string& opt,
                      TwinKind twin = TwinKind::kGauge);

}  // namespace twins
