// The sections of the paper's tables (docs/protocol.md §7): Table 3, the
// Appendix D.5 multi-seed summary and Table 9, each figure beside the
// paper's value.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "optim/registry.h"
#include "report/sections.h"
#include "twins/defaults.h"

namespace report {

using twins::PairResult;
using twins::PairSpec;
using twins::TwinKind;

namespace {

void add_row(Section& s, std::string label, Figure f) {
  s.rows.push_back({{std::move(label)}, {std::move(f)}});
}

// ===========================================================================
// Table 3

// One row of Table 3: an optimizer, a twin and (noise twins) its scale.
struct RowKey {
  std::string opt;
  TwinKind twin;
  double scale;
  bool operator<(const RowKey& o) const {
    return std::tie(opt, twin, scale) < std::tie(o.opt, o.twin, o.scale);
  }
};

// The paper's rows that the results hold first, then any other
// combination, in first-seen order.
std::vector<RowKey> table3_rows(const Records& all) {
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
  return keys;
}

// "step 1500" when every pair ran as long, else "last".
std::string last_column(const Records& all) {
  std::set<int64_t> steps;
  for (const auto& r : all) {
    steps.insert(r.spec.steps);
  }
  return steps.size() == 1 ? fmt::format("step {}", *steps.begin())
                           : std::string("last");
}

// ===========================================================================
// Appendix D.5

// The chaos metric pairs each Muon gauge twin with the 1e-7 noise twin
// of the same init seed.
void add_chaos_rows(Section& s, const Records& all) {
  const Results muon_noise = pick(all, "muon", TwinKind::kNoise, 1e-7);
  for (const auto* g : pick(all, "muon", TwinKind::kGauge)) {
    const PairResult* n = nullptr;
    for (const auto* c : muon_noise) {
      if (c->spec.init_seed == g->spec.init_seed) {
        n = c;
      }
    }
    add_row(s,
            fmt::format("Muon chaos metric, init {} (gauge seed {}), decades",
                        g->spec.init_seed, g->spec.twin_seed),
            value(n ? twins::chaos_metric(*g, *n) : std::nan(""), n ? 1 : 0,
                  Unit::kDecades,
                  paper(fmt::format("multiseed/muon-chaos-{}",
                                    g->spec.init_seed))));
  }
}

// The structural and onset ratios of §6 against the 100x-stronger (1e-5)
// noise twin.
void add_ratio_rows(Section& s, const Results& gauge, const Records& all) {
  const Results strong = pick(all, "adam", TwinKind::kNoise, 1e-5);
  const Figure gauge_final = range_of(finals(gauge), Unit::kDrift);
  const Figure gauge_step1 = range_of(at_step(gauge, 1), Unit::kDrift);
  const Figure strong_final = range_of(finals(strong), Unit::kDrift);
  const Figure strong_step1 = range_of(at_step(strong, 1), Unit::kDrift);
  add_row(s, "structural ratio: min final Adam gauge / final noise 1e-5",
          value(gauge_final.lo / strong_final.lo,
                std::min(gauge_final.n, strong_final.n), Unit::kRatio,
                paper("multiseed/structural-ratio")));
  add_row(s, "onset ratio: min step-1 Adam gauge / step-1 noise 1e-5",
          value(gauge_step1.lo / strong_step1.lo,
                std::min(gauge_step1.n, strong_step1.n), Unit::kRatio));
}

// Adam's noise twins at every scale the results hold, smallest first.
void add_adam_noise_rows(Section& s, const Records& all) {
  std::set<double> scales;
  for (const auto& r : all) {
    if (r.spec.opt == "adam" && r.spec.twin == TwinKind::kNoise) {
      scales.insert(r.spec.noise_scale);
    }
  }
  for (double scale : scales) {
    add_row(
        s,
        fmt::format("Adam noise {}, final drift", twins::format_scale(scale)),
        range_of(finals(pick(all, "adam", TwinKind::kNoise, scale)),
                 Unit::kDrift,
                 paper(fmt::format("multiseed/adam-noise-{}-final",
                                   twins::format_scale(scale)))));
  }
}

// ===========================================================================
// Table 9

bool predicted_equivariant(const std::string& opt) {
  return opt != "adam" && optim::has_optimizer(opt) &&
         optim::find_optimizer(opt).predicted ==
             optim::Equivariance::kEquivariant;
}

// The records of each configuration (task and model shape) in first-seen
// order, with its id: mod47-2L-d64.
std::vector<std::pair<std::string, Records>> by_config(const Records& all) {
  std::vector<std::pair<std::string, Records>> groups;
  std::map<std::string, size_t> index;
  for (const auto& r : all) {
    const PairSpec& p = r.spec;
    const std::string id =
        fmt::format("{}-{}L-d{}", p.task, p.depth, p.d_model);
    auto [it, fresh] = index.emplace(id, groups.size());
    if (fresh) {
      groups.push_back({id, {}});
    }
    groups[it->second].second.push_back(r);
  }
  return groups;
}

// One Table-9 row: the figures of configuration `id`.
Section::Row table9_row(const std::string& id, const Records& g) {
  const PairSpec& p = g.front().spec;
  const std::string task =
      p.task == "charlm" ? "char-LM" : "mod-" + p.task.substr(3);
  const Results gauge = pick(g, "adam", TwinKind::kGauge);
  Results eq;
  for (const auto& r : g) {
    if (r.spec.twin == TwinKind::kGauge && predicted_equivariant(r.spec.opt)) {
      eq.push_back(&r);
    }
  }
  const Figure step1 = range_of(at_step(gauge, 1), Unit::kDrift,
                                paper("table9/" + id + "/adam-step1"));
  const Figure strong1 = range_of(
      at_step(pick(g, "adam", TwinKind::kNoise, 1e-5), 1), Unit::kDrift);
  Section::Row row;
  row.labels = {fmt::format("{}, {}L, d={}", task, p.depth, p.d_model)};
  row.figures = {
      step1,
      max_of(at_step(eq, 1), Unit::kDrift, paper("table9/" + id + "/eq-step1")),
      range_of(finals(gauge), Unit::kDrift,
               paper("table9/" + id + "/adam-final")),
      value(step1.lo / strong1.lo, std::min(step1.n, strong1.n), Unit::kRatio,
            paper("table9/" + id + "/onset")),
      largest_anywhere(pick(g, "adam", TwinKind::kIdentity),
                       paper("table9/identity"))};
  return row;
}

}  // namespace

// ===========================================================================
// Sections

// docs/protocol.md §7 Table 3: one row per (optimizer, twin, noise scale), the
// paper's rows first, then any other combination the results hold.
std::optional<Section> table3_section(const Inputs& in) {
  const Records& all = in.records;
  Section s = section_of("table3", "Relative logit drift between the twins",
                         {"optimizer", "twin"},
                         {"step 0", "step 1", "step 100", last_column(all)});
  s.notes.push_back(
      "The paper's value in brackets (its last column is step 1500). A range "
      "a–b spans several pairs of the row.");
  for (const auto& k : table3_rows(all)) {
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
  return s;
}

// The sentences under Table 3: Adam's QK drift and accuracies; none without
// Adam gauge twins.
std::optional<Section> table3_extra_section(const Inputs& in) {
  const Records& all = in.records;
  const Results adam = pick(all, "adam", TwinKind::kGauge);
  if (adam.empty()) {
    return std::nullopt;
  }
  Section e = statistics_section("table3-extra", "Adam gauge twins at the end",
                                 "figure");
  std::vector<double> qk, acc;
  for (const auto* r : adam) {
    qk.push_back(twins::final_qk_drift(*r));
    acc.push_back(r->val_acc[0]);
    acc.push_back(r->val_acc[1]);
  }
  add_row(e, "final QK drift (mean over heads)",
          range_of(qk, Unit::kDrift, paper("table3/adam-qk-final")));
  add_row(e, "validation accuracy, both copies",
          range_of(acc, Unit::kAccuracy, paper("table3/adam-val-acc")));
  add_row(
      e, "Δ validation accuracy between the copies (abs)",
      max_of(accuracy_gaps(adam), Unit::kAccuracy, paper("table3/adam-dacc")));
  return e;
}

// Appendix D.5: ranges over seeds and the derived statistics of §6.
std::optional<Section> multiseed_section(const Inputs& in) {
  const Records& all = in.records;
  Section s = statistics_section(
      "multiseed", "Multi-seed summary (Appendix D.5)", "statistic");
  const Results gauge = pick(all, "adam", TwinKind::kGauge);
  add_row(s, "Adam gauge, step-1 drift (min–max)",
          range_of(at_step(gauge, 1), Unit::kDrift,
                   paper("multiseed/adam-gauge-step1")));
  add_row(s, "Adam gauge, final drift (min–max)",
          range_of(finals(gauge), Unit::kDrift,
                   paper("multiseed/adam-gauge-final")));
  add_row(s, "Adam gauge, Δ validation accuracy between the copies (abs, max)",
          max_of(accuracy_gaps(gauge), Unit::kAccuracy,
                 paper("multiseed/adam-dacc")));
  add_adam_noise_rows(s, all);
  add_ratio_rows(s, gauge, all);
  for (const char* opt : {"sgd", "scalar-adam"}) {
    add_row(s, fmt::format("{} gauge, final drift (max)", display_name(opt)),
            max_of(finals(pick(all, opt, TwinKind::kGauge)), Unit::kDrift,
                   paper(fmt::format("multiseed/{}-final-max", opt))));
  }
  add_row(s, "Muon gauge, final drift (min–max)",
          range_of(finals(pick(all, "muon", TwinKind::kGauge)), Unit::kDrift));
  add_chaos_rows(s, all);
  add_row(s, "Adam identity (A=I), largest drift at any checkpoint",
          largest_anywhere(pick(all, "adam", TwinKind::kIdentity),
                           paper("multiseed/adam-identity")));
  s.notes.push_back(
      "Ratios use the 100x-stronger noise twin (1e-5); the chaos metric is "
      "the mean |log10((gauge + 1e-12) / (noise + 1e-12))| over checkpoints "
      "from step 100 on "
      "(docs/protocol.md §6); below ~0.1 decades a gauge twin is just chaos.");
  return s;
}

// Table 9: one row per configuration (task and model shape).
std::optional<Section> table9_section(const Inputs& in) {
  const Records& all = in.records;
  Section s =
      section_of("table9", "Twin drift at scale and on real text", {"config"},
                 {"Adam gauge, step 1", "eq., step 1 (worst)", "Adam, final",
                  "onset ratio", "A=I, any step"});
  for (const auto& [id, g] : by_config(all)) {
    s.rows.push_back(table9_row(id, g));
  }
  s.notes.push_back(
      "\"eq.\" is the largest step-1 gauge drift of the equivariant methods "
      "(SGD, scalar-Adam, Muon); the onset ratio is the smallest Adam gauge "
      "step-1 drift over the step-1 drift of the 1e-5 noise twin.");
  return s;
}

// ===========================================================================
// Which records are whose

bool several_init_seeds(const Records& all) {
  std::set<uint64_t> inits;
  for (const auto& r : all) {
    inits.insert(r.spec.init_seed);
  }
  return inits.size() > 1;
}

bool all_float64(const Records& all) {
  return std::all_of(all.begin(), all.end(), [](const PairResult& r) {
    return r.spec.dtype == torch::kDouble;
  });
}

}  // namespace report
