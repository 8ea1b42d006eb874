// The gauges of the attention people train (docs/protocol.md §2, §10): the
// class each built-in rule is predicted to have under the QK gauge, the
// value/output gauge and both, with the one-line reason from its update;
// and the gauges table's section, predictions beside the verdicts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "optim/registry.h"
#include "report/aggregate.h"
#include "twins/spec.h"

namespace report {

// One rule's predictions. The QK gauge left-multiplies the row blocks of
// W_Q and W_K (under rotary positions by pair rotations, a subgroup of the
// orthogonal group; under grouped-query attention one matrix per key head
// and its query heads); the VO gauge left-multiplies the row blocks of W_V
// and right-multiplies the column blocks of W_O by their transpose.
struct GaugePrediction {
  const char* rule;
  const char* qk_reason;  // the class is the registry's
  optim::Equivariance vo;
  const char* vo_reason;
};

// The zoo's rules (the paper's and the modern ones), in the zoo's order.
const std::vector<GaugePrediction>& gauge_predictions();

// The class predicted for `opt` under the gauge twin `kind`: the
// registry's for the QK gauge; the list's for gauge-vo; basis-dependent
// when either is for gauge-all; basis-dependent for gauge-full (not a
// symmetry under rotary positions). None for a rule outside the list under
// a VO gauge, or a name the registry does not know.
std::optional<optim::Equivariance> predicted_for(const std::string& opt,
                                                 twins::TwinKind kind);

// The one-line reason of that prediction ("" when there is none).
std::string prediction_reason(const std::string& opt, twins::TwinKind kind);

// The gauges table: per rule and gauge twin, predicted class, verdict and
// the figures it rests on, the VO drift beside the QK drift.
std::optional<Section> gauges_section(const Inputs& in);

}  // namespace report
