// Applying a layout to records: keeping the records of the job lists, in
// one canonical order, the layout's sections of them, and the notes on
// what is missing, left out or diverged.
#include "report/aggregate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "report/summary.h"

namespace report {

using twins::PairResult;

namespace {

// The results in a canonical order, so that the same records give the same
// output however they were scheduled or merged: the job lists' order, then
// any other record by key.
Records canonical_order(Records results, const std::vector<Expected>& lists) {
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
  Records out;
  for (const auto& o : order)
    out.push_back(std::move(results[o.second]));
  return out;
}

std::string shown(const std::vector<std::string>& labels, size_t at_most) {
  const size_t n = std::min(labels.size(), at_most);
  return join({labels.begin(), labels.begin() + n}, "; ") +
         (labels.size() > n ? "; ..." : "");
}

// With job lists, only their records: another configuration's records
// (other steps, dtype, optimizer settings) must not enter the figures.
// `left_out` gets a label of each record dropped.
Records listed_records(const Records& all, const std::vector<Expected>& lists,
                       std::vector<std::string>& left_out) {
  std::set<std::string> listed;
  for (const auto& t : lists) {
    for (const auto& p : t.pairs)
      listed.insert(p.key());
  }
  Records kept;
  for (const auto& r : all) {
    if (lists.empty() || listed.count(r.spec.key())) {
      kept.push_back(r);
    } else {
      left_out.push_back(twins::pair_label(r.spec) + " " +
                         fmt::format("{} steps {}", r.spec.task, r.spec.steps) +
                         " " + twins::dtype_name(r.spec.dtype));
    }
  }
  return kept;
}

// Per job list: how it differs from the paper's configuration and which of
// its pairs `results` lacks.
std::vector<std::string> job_list_notes(const Records& results,
                                        const std::vector<Expected>& lists) {
  std::set<std::string> have;
  for (const auto& r : results)
    have.insert(r.spec.key());
  std::vector<std::string> notes;
  for (const auto& t : lists) {
    if (!t.deviations.empty()) {
      notes.push_back(fmt::format("{}: not the paper's configuration: {}.",
                                  t.name, join(t.deviations, ", ")));
    }
    std::vector<std::string> missing;
    for (const auto& p : t.pairs) {
      if (!have.count(p.key()))
        missing.push_back(twins::pair_label(p));
    }
    if (!missing.empty()) {
      notes.push_back(fmt::format(
          "{}: {} of {} pairs not recorded yet ({}); their figures are "
          "missing or partial.",
          t.name, missing.size(), t.pairs.size(), shown(missing, 4)));
    }
  }
  return notes;
}

}  // namespace

Aggregate aggregate(const Layout& layout, const Records& unordered,
                    const std::vector<Expected>& lists) {
  std::vector<std::string> left_out;
  const Records results =
      canonical_order(listed_records(unordered, lists, left_out), lists);
  Aggregate a;
  a.layout = layout;
  a.title = lists.size() == 1 ? lists[0].title : layout.title;
  for (const Expected& list : lists)
    a.census.insert(a.census.end(), list.census.begin(), list.census.end());
  for (const SectionBuilder build : layout.sections) {
    if (std::optional<Section> s = build(Inputs{results, a.census})) {
      a.sections.push_back(std::move(*s));
    }
  }
  a.notes = job_list_notes(results, lists);
  for (const std::string& warning : identity_warnings(results))
    a.notes.push_back("Warning: " + warning + ".");
  if (!left_out.empty()) {
    a.notes.push_back(fmt::format(
        "{} record(s) left out, not in the job list of {} ({}).",
        left_out.size(), lists.size() == 1 ? lists[0].name : "these tables",
        shown(left_out, 3)));
  }
  for (const auto& r : results) {
    if (!r.ok()) {
      a.notes.push_back(fmt::format("{} {}.", twins::pair_label(r.spec),
                                    twins::status_text(r)));
    }
  }
  a.pairs_table = format_drift_table(results);
  return a;
}

const Figure* find_figure(const Aggregate& aggregate,
                          const std::string& section, const std::string& row,
                          const std::string& column) {
  for (const auto& s : aggregate.sections) {
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

}  // namespace report
