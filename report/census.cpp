#include "report/census.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "report/sections.h"
#include "twins/trained.h"
#include "report/verdict.h"

namespace report {

using twins::PairResult;

namespace {

// One rule at one rate: its four records, judged.
struct Judged {
  Verdict verdict;
  const PairResult* gauge = nullptr;
  const PairResult* onset = nullptr;  // the 1e-5 noise twin
  const PairResult* fine = nullptr;   // the 1e-7 noise twin
  double lr = 0;
  bool trained = false;  // twins::trained on the gauge twin's copy 1
};

// One rule's records: every rate with its four records, in the records'
// order — the census records a rule's default rate first and tries others
// only after it (twins::census_rates) — and how many records of
// an incomplete set of four there are.
struct RuleRecords {
  std::vector<Judged> rates;
  size_t pending = 0;

  bool any_trained() const {
    return std::any_of(rates.begin(), rates.end(),
                       [](const Judged& j) { return j.trained; });
  }
  bool all_diverged() const {
    return !rates.empty() &&
           std::all_of(rates.begin(), rates.end(), [](const Judged& j) {
             return j.gauge->status == twins::PairStatus::kDiverged;
           });
  }
  // The rate the verdict is read at: the default where it trained (or
  // where nothing else was tried), else the rate that trained to the
  // lowest training loss, else the default.
  const Judged& chosen() const {
    const Judged* best = &rates.front();
    if (best->trained)
      return *best;
    for (const Judged& j : rates) {
      if (j.trained && (!best->trained || j.gauge->train_loss[0] <
                                              best->gauge->train_loss[0]))
        best = &j;
    }
    return *best;
  }
};

bool is_onset_noise(const PairResult& r) {
  return r.spec.twin == twins::TwinKind::kNoise &&
         std::abs(r.spec.noise_scale - twins::kOnsetNoiseScale) <=
             1e-9 * twins::kOnsetNoiseScale;
}

Judged judge_rate(const std::vector<const PairResult*>& records) {
  std::vector<PairResult> copies;
  Judged judged;
  for (const PairResult* r : records) {
    copies.push_back(*r);
    if (r->spec.twin == twins::TwinKind::kGauge)
      judged.gauge = r;
    else if (is_onset_noise(*r))
      judged.onset = r;
    else if (r->spec.twin == twins::TwinKind::kNoise)
      judged.fine = r;
  }
  judged.verdict = judge(copies);
  judged.lr = judged.gauge->spec.lr;
  judged.trained = twins::trained(*judged.gauge);
  return judged;
}

// Every rule of the records by --opt name, its rates in the records' order.
std::map<std::string, RuleRecords> judge_rules(const Records& all) {
  std::map<std::string, std::vector<double>> rates;  // first-seen order
  std::map<std::pair<std::string, double>, std::vector<const PairResult*>>
      sets;
  for (const auto& r : all) {
    std::vector<double>& seen = rates[r.spec.opt];
    if (std::find(seen.begin(), seen.end(), r.spec.lr) == seen.end())
      seen.push_back(r.spec.lr);
    sets[{r.spec.opt, r.spec.lr}].push_back(&r);
  }
  std::map<std::string, RuleRecords> out;
  for (const auto& [opt, lrs] : rates) {
    RuleRecords& rule = out[opt];
    for (double lr : lrs) {
      const auto& records = sets[{opt, lr}];
      if (records.size() == 5)
        rule.rates.push_back(judge_rate(records));
      else
        rule.pending += records.size();
    }
  }
  return out;
}

// What the bridge says of a Python rule that raised when it was built.
const std::string kRejected = "rejected its arguments or parameters: ";

// What the records measure of a rule whose verdict is not its prediction:
// the figures the verdict rests on (docs/protocol.md §10) — where copy 1
// first moved, the separation of the gauge twin from the round trip and
// where, the commutation ratio and where, and the round trip at the onset
// (the resolution) — so that a reader sees which measurement decided.
std::string measured_reason(const Judged& judged) {
  const Verdict& v = judged.verdict;
  if (v.verdict == VerdictClass::kDidNotMove)
    return fmt::format("copy 1's parameters never changed in {} steps",
                       judged.gauge->spec.last_step());
  if (v.onset_step < 0)
    return "";
  std::string out = fmt::format(
      "moved at step {}; separation {:.2g}x at step {} (gauge {:.2g} / round "
      "trip {:.2g})",
      v.moved_at, v.separation, v.separation_step, v.gauge_at,
      v.roundtrip_at);
  if (v.commutation_measured) {
    out += fmt::format("; commutation {:.2g}x at step {} ({:.2g} / {:.2g})",
                       v.commutation_ratio, v.commutation_step,
                       v.commutation_gauge, v.commutation_roundtrip);
  }
  if (v.verdict == VerdictClass::kUnresolved)
    out += fmt::format("; the round trip is {:.2g} at the onset",
                       v.roundtrip_onset);
  return out;
}

// "yes (4.01 -> 0.144)": the initial model's loss, then the training loss
// at the last step; "diverged at step 7"; "–" without a curve.
std::string trained_text(const Judged& judged) {
  const PairResult& r = *judged.gauge;
  if (r.status == twins::PairStatus::kDiverged)
    return fmt::format("diverged at step {}", r.diverged_step);
  if (r.curve.empty() || !r.ok())
    return "–";
  return fmt::format("{} ({:.3g} -> {:.3g})", judged.trained ? "yes" : "no",
                     r.curve.front().val_loss[0], r.train_loss[0]);
}

// "0.001", or with other rates tried "0.01 (tried: 0.001 no, 0.0001 no,
// 0.01 yes, 0.1 diverged, 1 no)", the default first.
std::string rates_text(const RuleRecords& rule) {
  const std::string chosen = fmt::format("{:g}", rule.chosen().lr);
  if (rule.rates.size() == 1)
    return chosen;
  std::vector<std::string> tried;
  for (const Judged& j : rule.rates) {
    tried.push_back(fmt::format(
        "{:g} {}", j.lr,
        j.gauge->status == twins::PairStatus::kDiverged ? "diverged"
        : j.trained                                      ? "yes"
                                                         : "no"));
  }
  return fmt::format("{} (tried: {})", chosen, fmt::join(tried, ", "));
}

// The rule's class on the Table-3 model as the records alone tell it.
std::string measured_class(const Verdict& verdict) {
  switch (verdict.verdict) {
    case VerdictClass::kEquivariant:
      return "equivariant";
    case VerdictClass::kBasisDependent:
      return "basis-dependent";
    default:
      return "";
  }
}

// "cannot run here: needs CUDA (…)" -> "needs CUDA"; "raises: …" ->
// "raises"; "failed (the rule raised)" -> "raises".
std::string reason_class(const std::string& why) {
  std::string text = why;
  const std::string prefix = "cannot run here: ";
  if (text.rfind(prefix, 0) == 0)
    text = text.substr(prefix.size());
  const size_t cut = text.find_first_of("(:");
  text = text.substr(0, cut);
  while (!text.empty() && text.back() == ' ')
    text.pop_back();
  return text;
}

struct Counts {
  std::map<std::string, size_t> verdicts;  // measured label -> rules
  std::map<std::string, size_t> reasons;   // why a rule did not run
  struct Library {
    size_t rules = 0, judged = 0, agree = 0, cannot = 0;
  };
  std::vector<std::pair<std::string, Library>> libraries;  // census order
  // library | rule | predicted | measured | what the twins measured: one
  // Markdown row per rule whose measured class is not its prediction.
  std::vector<std::string> disagreements;
  size_t untrained = 0;  // judged at a rate that did not train

  Library& library(const std::string& name) {
    if (libraries.empty() || libraries.back().first != name)
      libraries.push_back({name, {}});
    return libraries.back().second;
  }
};

std::string library_label(const twins::CensusRule& entry) {
  return entry.version.empty() ? entry.library
                               : entry.library + " " + entry.version;
}

// The measured cell of a rule whose pairs failed, its reason counted.
std::string failed_cell(const Verdict& v, Counts& counts) {
  // The bridge says "cannot run here: needs …" where it knows why.
  const size_t known = v.error.find("cannot run here: ");
  const size_t built = v.error.find(kRejected);
  if (known != std::string::npos) {
    const std::string cell = v.error.substr(known);
    ++counts.reasons[reason_class(cell)];
    return cell;
  }
  if (built != std::string::npos) {
    // The bridge could not build it from its defaults and the model's
    // parameters: an argument without a default, a base optimizer to
    // wrap, a package it imports when built.
    ++counts.reasons["cannot be built from its defaults"];
    return fmt::format("cannot run here: cannot be built from its defaults "
                       "({})",
                       v.error.substr(built + kRejected.size()));
  }
  ++counts.reasons["raises while it trains"];
  return verdict_label(v) + ": " + v.error;
}

// The row's cells of a rule the records judge: measured, as predicted,
// trained, lr and the four figures; counted in `counts`.
void judged_cells(const twins::CensusRule& entry, const RuleRecords& rule,
                  Counts& counts, std::vector<std::string>* cells,
                  std::vector<Figure>* figures) {
  Counts::Library& library = counts.library(library_label(entry));
  const Judged& judged = rule.chosen();
  const Verdict& v = judged.verdict;
  std::string& measured = (*cells)[0];
  measured = verdict_label(v);
  (*cells)[3] = rates_text(rule);
  if (v.verdict == VerdictClass::kFailed) {
    ++library.cannot;
    measured = failed_cell(v, counts);
    return;
  }
  (*cells)[2] = trained_text(judged);
  if (rule.all_diverged()) {
    measured = "diverges at every rate tried (" + measured + ")";
    ++library.cannot;
    ++counts.reasons["diverges at every rate tried"];
    return;
  }
  ++library.judged;
  ++counts.verdicts[verdict_label(v)];
  if (!rule.any_trained()) {
    (*cells)[2] += "; no rate recorded trains";
    ++counts.untrained;
  }
  const std::string cls = measured_class(v);
  if (!entry.table3.empty() && !cls.empty()) {
    const bool same = cls == entry.table3;
    (*cells)[1] = same ? "yes" : "NO";
    library.agree += same;
    if (!same) {
      const std::string why = measured_reason(judged);
      counts.disagreements.push_back(fmt::format(
          "| {} | {} | {} | {} | {} |", entry.library,
          entry.aliases.empty() ? entry.opt : entry.aliases.front(),
          entry.table3, verdict_label(v), why.empty() ? "–" : why));
    }
  }
  *figures = {value(v.separation, 1, Unit::kRatio),
              value(v.commutation_ratio, 1, Unit::kRatio),
              value(v.onset_ratio_step1, 1, Unit::kRatio),
              value(v.identity_max, 1, Unit::kDrift)};
}

// `rule`: its records, null when there are none.
Section::Row census_row(const twins::CensusRule& entry, const RuleRecords* rule,
                        Counts& counts) {
  Section::Row row;
  Counts::Library& library = counts.library(library_label(entry));
  ++library.rules;
  const std::string predicted =
      entry.table3.empty() ? "–"
      : entry.predicted == entry.table3
          ? entry.predicted
          : entry.predicted + " (" + entry.table3 + ")";
  // measured, as predicted, trained, lr
  std::vector<std::string> cells = {"", "–", "–", "–"};
  row.figures.assign(4, Figure{});
  if (!entry.cannot_run.empty()) {
    cells[0] = entry.cannot_run;
    ++library.cannot;
    ++counts.reasons[reason_class(entry.cannot_run)];
  } else if (!rule || rule->rates.empty()) {
    cells[0] = fmt::format("pending ({} of 5 pairs)", rule ? rule->pending : 0);
  } else {
    judged_cells(entry, *rule, counts, &cells, &row.figures);
  }
  row.labels = {library_label(entry),
                fmt::format("{}", fmt::join(entry.aliases, ", ")), predicted};
  row.labels.insert(row.labels.end(), cells.begin(), cells.end());
  return row;
}

// The entries of the records when no catalogue comes with them: one per --opt
// name, nothing predicted.
std::vector<twins::CensusRule> entries_of_records(const Records& all) {
  std::vector<twins::CensusRule> out;
  std::map<std::string, bool> seen;
  for (const auto& r : all) {
    if (seen.emplace(r.spec.opt, true).second) {
      twins::CensusRule entry;
      entry.library = "–";
      entry.aliases = {r.spec.opt};
      entry.opt = r.spec.opt;
      out.push_back(std::move(entry));
    }
  }
  return out;
}

std::string counts_note(const Counts& counts) {
  std::vector<std::string> verdicts, reasons, libraries;
  size_t judged = 0, cannot = 0, agree = 0;
  for (const auto& [label, n] : counts.verdicts) {
    verdicts.push_back(fmt::format("{} {}", n, label));
    judged += n;
  }
  for (const auto& [reason, n] : counts.reasons) {
    reasons.push_back(fmt::format("{} {}", n, reason));
    cannot += n;
  }
  for (const auto& [name, library] : counts.libraries) {
    libraries.push_back(fmt::format("| {} | {} | {} | {} | {} |", name,
                                    library.rules, library.judged,
                                    library.agree, library.cannot));
    agree += library.agree;
  }
  return fmt::format(
      "Counts: {} rules judged ({}), {} as predicted, {} at no recorded rate that "
      "trains; {} cannot run here ({}).\n\n| library | rules | judged | "
      "as predicted | cannot run |\n|---|---|---|---|---|\n{}",
      judged,
      verdicts.empty() ? "none"
                       : fmt::format("{}", fmt::join(verdicts, ", ")),
      agree, counts.untrained, cannot,
      reasons.empty() ? "none" : fmt::format("{}", fmt::join(reasons, ", ")),
      fmt::join(libraries, "\n"));
}

}  // namespace

std::vector<CensusPoint> census_points(
    const Records& all, const std::vector<twins::CensusRule>& census) {
  const std::map<std::string, RuleRecords> rules = judge_rules(all);
  std::vector<CensusPoint> points;
  for (const twins::CensusRule& entry :
       !census.empty() ? census : entries_of_records(all)) {
    const auto it = rules.find(entry.opt);
    if (it == rules.end() || it->second.rates.empty() ||
        it->second.chosen().verdict.verdict == VerdictClass::kFailed ||
        it->second.all_diverged())
      continue;
    const Verdict& v = it->second.chosen().verdict;
    points.push_back(
        {library_label(entry),
         entry.aliases.empty() ? entry.opt : entry.aliases.front(),
         measured_class(v).empty() ? verdict_label(v) : measured_class(v),
         entry.table3, v.separation, v.dtype});
  }
  return points;
}

std::optional<Section> census_section(const Inputs& in) {
  const Records& all = in.records;
  Section s = section_of(
      "census", "Every rule of the installed libraries: predicted and measured",
      {"library", "rule (registry names)", "predicted (on Table 3)",
       "measured", "as predicted", "trained (loss: step 0 -> last)", "lr"},
      {"separation", "commutation", "1e-5 twin ratio, step 1",
       "A=I, any step"});
  const std::map<std::string, RuleRecords> rules = judge_rules(all);
  const std::vector<twins::CensusRule> entries =
      !in.census.empty() ? in.census : entries_of_records(all);
  // The rules the records hold, and those of their libraries that could
  // not run (a selection of rules shows its own; a whole census, every
  // rule); libraries not installed where the records span several.
  std::set<std::string> libraries;
  for (const twins::CensusRule& entry : entries) {
    if (rules.count(entry.opt))
      libraries.insert(entry.library);
  }
  if (libraries.empty())
    return std::nullopt;
  Counts counts;
  for (const twins::CensusRule& entry : entries) {
    const auto it = rules.find(entry.opt);
    const bool recorded = it != rules.end();
    const bool shown =
        recorded ||
        (!entry.cannot_run.empty() &&
         (libraries.count(entry.library) ||
          (entry.opt.empty() && entry.aliases.empty() &&
           libraries.size() > 1)));
    if (!shown)
      continue;
    s.rows.push_back(
        census_row(entry, recorded ? &it->second : nullptr, counts));
  }
  s.notes.push_back(counts_note(counts));
  s.notes.push_back(
      counts.disagreements.empty()
          ? "Every judged rule measured as predicted."
          : fmt::format("Not as predicted ({}):\n\n| library | rule | "
                        "predicted | measured | what the twins measured "
                        "|\n|---|---|---|---|---|\n{}",
                        counts.disagreements.size(),
                        fmt::join(counts.disagreements, "\n")));
  s.notes.push_back(fmt::format(
      "Separation: the gauge twin's largest logit drift over the round "
      "trip's from the step the rule first moved; commutation: the gauge "
      "twin's largest update error over the round trip's in the ten steps "
      "from there; 1e-5 twin ratio: the gauge twin over the 1e-5 noise twin "
      "at step 1 (the paper's onset ratio, a record of sensitivity); the "
      "verdict's rules are the zoo's (docs/protocol.md §10). Trained: copy "
      "1's training loss at the last "
      "step at most {:g} of the initial model's loss; a rule whose default "
      "rate does not train is run at {} too, and judged at the rate that "
      "trains to the lowest loss (lr: every rate tried). Predictions: "
      "bridge/predictions.tsv, set before any measurement.",
      twins::kTrainedLossFraction, fmt::join(twins::census_rates(), ", ")));
  return s;
}

}  // namespace report
