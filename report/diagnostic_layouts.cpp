// The sections of the diagnostics beyond the paper, on the Table-3 model:
// the optimizer zoo's verdicts (docs/protocol.md §10), the Adam-p dial
// (§5) and head merging (§9).
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <tuple>

#include "optim/registry.h"
#include "report/gauges.h"
#include "report/sections.h"
#include "report/summary.h"
#include "report/verdict.h"

namespace report {

using twins::PairResult;
using twins::TwinKind;

namespace {

// ===========================================================================
// The zoo

// The class the registry predicts for `opt`, "–" for an unknown name.
std::string predicted(const std::string& opt) {
  return optim::has_optimizer(opt) ? std::string(optim::to_string(
                                         optim::find_optimizer(opt).predicted))
                                   : std::string("–");
}

// The class predicted for the verdict's rule and gauge (report/gauges.h).
std::optional<optim::Equivariance> predicted_class(const Verdict& verdict) {
  return predicted_for(verdict.opt, verdict.gauge);
}

bool verdict_as_predicted(const Verdict& verdict) {
  const auto predicted = predicted_class(verdict);
  return predicted && as_predicted(verdict, *predicted);
}

// One zoo row: the verdict's labels and the figures it rests on.
Section::Row zoo_row(const Verdict& verdict) {
  Section::Row row;
  const auto predicted = predicted_class(verdict);
  row.labels = {
      verdict_name(verdict), predicted ? optim::to_string(*predicted) : "–",
      verdict_label(verdict), verdict_as_predicted(verdict) ? "yes" : "NO"};
  row.figures = {value(verdict.gauge_step1, 1, Unit::kDrift),
                 value(verdict.noise_step1, 1, Unit::kDrift),
                 value(verdict.onset_ratio_step1, 1, Unit::kRatio),
                 value(double(verdict.moved_at), 1, Unit::kStep),
                 value(verdict.separation, 1, Unit::kRatio),
                 value(verdict.commutation_ratio, 1, Unit::kRatio),
                 value(verdict.roundtrip_onset, 1, Unit::kDrift),
                 value(verdict.gauge_final, 1, Unit::kDrift),
                 value(verdict.roundtrip_final, 1, Unit::kDrift),
                 value(verdict.identity_max, 1, Unit::kDrift)};
  return row;
}

std::string zoo_rules_note(size_t agree, size_t verdicts) {
  return fmt::format(
      "{} of {} verdicts as predicted. Rules (docs/protocol.md §10): invalid "
      "if the A=I twin is ever non-zero; did not move if copy 1's parameters "
      "never change; basis-dependent if, from the step the rule first moved "
      "the parameters, the gauge twin's logit drift exceeds {:g}x the round "
      "trip's (every rotation applied and undone: the gauge's own rounding) "
      "at some checkpoint (separation) and its update error exceeds {:g}x "
      "the round trip's at one of the first {} steps (commutation); "
      "undetermined if only one does; unresolved in the run's precision if "
      "neither does but the round trip is above {:g} at the first moving "
      "checkpoint (round trip at onset); else equivariant, \"(chaotic)\" "
      "when the round trip ends above {:g}. The 1e-5 noise twin's ratio at "
      "step 1 (the paper's onset ratio) is a record of sensitivity.",
      agree, verdicts, kSeparation, kSeparation, twins::kCommutationSteps,
      kResolution, kChaoticFinalDrift);
}

// ===========================================================================
// The dial

Figure drift(double v) {
  return value(v, 1, Unit::kDrift);
}

// Monotone in p: each step-1 drift at least the one of the next smaller p
// (points are sorted by p). The float floor: p = 0's step-1 drift within
// 10x of the step-0 drift, the rounding of the gauge itself.
std::string dial_checks_note(const std::vector<DialPoint>& points) {
  bool monotone = true;
  for (size_t i = 1; i < points.size(); ++i) {
    monotone = monotone && points[i].step1 >= points[i - 1].step1;
  }
  const DialPoint& lo = points.front();
  const DialPoint& hi = points.back();
  return fmt::format(
      "Step-1 drift {} as p goes to 0 ({} at p = {:g} down to {} at p = "
      "{:g}); at p = {:g} it is {} the float floor ({}x the step-0 drift "
      "{}, floor: within 10x).",
      monotone ? "falls monotonically" : "does NOT fall monotonically",
      drift(hi.step1).text(), hi.p, drift(lo.step1).text(), lo.p, lo.p,
      lo.step1 <= 10 * lo.step0 ? "at" : "NOT at",
      fmt::format("{:.2g}", lo.step1 / lo.step0), drift(lo.step0).text());
}

// ===========================================================================
// Head merging

using twins::MergePoint;

using MergeColumn = std::pair<const char*, double (*)(const MergePoint&)>;

// The merge section's figure columns: what each reads off a merge point.
const MergeColumn kMergeColumns[] = {
    {"barrier naive", [](const MergePoint& m) { return m.naive.barrier; }},
    {"barrier aligned", [](const MergePoint& m) { return m.aligned.barrier; }},
    {"residual (mean)",
     [](const MergePoint& m) { return m.alignment.residual_mean; }},
    {"residual (max)",
     [](const MergePoint& m) { return m.alignment.residual_max; }},
    {"QK drift (mean)", [](const MergePoint& m) { return m.qk_drift_mean; }},
    {"rotation error (mean)",
     [](const MergePoint& m) { return m.alignment.rotation_error_mean; }},
    {"rotation error (max)",
     [](const MergePoint& m) { return m.alignment.rotation_error_max; }},
};

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

// Shown when some record aligned the value/output side (NaN where a point
// did not).
const MergeColumn kValueColumns[] = {
    {"VO residual (mean)",
     [](const MergePoint& m) {
       return m.values ? m.values->residual_mean : kNone;
     }},
    {"VO drift (mean)",
     [](const MergePoint& m) { return m.values ? m.vo_drift_mean : kNone; }},
    {"VO rotation error (mean)",
     [](const MergePoint& m) {
       return m.values ? m.values->rotation_error_mean : kNone;
     }},
};

// Shown when some record has the unrestricted comparison (rotary positions).
const MergeColumn kUnrestrictedColumns[] = {
    {"barrier unrestricted",
     [](const MergePoint& m) {
       return m.unrestricted ? m.unrestricted->path.barrier : kNone;
     }},
    {"unrestricted residual (mean)",
     [](const MergePoint& m) {
       return m.unrestricted ? m.unrestricted->alignment.residual_mean : kNone;
     }},
    {"unrestricted rotation error (mean)",
     [](const MergePoint& m) {
       return m.unrestricted ? m.unrestricted->alignment.rotation_error_mean
                             : kNone;
     }},
};

// The columns of `all`'s merge section: the optional ones only when some
// merge point has them, so the paper's attention keeps its table.
std::vector<MergeColumn> merge_columns(const Records& all) {
  bool values = false, unrestricted = false;
  for (const auto& r : all) {
    for (const auto& m : r.merges) {
      values = values || m.values.has_value();
      unrestricted = unrestricted || m.unrestricted.has_value();
    }
  }
  std::vector<MergeColumn> columns(std::begin(kMergeColumns),
                                   std::end(kMergeColumns));
  if (values)
    columns.insert(columns.end(), std::begin(kValueColumns),
                   std::end(kValueColumns));
  if (unrestricted)
    columns.insert(columns.end(), std::begin(kUnrestrictedColumns),
                   std::end(kUnrestrictedColumns));
  return columns;
}

// One merge row: an optimizer, a twin and a merge checkpoint.
struct MergeKey {
  std::string opt, twin;
  int64_t step;
  bool operator<(const MergeKey& o) const {
    return std::tie(opt, twin, step) < std::tie(o.opt, o.twin, o.step);
  }
};

// The merge points of each row, rows in first-seen order.
std::vector<std::pair<MergeKey, std::vector<const MergePoint*>>> merge_rows(
    const Records& all) {
  std::vector<std::pair<MergeKey, std::vector<const MergePoint*>>> rows;
  std::map<MergeKey, size_t> index;
  for (const auto& r : all) {
    for (const auto& m : r.merges) {
      const MergeKey k{r.spec.opt, twins::twin_label(r.spec), m.step};
      auto [it, fresh] = index.emplace(k, rows.size());
      if (fresh) {
        rows.push_back({k, {}});
      }
      rows[it->second].second.push_back(&m);
    }
  }
  return rows;
}

}  // namespace

// ===========================================================================
// Sections

// The zoo: one row per optimizer, the class the registry predicts beside
// the verdict (report/verdict.h) on its four pairs; optimizers whose four
// pairs are not all recorded yet as pending.
std::optional<Section> zoo_section(const Inputs& in) {
  const Records& all = in.records;
  Section s = section_of(
      "zoo", "Predicted class against the measured verdict",
      {"optimizer", "predicted", "measured", "as predicted"},
      {"gauge, step 1", "noise 1e-5, step 1", "ratio, step 1", "moved at",
       "separation", "commutation", "round trip at onset", "gauge, final",
       "round trip, final", "A=I, any step"});
  std::vector<std::pair<std::string, size_t>> pending;
  const std::vector<Verdict> verdicts = judge_all(all, &pending);
  size_t agree = 0;
  for (const Verdict& v : verdicts) {
    agree += verdict_as_predicted(v);
    s.rows.push_back(zoo_row(v));
  }
  for (const auto& [opt, n] : pending) {
    Section::Row row;
    row.labels = {opt, predicted(opt),
                  fmt::format("pending ({} of 5 pairs)", n), "–"};
    row.figures.assign(s.columns.size(), Figure{});
    s.rows.push_back(std::move(row));
  }
  s.notes.push_back(zoo_rules_note(agree, verdicts.size()));
  return s;
}

// The dial: Adam-p gauge drift against p, with the two properties the
// dial should show checked in the notes.
std::optional<Section> dial_section(const Inputs& in) {
  const Records& all = in.records;
  Section s = section_of(
      "dial", "Adam-p gauge twins: drift against the exponent p", {"p", "init"},
      {"step 0", "step 1", "step 100", "final", "QK final"});
  const std::vector<DialPoint> points = dial_points(all);
  for (const auto& d : points) {
    Section::Row row;
    row.labels = {fmt::format("{:g}", d.p), std::to_string(d.init_seed)};
    row.figures = {drift(d.step0), drift(d.step1), drift(d.step100),
                   drift(d.final), drift(d.qk_final)};
    s.rows.push_back(std::move(row));
  }
  if (points.size() >= 2) {
    s.notes.push_back(dial_checks_note(points));
  }
  s.notes.push_back("```\n" + format_dial_plot(points) + "```");
  return s;
}

// Head merging (docs/protocol.md §9): per optimizer, twin and merge
// checkpoint, the loss barrier of the naive and of the aligned average, the
// alignment residual, the invariant's drift and, for gauge twins, how far
// the fitted rotation is from the twin's own.
std::optional<Section> merge_section(const Inputs& in) {
  const Records& all = in.records;
  const std::vector<MergeColumn> columns = merge_columns(all);
  std::vector<std::string> names;
  for (const auto& [name, get] : columns) {
    names.push_back(name);
  }
  Section s = section_of(
      "merge",
      "Loss barrier between the twins, naive and after per-head alignment",
      {"optimizer", "twin", "step"}, names);
  for (const auto& [k, points] : merge_rows(all)) {
    Section::Row row;
    row.labels = {display_name(k.opt), k.twin, std::to_string(k.step)};
    for (const auto& [name, get] : columns) {
      std::vector<double> v;
      for (const MergePoint* m : points) {
        v.push_back(get(*m));
      }
      row.figures.push_back(range_of(v, Unit::kDrift));
    }
    s.rows.push_back(std::move(row));
  }
  s.notes.push_back(
      "Barrier: max over lambda in {0, 0.1, ..., 1} of the validation loss "
      "of (1 - lambda) copy 1 + lambda copy 2 above the straight line between "
      "the two copies' losses. Aligned: copy 2's W_Q, W_K rows of every head "
      "rotated first by the orthogonal Procrustes fit R_h to copy 1's. "
      "Residual: ||W1_h - R_h W2_h|| / ||W1_h|| over the stacked Q/K rows. "
      "Rotation error: ||R_h - A_h^T||_F, the fitted rotation against the "
      "inverse of the gauge twin's own A_h (gauge twins only). "
      "docs/protocol.md §9.");
  const bool gauges =
      columns.size() > std::size(kMergeColumns) ||
      std::any_of(all.begin(), all.end(), [](const PairResult& r) {
        return r.spec.rope || r.spec.kv_head_count() != r.spec.heads;
      });
  if (gauges) {
    s.notes.push_back(
        "Under grouped-query attention one R per key/value head, fitted on "
        "its rows of W_K and those of its query heads. VO: the value/output "
        "side (twins that rotate it), one R per value head fitted on its rows "
        "of W_V and its query heads' columns of W_O, applied before the "
        "barrier aligned. Under --rope the Q/K fit is restricted to the "
        "rotations of each frequency pair (the gauge there); unrestricted: "
        "the Q/K fit over all orthogonal matrices, which changes the "
        "function under rotary positions (the comparison).");
  }
  return s;
}

// ===========================================================================
// Which records are whose

bool all_adam_p_gauge(const Records& all) {
  return std::all_of(all.begin(), all.end(), [](const PairResult& r) {
    return r.spec.opt.rfind("adam-p", 0) == 0 &&
           r.spec.twin == TwinKind::kGauge;
  });
}

bool all_merged(const Records& all) {
  return std::all_of(all.begin(), all.end(),
                     [](const PairResult& r) { return !r.merges.empty(); });
}

}  // namespace report
