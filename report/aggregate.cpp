#include "report/aggregate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "optim/registry.h"
#include "report/summary.h"
#include "report/verdict.h"
#include "twins/defaults.h"

namespace report {

using twins::PairResult;
using twins::PairSpec;
using twins::TwinKind;

namespace {

// ===========================================================================
// Reading figures off PairResults

// min–max of the finite values.
Figure range_of(const std::vector<double>& values, Unit unit,
                PaperValue p = {}) {
  Figure f;
  f.unit = unit;
  f.paper = std::move(p);
  for (double v : values) {
    if (!std::isfinite(v)) {
      continue;
    }
    f.lo = f.n == 0 ? v : std::min(f.lo, v);
    f.hi = f.n == 0 ? v : std::max(f.hi, v);
    ++f.n;
  }
  return f;
}

Figure max_of(const std::vector<double>& values, Unit unit, PaperValue p = {}) {
  Figure f = range_of(values, unit, std::move(p));
  f.lo = f.hi;
  return f;
}

Figure value(double v, int n, Unit unit, PaperValue p = {}) {
  Figure f;
  f.unit = unit;
  f.paper = std::move(p);
  if (std::isfinite(v) && n > 0) {
    f.lo = f.hi = v;
    f.n = n;
  }
  return f;
}

using Results = std::vector<const PairResult*>;

// Pairs of `opt` and `twin` (and noise `scale`, for noise twins).
Results pick(const std::vector<PairResult>& all, const std::string& opt,
             TwinKind twin, double scale = 0) {
  Results out;
  for (const auto& r : all) {
    if (r.spec.opt != opt || r.spec.twin != twin) {
      continue;
    }
    if (twin == TwinKind::kNoise && r.spec.noise_scale != scale) {
      continue;
    }
    out.push_back(&r);
  }
  return out;
}

std::vector<double> at_step(const Results& rs, int64_t step) {
  std::vector<double> v;
  for (const auto* r : rs) {
    v.push_back(twins::drift_at(*r, step));
  }
  return v;
}

std::vector<double> finals(const Results& rs) {
  std::vector<double> v;
  for (const auto* r : rs) {
    v.push_back(twins::final_drift(*r));
  }
  return v;
}

// The largest |drift| over every checkpoint of the pairs (the identity
// twin's check); n counts pairs.
Figure largest_anywhere(const Results& rs, PaperValue p) {
  Figure f;
  f.unit = Unit::kDrift;
  f.paper = std::move(p);
  for (const auto* r : rs) {
    const double v = twins::largest_drift(*r);  // NaN stays visible
    f.lo = f.hi = f.n == 0 || std::isnan(v) ? v : std::max(f.hi, v);
    ++f.n;
  }
  return f;
}

bool predicted_equivariant(const std::string& opt) {
  return opt != "adam" && optim::has_optimizer(opt) &&
         optim::find_optimizer(opt).predicted ==
             optim::Equivariance::kEquivariant;
}

// ===========================================================================
// Layouts

// docs/protocol.md §7 Table 3: one row per (optimizer, twin, noise scale), the
// paper's rows first, then any other combination the results hold.
std::vector<Section> table3_sections(const std::vector<PairResult>& all) {
  struct RowKey {
    std::string opt;
    TwinKind twin;
    double scale;
    bool operator<(const RowKey& o) const {
      return std::tie(opt, twin, scale) < std::tie(o.opt, o.twin, o.scale);
    }
  };
  std::vector<RowKey> keys;
  std::set<RowKey> seen;
  auto add = [&](const RowKey& k) {
    if (seen.insert(k).second) {
      keys.push_back(k);
    }
  };
  for (const auto& [opt, twin] : twins::table3_rows()) {
    const RowKey k{opt, twin, twin == TwinKind::kNoise ? 1e-7 : 0.0};
    if (!pick(all, k.opt, k.twin, k.scale).empty()) {
      add(k);
    }
  }
  for (const auto& r : all) {
    add({r.spec.opt, r.spec.twin,
         r.spec.twin == TwinKind::kNoise ? r.spec.noise_scale : 0.0});
  }

  std::set<int64_t> steps;
  for (const auto& r : all) {
    steps.insert(r.spec.steps);
  }
  Section s;
  s.id = "table3";
  s.title = "Relative logit drift between the twins";
  s.label_columns = {"optimizer", "twin"};
  s.columns = {"step 0", "step 1", "step 100",
               steps.size() == 1 ? fmt::format("step {}", *steps.begin())
                                 : std::string("last")};
  s.notes.push_back(
      "The paper's value in brackets (its last column is step 1500). A range "
      "a–b spans several pairs of the row.");
  for (const auto& k : keys) {
    const Results rs = pick(all, k.opt, k.twin, k.scale);
    const bool paper_row = k.twin != TwinKind::kNoise || k.scale == 1e-7;
    auto pv = [&](const char* col) {
      return paper_row ? paper(fmt::format("table3/{}/{}/{}", k.opt,
                                           to_string(k.twin), col))
                       : PaperValue{};
    };
    Section::Row row;
    row.labels = {display_name(k.opt), twins::twin_label(rs.front()->spec)};
    row.figures = {range_of(at_step(rs, 0), Unit::kDrift, pv("0")),
                   range_of(at_step(rs, 1), Unit::kDrift, pv("1")),
                   range_of(at_step(rs, 100), Unit::kDrift, pv("100")),
                   range_of(finals(rs), Unit::kDrift, pv("last"))};
    s.rows.push_back(std::move(row));
  }

  // The sentences under Table 3: Adam's QK drift and accuracies.
  Section e;
  e.id = "table3-extra";
  e.title = "Adam gauge twins at the end";
  e.label_columns = {"figure"};
  e.columns = {"measured"};
  e.paper_column = true;
  const Results adam = pick(all, "adam", TwinKind::kGauge);
  std::vector<double> qk, acc, dacc;
  for (const auto* r : adam) {
    qk.push_back(twins::final_qk_drift(*r));
    acc.push_back(r->val_acc[0]);
    acc.push_back(r->val_acc[1]);
    dacc.push_back(std::fabs(r->val_acc[0] - r->val_acc[1]));
  }
  e.rows.push_back(
      {{"final QK drift (mean over heads)"},
       {range_of(qk, Unit::kDrift, paper("table3/adam-qk-final"))}});
  e.rows.push_back(
      {{"validation accuracy, both copies"},
       {range_of(acc, Unit::kAccuracy, paper("table3/adam-val-acc"))}});
  e.rows.push_back(
      {{"Δ validation accuracy between the copies (abs)"},
       {max_of(dacc, Unit::kAccuracy, paper("table3/adam-dacc"))}});
  if (adam.empty()) {
    return {s};
  }
  return {s, e};
}

// Appendix D.5: ranges over seeds and the derived statistics of §6.
std::vector<Section> multiseed_sections(const std::vector<PairResult>& all) {
  Section s;
  s.id = "multiseed";
  s.title = "Multi-seed summary (Appendix D.5)";
  s.label_columns = {"statistic"};
  s.columns = {"measured"};
  s.paper_column = true;
  auto row = [&](std::string label, Figure f) {
    s.rows.push_back({{std::move(label)}, {std::move(f)}});
  };

  const Results gauge = pick(all, "adam", TwinKind::kGauge);
  row("Adam gauge, step-1 drift (min–max)",
      range_of(at_step(gauge, 1), Unit::kDrift,
               paper("multiseed/adam-gauge-step1")));
  row("Adam gauge, final drift (min–max)",
      range_of(finals(gauge), Unit::kDrift,
               paper("multiseed/adam-gauge-final")));
  std::vector<double> dacc;
  for (const auto* r : gauge) {
    dacc.push_back(std::fabs(r->val_acc[0] - r->val_acc[1]));
  }
  row("Adam gauge, Δ validation accuracy between the copies (abs, max)",
      max_of(dacc, Unit::kAccuracy, paper("multiseed/adam-dacc")));

  std::set<double> scales;
  for (const auto& r : all) {
    if (r.spec.opt == "adam" && r.spec.twin == TwinKind::kNoise) {
      scales.insert(r.spec.noise_scale);
    }
  }
  for (double scale : scales) {
    row(fmt::format("Adam noise {}, final drift", twins::format_scale(scale)),
        range_of(finals(pick(all, "adam", TwinKind::kNoise, scale)),
                 Unit::kDrift,
                 paper(fmt::format("multiseed/adam-noise-{}-final",
                                   twins::format_scale(scale)))));
  }

  // Structural and onset ratios against the 100x-stronger (1e-5) noise twin.
  const Results strong = pick(all, "adam", TwinKind::kNoise, 1e-5);
  const Figure gauge_final = range_of(finals(gauge), Unit::kDrift);
  const Figure gauge_step1 = range_of(at_step(gauge, 1), Unit::kDrift);
  const Figure strong_final = range_of(finals(strong), Unit::kDrift);
  const Figure strong_step1 = range_of(at_step(strong, 1), Unit::kDrift);
  row("structural ratio: min final Adam gauge / final noise 1e-5",
      value(gauge_final.lo / strong_final.lo,
            std::min(gauge_final.n, strong_final.n), Unit::kRatio,
            paper("multiseed/structural-ratio")));
  row("onset ratio: min step-1 Adam gauge / step-1 noise 1e-5",
      value(gauge_step1.lo / strong_step1.lo,
            std::min(gauge_step1.n, strong_step1.n), Unit::kRatio));

  for (const char* opt : {"sgd", "scalar-adam"}) {
    row(fmt::format("{} gauge, final drift (max)", display_name(opt)),
        max_of(finals(pick(all, opt, TwinKind::kGauge)), Unit::kDrift,
               paper(fmt::format("multiseed/{}-final-max", opt))));
  }
  row("Muon gauge, final drift (min–max)",
      range_of(finals(pick(all, "muon", TwinKind::kGauge)), Unit::kDrift));

  // The chaos metric pairs each Muon gauge twin with the 1e-7 noise twin of
  // the same init seed.
  const Results muon_noise = pick(all, "muon", TwinKind::kNoise, 1e-7);
  for (const auto* g : pick(all, "muon", TwinKind::kGauge)) {
    const PairResult* n = nullptr;
    for (const auto* c : muon_noise) {
      if (c->spec.init_seed == g->spec.init_seed) {
        n = c;
      }
    }
    row(fmt::format("Muon chaos metric, init {} (gauge seed {}), decades",
                    g->spec.init_seed, g->spec.twin_seed),
        value(
            n ? twins::chaos_metric(*g, *n) : std::nan(""), n ? 1 : 0,
            Unit::kDecades,
            paper(fmt::format("multiseed/muon-chaos-{}", g->spec.init_seed))));
  }
  row("Adam identity (A=I), largest drift at any checkpoint",
      largest_anywhere(pick(all, "adam", TwinKind::kIdentity),
                       paper("multiseed/adam-identity")));
  s.notes.push_back(
      "Ratios use the 100x-stronger noise twin (1e-5); the chaos metric is "
      "the mean |log10(gauge / noise)| over checkpoints after step 100 "
      "(docs/protocol.md §6); below ~0.1 decades a gauge twin is just chaos.");
  return {s};
}

// Table 9: one row per configuration (task and model shape).
std::vector<Section> table9_sections(const std::vector<PairResult>& all) {
  Section s;
  s.id = "table9";
  s.title = "Twin drift at scale and on real text";
  s.label_columns = {"config"};
  s.columns = {"Adam gauge, step 1", "eq., step 1 (worst)", "Adam, final",
               "onset ratio", "A=I, any step"};

  std::map<std::string, std::vector<PairResult>> groups;
  std::vector<std::string> order;
  for (const auto& r : all) {
    const PairSpec& p = r.spec;
    const std::string id =
        fmt::format("{}-{}L-d{}", p.task, p.depth, p.d_model);
    if (!groups.count(id)) {
      order.push_back(id);
    }
    groups[id].push_back(r);
  }
  for (const auto& id : order) {
    const auto& g = groups[id];
    const PairSpec& p = g.front().spec;
    const std::string task =
        p.task == "charlm" ? "char-LM" : "mod-" + p.task.substr(3);
    const Results gauge = pick(g, "adam", TwinKind::kGauge);
    Results eq;
    for (const auto& r : g) {
      if (r.spec.twin == TwinKind::kGauge &&
          predicted_equivariant(r.spec.opt)) {
        eq.push_back(&r);
      }
    }
    const Figure step1 = range_of(at_step(gauge, 1), Unit::kDrift,
                                  paper("table9/" + id + "/adam-step1"));
    const Figure strong1 = range_of(
        at_step(pick(g, "adam", TwinKind::kNoise, 1e-5), 1), Unit::kDrift);
    Section::Row row;
    row.labels = {fmt::format("{}, {}L, d={}", task, p.depth, p.d_model)};
    row.figures = {step1,
                   max_of(at_step(eq, 1), Unit::kDrift,
                          paper("table9/" + id + "/eq-step1")),
                   range_of(finals(gauge), Unit::kDrift,
                            paper("table9/" + id + "/adam-final")),
                   value(step1.lo / strong1.lo, std::min(step1.n, strong1.n),
                         Unit::kRatio, paper("table9/" + id + "/onset")),
                   largest_anywhere(pick(g, "adam", TwinKind::kIdentity),
                                    paper("table9/identity"))};
    s.rows.push_back(std::move(row));
  }
  s.notes.push_back(
      "\"eq.\" is the largest step-1 gauge drift of the equivariant methods "
      "(SGD, scalar-Adam, Muon); the onset ratio is the smallest Adam gauge "
      "step-1 drift over the step-1 drift of the 1e-5 noise twin.");
  return {s};
}

// The zoo: one row per optimizer, the class the registry predicts beside
// the verdict (report/verdict.h) on its four pairs.
std::vector<Section> zoo_sections(const std::vector<PairResult>& all) {
  Section s;
  s.id = "zoo";
  s.title = "Predicted class against the measured verdict";
  s.label_columns = {"optimizer", "predicted", "measured", "as predicted"};
  s.columns = {"gauge, step 1",   "noise 1e-5, step 1",
               "ratio, step 1",   "onset step",
               "onset ratio",     "largest ratio to step 10",
               "gauge, final",    "noise 1e-7, final",
               "track (decades)", "A=I, any step"};
  auto predicted = [](const std::string& opt) {
    return optim::has_optimizer(opt)
               ? std::string(
                     optim::to_string(optim::find_optimizer(opt).predicted))
               : std::string("–");
  };
  std::vector<std::pair<std::string, size_t>> pending;
  const std::vector<Verdict> verdicts = judge_all(all, &pending);
  int agree = 0;
  for (const Verdict& v : verdicts) {
    const bool match = optim::has_optimizer(v.opt) &&
                       as_predicted(v, optim::find_optimizer(v.opt).predicted);
    agree += match;
    Section::Row row;
    row.labels = {v.opt, predicted(v.opt), verdict_label(v),
                  match ? "yes" : "NO"};
    row.figures = {value(v.gauge_step1, 1, Unit::kDrift),
                   value(v.noise_step1, 1, Unit::kDrift),
                   value(v.onset_ratio_step1, 1, Unit::kRatio),
                   value(double(v.onset_step), 1, Unit::kStep),
                   value(v.onset_ratio, 1, Unit::kRatio),
                   value(v.early_ratio, 1, Unit::kRatio),
                   value(v.gauge_final, 1, Unit::kDrift),
                   value(v.noise_final, 1, Unit::kDrift),
                   value(v.track_decades, 1, Unit::kDecades),
                   value(v.identity_max, 1, Unit::kDrift)};
    s.rows.push_back(std::move(row));
  }
  for (const auto& [opt, n] : pending) {
    Section::Row row;
    row.labels = {opt, predicted(opt),
                  fmt::format("pending ({} of 4 pairs)", n), "–"};
    row.figures.assign(s.columns.size(), Figure{});
    s.rows.push_back(std::move(row));
  }
  s.notes.push_back(fmt::format(
      "{} of {} verdicts as predicted. Rules (docs/protocol.md §10): invalid "
      "if the A=I twin is ever non-zero; basis-dependent if at a checkpoint "
      "from step 1 to step {} the gauge twin exceeds {:g}x the 1e-5 noise "
      "twin (the largest such ratio is shown; the onset is taken at the first "
      "step the rule moved the parameters, the paper's step-1 ratio beside "
      "it); else equivariant, \"(chaotic)\" when the gauge twin ends above "
      "{:g} while tracking its 1e-7 noise twin within {:g} decades past step "
      "{} (the track column: the largest |log10(gauge / noise 1e-7)| there).",
      agree, verdicts.size(), kEarlyLastStep, kOnsetRatioThreshold,
      kChaoticFinalDrift, kChaoticTrackDecades, kChaoticPastStep));
  return {s};
}

// The dial: Adam-p gauge drift against p, with the two properties the
// dial should show checked in the notes.
std::vector<Section> dial_sections(const std::vector<PairResult>& all) {
  Section s;
  s.id = "dial";
  s.title = "Adam-p gauge twins: drift against the exponent p";
  s.label_columns = {"p", "init"};
  s.columns = {"step 0", "step 1", "step 100", "final", "QK final"};
  const std::vector<DialPoint> points = dial_points(all);
  for (const auto& d : points) {
    Section::Row row;
    row.labels = {fmt::format("{:g}", d.p), std::to_string(d.init_seed)};
    row.figures = {
        value(d.step0, 1, Unit::kDrift), value(d.step1, 1, Unit::kDrift),
        value(d.step100, 1, Unit::kDrift), value(d.final, 1, Unit::kDrift),
        value(d.qk_final, 1, Unit::kDrift)};
    s.rows.push_back(std::move(row));
  }
  if (points.size() >= 2) {
    // Monotone in p: each step-1 drift at least the one of the next smaller
    // p (points are sorted by p). The float floor: p = 0's step-1 drift
    // within 10x of the step-0 drift, the rounding of the gauge itself.
    bool monotone = true;
    for (size_t i = 1; i < points.size(); ++i) {
      monotone = monotone && points[i].step1 >= points[i - 1].step1;
    }
    const DialPoint& lo = points.front();
    const DialPoint& hi = points.back();
    s.notes.push_back(fmt::format(
        "Step-1 drift {} as p goes to 0 ({} at p = {:g} down to {} at p = "
        "{:g}); at p = {:g} it is {} the float floor ({}x the step-0 drift "
        "{}, floor: within 10x).",
        monotone ? "falls monotonically" : "does NOT fall monotonically",
        value(hi.step1, 1, Unit::kDrift).text(), hi.p,
        value(lo.step1, 1, Unit::kDrift).text(), lo.p, lo.p,
        lo.step1 <= 10 * lo.step0 ? "at" : "NOT at",
        fmt::format("{:.2g}", lo.step1 / lo.step0),
        value(lo.step0, 1, Unit::kDrift).text()));
  }
  s.notes.push_back("```\n" + format_dial_plot(points) + "```");
  return {s};
}

// Head merging (docs/protocol.md §9): per optimizer, twin and merge
// checkpoint, the loss barrier of the naive and of the aligned average, the
// alignment residual, the invariant's drift and, for gauge twins, how far
// the fitted rotation is from the twin's own.
std::vector<Section> merge_sections(const std::vector<PairResult>& all) {
  Section s;
  s.id = "merge";
  s.title =
      "Loss barrier between the twins, naive and after per-head "
      "alignment";
  s.label_columns = {"optimizer", "twin", "step"};
  s.columns = {"barrier naive",       "barrier aligned",
               "residual (mean)",     "residual (max)",
               "QK drift (mean)",     "rotation error (mean)",
               "rotation error (max)"};
  struct RowKey {
    std::string opt, twin;
    int64_t step;
    bool operator<(const RowKey& o) const {
      return std::tie(opt, twin, step) < std::tie(o.opt, o.twin, o.step);
    }
  };
  std::vector<RowKey> order;
  std::map<RowKey, std::vector<const twins::MergePoint*>> rows;
  for (const auto& r : all) {
    for (const auto& m : r.merges) {
      const RowKey k{r.spec.opt, twins::twin_label(r.spec), m.step};
      if (!rows.count(k))
        order.push_back(k);
      rows[k].push_back(&m);
    }
  }
  for (const auto& k : order) {
    auto values = [&](auto&& get) {
      std::vector<double> v;
      for (const auto* m : rows[k])
        v.push_back(get(*m));
      return v;
    };
    using M = twins::MergePoint;
    Section::Row row;
    row.labels = {display_name(k.opt), k.twin, std::to_string(k.step)};
    row.figures = {
        range_of(values([](const M& m) { return m.naive.barrier; }),
                 Unit::kDrift),
        range_of(values([](const M& m) { return m.aligned.barrier; }),
                 Unit::kDrift),
        range_of(values([](const M& m) { return m.alignment.residual_mean; }),
                 Unit::kDrift),
        range_of(values([](const M& m) { return m.alignment.residual_max; }),
                 Unit::kDrift),
        range_of(values([](const M& m) { return m.qk_drift_mean; }),
                 Unit::kDrift),
        range_of(
            values([](const M& m) { return m.alignment.rotation_error_mean; }),
            Unit::kDrift),
        range_of(
            values([](const M& m) { return m.alignment.rotation_error_max; }),
            Unit::kDrift)};
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
  return {s};
}

// ===========================================================================
// Formatting

// 3.9e-3 rather than 3.9e-03.
std::string sci(double v) {
  std::string s = fmt::format("{:.1e}", v);
  const size_t e = s.find('e');
  std::string mant = s.substr(0, e), exp = s.substr(e + 1);
  const bool neg = exp[0] == '-';
  exp = exp.substr(1);
  while (exp.size() > 1 && exp[0] == '0') {
    exp.erase(0, 1);
  }
  return mant + "e" + (neg ? "-" : "") + exp;
}

// 0.77 rather than 7.7e-1, but 2.3e-2 rather than 0.02, as the paper writes.
bool plain(double v) {
  return v == 0 || (std::fabs(v) >= 0.1 && std::fabs(v) < 1000);
}

std::string format_one(double v, Unit unit) {
  if (std::isnan(v)) {
    return "nan";
  }
  switch (unit) {
    case Unit::kDrift:
      if (v == 0) {
        return "0";
      }
      return plain(v) ? fmt::format("{:.2f}", v) : sci(v);
    case Unit::kRatio:
      return std::fabs(v) >= 10 ? fmt::format("{:.0f}x", v)
                                : fmt::format("{:.2g}x", v);
    case Unit::kDecades:
      return fmt::format("{:.2f}", v);
    case Unit::kAccuracy:
      return fmt::format("{:.4f}", v);
    case Unit::kLoss:
      return fmt::format("{:.3f}", v);
    case Unit::kStep:
      return fmt::format("{:.0f}", v);
  }
  return "?";
}

std::string csv_number(double v) {
  return std::isfinite(v) ? fmt::format("{}", v) : std::string();
}

std::string csv_text(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) {
    return s;
  }
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') {
      out += '"';
    }
    out += c;
  }
  return out + "\"";
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    out += (i ? sep : "") + v[i];
  }
  return out;
}

}  // namespace

std::string Figure::text() const {
  if (n == 0) {
    return "–";
  }
  if (lo == hi) {
    return format_one(lo, unit);
  }
  if (unit == Unit::kDrift && !plain(lo) && !plain(hi)) {
    // 3.4–5.4e-3 when both ends share the exponent, as the paper writes.
    const std::string a = sci(lo), b = sci(hi);
    const std::string ea = a.substr(a.find('e')), eb = b.substr(b.find('e'));
    if (ea == eb) {
      return a.substr(0, a.find('e')) + "–" + b;
    }
  }
  return format_one(lo, unit) + "–" + format_one(hi, unit);
}

std::string display_name(const std::string& opt) {
  if (opt == "adam") {
    return "Adam";
  }
  if (opt == "sgd") {
    return "SGD";
  }
  if (opt == "scalar-adam") {
    return "scalar-Adam";
  }
  if (opt == "muon") {
    return "Muon";
  }
  return opt;
}

namespace {

// The results in a canonical order, so that the same records give the same
// output however they were scheduled or merged: the job lists' order, then
// any other record by key.
std::vector<PairResult> canonical_order(std::vector<PairResult> results,
                                        const std::vector<Expected>& lists) {
  std::map<std::string, size_t> position;
  for (const auto& t : lists) {
    for (const auto& p : t.pairs)
      position.emplace(p.key(), position.size());
  }
  std::vector<std::pair<std::pair<size_t, std::string>, size_t>> order;
  for (size_t i = 0; i < results.size(); ++i) {
    const std::string key = results[i].spec.key();
    auto it = position.find(key);
    order.push_back(
        {{it != position.end() ? it->second : position.size(), key}, i});
  }
  std::sort(order.begin(), order.end());
  std::vector<PairResult> out;
  for (const auto& o : order)
    out.push_back(std::move(results[o.second]));
  return out;
}

std::string shown(const std::vector<std::string>& labels, size_t at_most) {
  const size_t n = std::min(labels.size(), at_most);
  return join({labels.begin(), labels.begin() + n}, "; ") +
         (labels.size() > n ? "; ..." : "");
}

}  // namespace

const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::kTable3:
      return "table3";
    case Layout::kMultiSeed:
      return "multiseed";
    case Layout::kTable9:
      return "table9";
    case Layout::kZoo:
      return "zoo";
    case Layout::kDial:
      return "dial";
    case Layout::kMerge:
      return "merge";
  }
  return "?";
}

Layout parse_layout(const std::string& name) {
  for (Layout l : {Layout::kTable3, Layout::kMultiSeed, Layout::kTable9,
                   Layout::kZoo, Layout::kDial, Layout::kMerge}) {
    if (name == to_string(l))
      return l;
  }
  TORCH_CHECK(false, "Unknown table layout: '", name,
              "' (known: table3, multiseed, table9, zoo, dial, merge)");
}

Layout infer_layout(const std::vector<PairResult>& results) {
  auto all = [&](auto&& pred) {
    return std::all_of(results.begin(), results.end(), pred);
  };
  if (all([](const PairResult& r) { return !r.merges.empty(); })) {
    return Layout::kMerge;
  }
  if (all([](const PairResult& r) {
        return r.spec.opt.rfind("adam-p", 0) == 0 &&
               r.spec.twin == TwinKind::kGauge;
      })) {
    return Layout::kDial;
  }
  if (all([](const PairResult& r) { return r.spec.dtype == torch::kDouble; })) {
    return Layout::kTable9;
  }
  std::set<uint64_t> inits;
  for (const auto& r : results)
    inits.insert(r.spec.init_seed);
  return inits.size() > 1 ? Layout::kMultiSeed : Layout::kTable3;
}

Aggregate aggregate(Layout layout, const std::vector<PairResult>& unordered,
                    const std::vector<Expected>& lists) {
  // With job lists, only their records: another configuration's records
  // (other steps, dtype, optimizer settings) must not enter the figures.
  std::set<std::string> listed;
  for (const auto& t : lists) {
    for (const auto& p : t.pairs)
      listed.insert(p.key());
  }
  std::vector<PairResult> kept;
  std::vector<std::string> left_out;
  for (const auto& r : unordered) {
    if (lists.empty() || listed.count(r.spec.key())) {
      kept.push_back(r);
    } else {
      left_out.push_back(twins::pair_label(r.spec) + " " +
                         fmt::format("{} steps {}", r.spec.task, r.spec.steps) +
                         " " + twins::dtype_name(r.spec.dtype));
    }
  }
  const std::vector<PairResult> results = canonical_order(kept, lists);
  Aggregate a;
  a.layout = layout;
  switch (layout) {
    case Layout::kTable3:
      a.title = "Table 3 layout";
      a.sections = table3_sections(results);
      break;
    case Layout::kMultiSeed:
      a.title = "Appendix D.5 multi-seed summary";
      a.sections = multiseed_sections(results);
      break;
    case Layout::kTable9:
      a.title = "Table 9: twin drift at scale and on real text, float64";
      a.sections = table9_sections(results);
      break;
    case Layout::kZoo:
      a.title = "Optimizer zoo: equivariance verdicts";
      a.sections = zoo_sections(results);
      break;
    case Layout::kDial:
      a.title = "Adam-p dial inside attention";
      a.sections = dial_sections(results);
      break;
    case Layout::kMerge:
      a.title = "Head merging: loss barriers between the twins";
      a.sections = merge_sections(results);
      break;
  }
  if (lists.size() == 1)
    a.title = lists[0].title;

  std::set<std::string> have;
  for (const auto& r : results)
    have.insert(r.spec.key());
  for (const auto& t : lists) {
    if (!t.deviations.empty()) {
      a.notes.push_back(fmt::format("{}: not the paper's configuration: {}.",
                                    t.name, join(t.deviations, ", ")));
    }
    std::vector<std::string> missing;
    for (const auto& p : t.pairs) {
      if (!have.count(p.key()))
        missing.push_back(twins::pair_label(p));
    }
    if (!missing.empty()) {
      a.notes.push_back(fmt::format(
          "{}: {} of {} pairs not recorded yet ({}); their figures are "
          "missing or partial.",
          t.name, missing.size(), t.pairs.size(), shown(missing, 4)));
    }
  }
  if (!left_out.empty()) {
    a.notes.push_back(fmt::format(
        "{} record(s) left out, not in the job list of {} ({}).",
        left_out.size(), lists.size() == 1 ? lists[0].name : "these tables",
        shown(left_out, 3)));
  }
  for (const auto& r : results) {
    if (!r.ok()) {
      a.notes.push_back(fmt::format("{} diverged at step {}.",
                                    twins::pair_label(r.spec),
                                    r.diverged_step));
    }
  }
  a.pairs_table = format_drift_table(results);
  return a;
}

const Figure* find_figure(const Aggregate& a, const std::string& section,
                          const std::string& row, const std::string& column) {
  for (const auto& s : a.sections) {
    if (s.id != section) {
      continue;
    }
    for (size_t c = 0; c < s.columns.size(); ++c) {
      if (s.columns[c] != column) {
        continue;
      }
      for (const auto& r : s.rows) {
        if (join(r.labels, " ") == row) {
          return &r.figures[c];
        }
      }
    }
  }
  return nullptr;
}

std::string to_markdown(const Aggregate& a) {
  std::string out = fmt::format("# {}\n\n", a.title);
  for (const auto& n : a.notes) {
    out += fmt::format("- {}\n", n);
  }
  if (!a.notes.empty()) {
    out += "\n";
  }
  for (const auto& s : a.sections) {
    out += fmt::format("## {}\n\n", s.title);
    std::vector<std::string> header = s.label_columns;
    for (const auto& c : s.columns) {
      header.push_back(c);
    }
    if (s.paper_column) {
      header.push_back("paper");
    }
    header.push_back("pairs");
    out += "| " + join(header, " | ") + " |\n";
    out += "|";
    for (size_t i = 0; i < header.size(); ++i) {
      out += "---|";
    }
    out += "\n";
    for (const auto& r : s.rows) {
      std::vector<std::string> cells = r.labels;
      int n = 0;
      for (const auto& f : r.figures) {
        n = std::max(n, f.n);
        cells.push_back(s.paper_column || f.paper.text.empty()
                            ? f.text()
                            : fmt::format("{} [{}]", f.text(), f.paper.text));
      }
      if (s.paper_column) {
        std::string p = r.figures.empty() ? "" : r.figures[0].paper.text;
        cells.push_back(p.empty() ? "–" : p);
      }
      cells.push_back(std::to_string(n));
      out += "| " + join(cells, " | ") + " |\n";
    }
    out += "\n";
    for (const auto& n : s.notes) {
      out += n + "\n\n";
    }
  }
  out += "## All pairs\n\n```\n" + a.pairs_table + "```\n";
  return out;
}

std::string to_csv(const Aggregate& a) {
  std::string out =
      "section,row,column,n,measured_min,measured_max,paper_min,paper_max,"
      "paper\n";
  for (const auto& s : a.sections) {
    for (const auto& r : s.rows) {
      for (size_t c = 0; c < s.columns.size(); ++c) {
        const Figure& f = r.figures[c];
        out += fmt::format(
            "{},{},{},{},{},{},{},{},{}\n", s.id, csv_text(join(r.labels, " ")),
            csv_text(s.columns[c]), f.n, f.n ? csv_number(f.lo) : "",
            f.n ? csv_number(f.hi) : "", csv_number(f.paper.lo),
            csv_number(f.paper.hi), csv_text(f.paper.text));
      }
    }
  }
  return out;
}

}  // namespace report
