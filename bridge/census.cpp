// The census's rules: bridge/census.py lists them from the installed
// libraries' registries; here each is probed through the protocol.
#include "bridge/census.h"

#include <c10/util/Exception.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <mutex>

#include "bridge/bridge.h"
#include "bridge/python.h"
#include "census_predictions_tsv.h"
#include "census_py.h"
#include "optim/registry.h"
#include "twins/defaults.h"
#include "twins/pair.h"

namespace bridge {

namespace {

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

py::object census_module() {
  conventions();  // census.py reads its classification of errors
  return embedded_module("_twins_census", kCensusPy, "bridge/census.py");
}

// The census's reason for an error of a rule: its first line without the
// rule's own name (every error of a Python rule starts with it),
// classified by census.py.
std::string reason_of(const std::exception& e) {
  std::string error = first_line(e.what());
  const size_t colon = error.find(": ");
  if (is_python_rule(error) && colon != std::string::npos)
    error = error.substr(colon + 2);
  py::gil_scoped_acquire gil;
  return census_module().attr("probe_reason")(error).cast<std::string>();
}

// Why `rule` (resolved) does not train two steps of a one-block model
// here; empty when it does.
std::string probe(const CensusRule& rule) {
  try {
    const std::string& name = rule.opt;
    const optim::OptimizerInfo& info = optim::find_optimizer(name);
    twins::PairSpec spec = twins::default_spec("mod11", "adam");
    spec.opt = name;
    spec.hparams = info.hparams;
    spec.lr = info.lr > 0 ? info.lr : 1e-3;
    spec.depth = 1;
    spec.d_model = 8;
    spec.heads = 2;
    spec.mlp = 16;
    spec.steps = 2;
    return twins::run_pair(spec).ok() ? ""
                                       : "diverges in the probe's two steps";
  } catch (const std::exception& e) {
    return reason_of(e);
  }
}

std::vector<CensusRule> list_rules() {
  ensure_interpreter();
  py::gil_scoped_acquire gil;
  py::object census = census_module();
  std::vector<CensusRule> out;
  try {
    for (py::handle item : census.attr("rules")(kCensusPredictionsTsv)) {
      py::dict d = py::reinterpret_borrow<py::dict>(item);
      CensusRule rule;
      rule.library = d["library"].cast<std::string>();
      rule.version = d["version"].cast<std::string>();
      rule.aliases = d["aliases"].cast<std::vector<std::string>>();
      rule.rule = d["rule"].cast<std::string>();
      rule.definition = d["definition"].cast<std::string>();
      rule.predicted = d["predicted"].cast<std::string>();
      rule.table3 = d["table3"].cast<std::string>();
      rule.reason = d["reason"].cast<std::string>();
      rule.decided_by = d["decided_by"].cast<std::string>();
      rule.cannot_run = d["error"].cast<std::string>();
      out.push_back(std::move(rule));
    }
  } catch (const py::error_already_set& e) {
    TORCH_CHECK(false, "census: listing the libraries' rules failed: ",
                python_error(e));
  }
  return out;
}

// Every rule listed, each that loads resolved: once per process (the
// table's job list and its aggregate read the same list).
const std::vector<CensusRule>& resolved_rules() {
  static std::once_flag once;
  static std::vector<CensusRule> rules;
  std::call_once(once, [] {
    std::vector<CensusRule> listed = list_rules();
    for (CensusRule& rule : listed) {
      if (rule.rule.empty() || !rule.cannot_run.empty())
        continue;
      try {
        rule.opt = resolve_rule(rule.rule);
      } catch (const std::exception& e) {
        rule.cannot_run = reason_of(e);
      }
    }
    rules = std::move(listed);
  });
  return rules;
}

bool selected(const CensusRule& rule, const std::string& selector) {
  const size_t colon = selector.find(':');
  if (selector.substr(0, colon) != rule.library)
    return false;
  return colon == std::string::npos ||
         std::count(rule.aliases.begin(), rule.aliases.end(),
                    selector.substr(colon + 1)) > 0;
}

// The rules `select` names; throws naming a selector that names none.
std::vector<CensusRule> select_rules(const std::vector<CensusRule>& rules,
                                     const std::vector<std::string>& select) {
  if (select.empty())
    return rules;
  std::vector<CensusRule> kept;
  for (const std::string& selector : select) {
    const size_t before = kept.size();
    for (const CensusRule& rule : rules) {
      if (selected(rule, selector) &&
          std::none_of(kept.begin(), kept.end(), [&](const CensusRule& k) {
            return k.library == rule.library && k.aliases == rule.aliases;
          }))
        kept.push_back(rule);
    }
    if (kept.size() > before)
      continue;
    std::string known;
    for (const CensusRule& rule : rules) {
      if (known.find(rule.library + ",") == std::string::npos)
        known += rule.library + ", ";
    }
    const size_t colon = selector.find(':');
    TORCH_CHECK(colon == std::string::npos ||
                    known.find(selector.substr(0, colon) + ",") ==
                        std::string::npos,
                "census: library ", selector.substr(0, colon),
                " has no rule named '", selector.substr(colon + 1),
                "' (twin-run census --library ", selector.substr(0, colon),
                " lists its names)");
    TORCH_CHECK(false, "census: no library '", selector.substr(0, colon),
                "' (the census lists ", known.substr(0, known.size() - 2),
                ")");
  }
  // In the census's order, whatever the selectors' order.
  std::vector<CensusRule> ordered;
  for (const CensusRule& rule : rules) {
    if (std::any_of(kept.begin(), kept.end(), [&](const CensusRule& k) {
          return k.library == rule.library && k.aliases == rule.aliases;
        }))
      ordered.push_back(rule);
  }
  return ordered;
}

}  // namespace

std::vector<CensusRule> census_rules(bool probe_rules,
                                     const std::vector<std::string>& select) {
  std::vector<CensusRule> rules = select_rules(resolved_rules(), select);
  if (probe_rules) {
    for (CensusRule& rule : rules) {
      if (!rule.opt.empty() && rule.cannot_run.empty())
        rule.cannot_run = probe(rule);
    }
  }
  return rules;
}

}  // namespace bridge
