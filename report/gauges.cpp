#include "report/gauges.h"

#include <fmt/format.h>

#include <cmath>

#include "report/sections.h"
#include "report/verdict.h"

namespace report {

using optim::Equivariance;
using twins::TwinKind;

const std::vector<GaugePrediction>& gauge_predictions() {
  constexpr Equivariance kEq = Equivariance::kEquivariant;
  constexpr Equivariance kBd = Equivariance::kBasisDependent;
  static const std::vector<GaugePrediction> kList = {
      {"adam", "a second moment per entry: a rotation mixes the entries", kBd,
       "the same per-entry second moment of W_V and W_O"},
      {"sgd", "linear in the gradient", kEq, "linear in the gradient"},
      {"scalar-adam", "one denominator for all parameters, a norm", kEq,
       "the same shared denominator"},
      {"muon",
       "the polar factor of an update rotated on one side is rotated the "
       "same way",
       kEq,
       "the same for W_V (rows) and W_O (columns): every matrix is Muon's"},
      {"rmsprop", "a second moment per entry", kBd,
       "a second moment per entry"},
      {"signum", "the sign of each entry", kBd, "the sign of each entry"},
      {"lion", "the sign of each entry", kBd, "the sign of each entry"},
      {"adafactor",
       "row sums of g^2: the rows of a head block mix under the rotation", kBd,
       "row sums of W_V's g^2 and column sums of W_O's mix under the "
       "rotation"},
      {"shampoo", "L^-1/4 G R^-1/4: L turns with the rows, R is unchanged", kEq,
       "the same on either side: W_V's L turns with its rows, W_O's R with "
       "its columns"},
      {"adam-p0.5", "a per-entry factor in the denominator", kBd,
       "a per-entry factor in the denominator"},
      {"soap",
       "Adam in the eigenbases of L and R, which turn with the gradient", kEq,
       "both sides preconditioned: W_V's left and W_O's right basis turn "
       "with it"},
      {"soap-right",
       "only the right side preconditioned: Adam on G Q_R sees the rows "
       "rotated",
       kBd,
       "W_V's rows turn on the side it leaves alone (W_O's columns are "
       "absorbed by Q_R)"},
      {"adam-mini", "one second moment per head block of W_Q, W_K", kBd,
       "one second moment per row: W_V's rows mix within a head (W_O's row "
       "norms are kept)"},
      {"normuon", "each row normalised by its own mean square: the rows mix",
       kBd, "W_V's rows mix under the row normalisation (W_O's rows are kept)"},
      {"adamuon", "a second moment per entry of the orthogonalised update", kBd,
       "a second moment per entry"},
      {"scion-col",
       "column norms of G: a left rotation keeps each column's norm", kBd,
       "W_O's columns mix under its rotation, so their norms change (W_V "
       "alone would be equivariant)"},
      {"scion-row", "row norms of G: the rows of a head block mix", kBd,
       "W_V's rows mix (W_O's row norms are kept)"},
      {"shampoo-graft", "the step's norm grafted from Adam's per-entry step",
       kBd, "the same per-entry grafting norm"},
      {"muon-torch", "the polar factor, scaled by the matrix's shape only", kEq,
       "the same for W_V and W_O"},
      {"cautious-sgd", "a per-entry mask 1[b g > 0]", kBd, "a per-entry mask"},
      {"cautious-adam", "a per-entry mask and second moment", kBd,
       "a per-entry mask and second moment"},
  };
  return kList;
}

namespace {

const GaugePrediction* find_prediction(const std::string& opt) {
  for (const GaugePrediction& p : gauge_predictions()) {
    if (opt == p.rule)
      return &p;
  }
  return nullptr;
}

std::optional<Equivariance> qk_class(const std::string& opt) {
  if (!optim::has_optimizer(opt))
    return std::nullopt;
  return optim::find_optimizer(opt).predicted;
}

std::optional<Equivariance> vo_class(const std::string& opt) {
  const GaugePrediction* p = find_prediction(opt);
  return p ? std::optional<Equivariance>(p->vo) : std::nullopt;
}

}  // namespace

std::optional<Equivariance> predicted_for(const std::string& opt,
                                          TwinKind kind) {
  switch (kind) {
    case TwinKind::kGaugeVo:
      return vo_class(opt);
    case TwinKind::kGaugeAll: {
      const auto qk = qk_class(opt), vo = vo_class(opt);
      if (!qk || !vo)
        return std::nullopt;
      return *qk == Equivariance::kEquivariant && *vo == *qk
                 ? Equivariance::kEquivariant
                 : Equivariance::kBasisDependent;
    }
    case TwinKind::kGaugeFull:
      return Equivariance::kBasisDependent;
    default:
      return qk_class(opt);
  }
}

std::string prediction_reason(const std::string& opt, TwinKind kind) {
  const GaugePrediction* p = find_prediction(opt);
  switch (kind) {
    case TwinKind::kGaugeFull:
      return "not a symmetry under rotary positions";
    case TwinKind::kGaugeVo:
      return p ? p->vo_reason : "";
    case TwinKind::kGaugeAll:
      return p ? fmt::format("QK: {}; VO: {}", p->qk_reason, p->vo_reason) : "";
    default:
      return p ? p->qk_reason : "";
  }
}

std::optional<Section> gauges_section(const Inputs& in) {
  const Records& all = in.records;
  Section s = section_of(
      "gauges", "Predicted class against the verdict, per gauge",
      {"optimizer", "gauge", "predicted", "measured", "as predicted"},
      {"gauge, step 1", "separation", "commutation", "round trip at onset",
       "gauge, final", "QK drift, final", "VO drift, final", "A=I, any step"});
  std::vector<std::pair<std::string, size_t>> pending;
  size_t agree = 0, judged = 0;
  for (const Verdict& v : judge_all(all, &pending)) {
    const auto predicted = predicted_for(v.opt, v.gauge);
    const bool as = predicted && as_predicted(v, *predicted);
    agree += as;
    ++judged;
    double qk_final = std::nan(""), vo_final = std::nan("");
    for (const auto& r : all) {
      if (r.spec.opt == v.opt && r.spec.twin == v.gauge && !r.curve.empty()) {
        qk_final = r.curve.back().qk_drift_mean;
        vo_final = r.curve.back().vo_drift_mean;
      }
    }
    Section::Row row;
    row.labels = {v.opt, twins::to_string(v.gauge),
                  predicted ? optim::to_string(*predicted) : "–",
                  verdict_label(v), as ? "yes" : "NO"};
    row.figures = {value(v.gauge_step1, 1, Unit::kDrift),
                   value(v.separation, 1, Unit::kRatio),
                   value(v.commutation_ratio, 1, Unit::kRatio),
                   value(v.roundtrip_onset, 1, Unit::kDrift),
                   value(v.gauge_final, 1, Unit::kDrift),
                   value(qk_final, 1, Unit::kDrift),
                   value(vo_final, 1, Unit::kDrift),
                   value(v.identity_max, 1, Unit::kDrift)};
    s.rows.push_back(std::move(row));
  }
  if (s.rows.empty() && pending.empty())
    return std::nullopt;
  for (const auto& [opt, n] : pending) {
    Section::Row row;
    row.labels = {opt, "–", "–", fmt::format("pending ({} pairs)", n), "–"};
    row.figures.assign(s.columns.size(), Figure{});
    s.rows.push_back(std::move(row));
  }
  s.notes.push_back(fmt::format(
      "{} of {} verdicts as predicted; the verdict's rules as in the zoo "
      "(docs/protocol.md §10), each gauge twin judged against the same "
      "identity, round-trip and noise twins (the round trip undoes every "
      "rotation of gauge-all). The reasons:",
      agree, judged));
  std::string reasons;
  for (const GaugePrediction& p : gauge_predictions()) {
    reasons += fmt::format("- {}: QK {}: {}; VO {}: {}\n", p.rule,
                           optim::to_string(*qk_class(p.rule)), p.qk_reason,
                           optim::to_string(p.vo), p.vo_reason);
  }
  s.notes.push_back(reasons);
  return s;
}

}  // namespace report
