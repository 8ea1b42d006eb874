#include "report/census.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)

#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "report/sections.h"
#include "report/verdict.h"

namespace report {

using twins::PairResult;

namespace {

CensusSource& source() {
  static CensusSource census;
  return census;
}

// Trained: copy 1's validation loss at the last step at most this fraction
// of step 0's (docs/results.md, "The census").
constexpr double kTrainedLossFraction = 0.9;

// One rule's four records, judged.
struct Judged {
  Verdict verdict;
  const PairResult* gauge = nullptr;
  const PairResult* onset = nullptr;  // the 1e-5 noise twin
};

bool is_onset_noise(const PairResult& r) {
  return r.spec.twin == twins::TwinKind::kNoise &&
         std::abs(r.spec.noise_scale - twins::kOnsetNoiseScale) <=
             1e-9 * twins::kOnsetNoiseScale;
}

// Every rule whose four records are there, by --opt name; `pending` gets
// the others with how many records they have.
std::map<std::string, Judged> judge_rules(
    const Records& all, std::map<std::string, size_t>* pending) {
  std::map<std::string, std::vector<PairResult>> by_opt;
  for (const auto& r : all)
    by_opt[r.spec.opt].push_back(r);
  std::map<std::string, Judged> out;
  for (const auto& [opt, records] : by_opt) {
    if (records.size() != 4) {
      (*pending)[opt] = records.size();
      continue;
    }
    Judged judged;
    judged.verdict = judge(records);
    for (const auto& r : all) {
      if (r.spec.opt != opt)
        continue;
      if (r.spec.twin == twins::TwinKind::kGauge)
        judged.gauge = &r;
      else if (is_onset_noise(r))
        judged.onset = &r;
    }
    out.emplace(opt, judged);
  }
  return out;
}

// gauge / noise 1e-5 at a checkpoint; NaN where either has none.
double ratio_at(const Judged& judged, int64_t step) {
  return twins::drift_at(*judged.gauge, step) /
         twins::drift_at(*judged.onset, step);
}

// "yes (3.85 -> 0.91)", "no (3.85 -> 3.84)", "–" without a curve.
std::string trained(const PairResult& r) {
  if (r.curve.size() < 2 || !r.ok())
    return "–";
  const double start = r.curve.front().val_loss[0];
  const double end = r.curve.back().val_loss[0];
  return fmt::format("{} ({:.3g} -> {:.3g})",
                     end <= kTrainedLossFraction * start ? "yes" : "no", start,
                     end);
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
  std::vector<std::string> disagreements;

  Library& library(const std::string& name) {
    if (libraries.empty() || libraries.back().first != name)
      libraries.push_back({name, {}});
    return libraries.back().second;
  }
};

std::string library_label(const CensusEntry& entry) {
  return entry.version.empty() ? entry.library
                               : entry.library + " " + entry.version;
}

Section::Row census_row(const CensusEntry& entry, const Judged* judged,
                        size_t pending_records, Counts& counts) {
  Section::Row row;
  Counts::Library& library = counts.library(library_label(entry));
  ++library.rules;
  const std::string predicted =
      entry.table3.empty() ? "–"
      : entry.predicted == entry.table3
          ? entry.predicted
          : entry.predicted + " (" + entry.table3 + ")";
  std::string measured, agree = "–", train = "–", lr = "–";
  row.figures.assign(4, Figure{});
  if (!entry.cannot_run.empty()) {
    measured = entry.cannot_run;
    ++library.cannot;
    ++counts.reasons[reason_class(entry.cannot_run)];
  } else if (!judged) {
    measured = fmt::format("pending ({} of 4 pairs)", pending_records);
  } else {
    const Verdict& v = judged->verdict;
    measured = verdict_label(v);
    if (v.verdict == VerdictClass::kFailed) {
      measured += ": " + v.error;
      ++library.cannot;
      // The bridge says "cannot run here: needs …" where it knows why.
      const size_t known = v.error.find("cannot run here: ");
      ++counts.reasons[known != std::string::npos
                           ? reason_class(v.error.substr(known))
                           : "raises while it trains"];
    } else {
      ++library.judged;
      ++counts.verdicts[verdict_label(v)];
      const std::string cls = measured_class(v);
      if (!entry.table3.empty() && !cls.empty()) {
        const bool same = cls == entry.table3;
        agree = same ? "yes" : "NO";
        library.agree += same;
        if (!same)
          counts.disagreements.push_back(fmt::format(
              "{} {}: predicted {}, measured {}", entry.library,
              entry.aliases.empty() ? entry.opt : entry.aliases.front(),
              entry.table3, verdict_label(v)));
      }
      train = trained(*judged->gauge);
      row.figures = {value(v.onset_ratio_step1, 1, Unit::kRatio),
                     value(ratio_at(*judged, 10), 1, Unit::kRatio),
                     value(ratio_at(*judged, judged->gauge->spec.steps), 1,
                           Unit::kRatio),
                     value(v.identity_max, 1, Unit::kDrift)};
    }
    lr = fmt::format("{:g}", judged->gauge->spec.lr);
  }
  row.labels = {library_label(entry),
                fmt::format("{}", fmt::join(entry.aliases, ", ")),
                predicted,
                measured,
                agree,
                train,
                lr};
  return row;
}

// The entries of the records when no source is registered: one per --opt
// name, nothing predicted.
std::vector<CensusEntry> entries_of_records(const Records& all) {
  std::vector<CensusEntry> out;
  std::map<std::string, bool> seen;
  for (const auto& r : all) {
    if (seen.emplace(r.spec.opt, true).second) {
      CensusEntry entry;
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
    libraries.push_back(fmt::format(
        "{}: {} rules, {} judged ({} as predicted), {} cannot run", name,
        library.rules, library.judged, library.agree, library.cannot));
    agree += library.agree;
  }
  return fmt::format(
      "Counts: {} rules judged ({}), {} as predicted; {} cannot run here ({}). "
      "Per library: {}.",
      judged, verdicts.empty() ? "none" : fmt::format("{}", fmt::join(verdicts, ", ")),
      agree, cannot,
      reasons.empty() ? "none" : fmt::format("{}", fmt::join(reasons, ", ")),
      fmt::join(libraries, "; "));
}

}  // namespace

std::vector<CensusPoint> census_points(const Records& all) {
  std::map<std::string, size_t> pending;
  const std::map<std::string, Judged> judged = judge_rules(all, &pending);
  std::vector<CensusPoint> points;
  for (const CensusEntry& entry :
       source() ? source()() : entries_of_records(all)) {
    const auto it = judged.find(entry.opt);
    if (it == judged.end() ||
        it->second.verdict.verdict == VerdictClass::kFailed)
      continue;
    const Verdict& v = it->second.verdict;
    points.push_back(
        {library_label(entry),
         entry.aliases.empty() ? entry.opt : entry.aliases.front(),
         measured_class(v).empty() ? verdict_label(v) : measured_class(v),
         v.onset_ratio_step1});
  }
  return points;
}

void set_census_source(CensusSource census) {
  source() = std::move(census);
}

std::optional<Section> census_section(const Records& all) {
  Section s = section_of(
      "census", "Every rule of the installed libraries: predicted and measured",
      {"library", "rule (registry names)", "predicted (on Table 3)",
       "measured", "as predicted", "trained (val loss)", "lr"},
      {"ratio, step 1", "ratio, step 10", "ratio, last", "A=I, any step"});
  std::map<std::string, size_t> pending;
  const std::map<std::string, Judged> judged = judge_rules(all, &pending);
  const std::vector<CensusEntry> entries =
      source() ? source()() : entries_of_records(all);
  // The rules the records hold, and those of their libraries that could
  // not run (a selection of rules shows its own; a whole census, every
  // rule); libraries not installed where the records span several.
  std::set<std::string> libraries;
  for (const CensusEntry& entry : entries) {
    if (judged.count(entry.opt) || pending.count(entry.opt))
      libraries.insert(entry.library);
  }
  if (libraries.empty())
    return std::nullopt;
  Counts counts;
  for (const CensusEntry& entry : entries) {
    const auto it = judged.find(entry.opt);
    const auto waiting = pending.find(entry.opt);
    const bool recorded = it != judged.end() || waiting != pending.end();
    const bool shown =
        recorded ||
        (!entry.cannot_run.empty() &&
         (libraries.count(entry.library) ||
          (entry.opt.empty() && entry.aliases.empty() &&
           libraries.size() > 1)));
    if (!shown)
      continue;
    s.rows.push_back(census_row(entry,
                                it == judged.end() ? nullptr : &it->second,
                                waiting == pending.end() ? 0 : waiting->second,
                                counts));
  }
  s.notes.push_back(counts_note(counts));
  s.notes.push_back(
      counts.disagreements.empty()
          ? "Every judged rule measured as predicted."
          : fmt::format("Not as predicted ({}): {}.",
                        counts.disagreements.size(),
                        fmt::join(counts.disagreements, "; ")));
  s.notes.push_back(fmt::format(
      "Ratios: the gauge twin's logit drift over the 1e-5 noise twin's at "
      "steps 1, 10 and the last; the verdict's rules are the zoo's "
      "(docs/protocol.md §10). Trained: copy 1's validation loss at the "
      "last step at most {:g} of step 0's. Predictions: "
      "bridge/census_predictions.tsv, set before any measurement.",
      kTrainedLossFraction));
  return s;
}

}  // namespace report
