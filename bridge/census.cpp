// The census's rules: bridge/census.py lists them from the installed
// libraries' registries; here each is probed through the protocol.
#include "bridge/census.h"

#include <c10/util/Exception.h>
#include <pybind11/stl.h>

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

// Why `rule` does not train two steps of a one-block model here; empty
// when it does. The error's first line without the rule's own name (every
// error of a Python rule starts with it), classified by census.py.
std::string probe(const CensusRule& rule) {
  std::string error;
  try {
    const std::string name = resolve_rule(rule.rule);
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
    error = first_line(e.what());
    const size_t colon = error.find(": ");
    if (is_python_rule(error) && colon != std::string::npos)
      error = error.substr(colon + 2);
  }
  py::gil_scoped_acquire gil;
  return census_module().attr("probe_reason")(error).cast<std::string>();
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

}  // namespace

std::vector<CensusRule> census_rules(bool probe_rules,
                                     const std::string& library) {
  std::vector<CensusRule> rules = list_rules();
  if (!library.empty()) {
    std::vector<CensusRule> kept;
    std::string known;
    for (auto& rule : rules) {
      if (known.find(rule.library + ",") == std::string::npos)
        known += rule.library + ", ";
      if (rule.library == library)
        kept.push_back(std::move(rule));
    }
    TORCH_CHECK(!kept.empty(), "census: no library '", library,
                "' (the census lists ", known.substr(0, known.size() - 2), ")");
    rules = std::move(kept);
  }
  if (probe_rules) {
    for (CensusRule& rule : rules) {
      if (!rule.rule.empty() && rule.cannot_run.empty())
        rule.cannot_run = probe(rule);
    }
  }
  return rules;
}

}  // namespace bridge
