// The census's rules: census/census.py lists them from the installed
// libraries' registries (run in the bridge's interpreter through
// bridge::call_python); here each is resolved and probed through the
// protocol.
#include "census/census.h"

#include <c10/util/Exception.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "bridge/bridge.h"
#include "census_py.h"
#include "optim/registry.h"
#include "twins/defaults.h"
#include "twins/pair.h"
#include "twins/text.h"

using twins::CensusRule;
using twins::first_line;

namespace census {

namespace {

const bridge::EmbeddedModule kCensusModule = {"_twins_census", kCensusPy,
                                              "census/census.py"};

nlohmann::json call(const std::string& function, const nlohmann::json& args) {
  return bridge::call_python(kCensusModule, function, args);
}

// The census's reason for an error of a rule: its first line without the
// rule's own name (every error of a Python rule starts with it),
// classified by census.py.
std::string reason_of(const std::exception& e) {
  std::string error = first_line(e.what());
  const size_t colon = error.find(": ");
  if (bridge::is_python_rule(error) && colon != std::string::npos)
    error = error.substr(colon + 2);
  return call("probe_reason", {error}).get<std::string>();
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

// The census's libraries, in its order; none is imported to name them.
std::vector<std::string> library_names() {
  return call("library_names", nlohmann::json::array())
      .get<std::vector<std::string>>();
}

// The rules census/census.py lists for `library` (importing it alone).
std::vector<CensusRule> list_rules(const std::string& library) {
  nlohmann::json listed;
  try {
    listed = call("rules", {bridge::predictions_tsv(), {library}});
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "census: listing the rules of ", library,
                " failed: ", first_line(e.what()));
  }
  std::vector<CensusRule> out;
  for (const nlohmann::json& d : listed) {
    CensusRule rule;
    rule.library = d.at("library").get<std::string>();
    rule.version = d.at("version").get<std::string>();
    rule.aliases = d.at("aliases").get<std::vector<std::string>>();
    rule.rule = d.at("rule").get<std::string>();
    rule.definition = d.at("definition").get<std::string>();
    rule.predicted = d.at("predicted").get<std::string>();
    rule.table3 = d.at("table3").get<std::string>();
    rule.reason = d.at("reason").get<std::string>();
    rule.decided_by = d.at("decided_by").get<std::string>();
    rule.cannot_run = d.at("error").get<std::string>();
    out.push_back(std::move(rule));
  }
  return out;
}

// The listing of each library and the resolution of each rule, kept for
// the process (the table's job list and its aggregate read the same
// rules). Only what a selection names is listed and resolved: listing a
// library imports it, resolving a rule reads its class and defaults.
struct Cache {
  std::mutex mutex;
  std::vector<std::string> libraries;  // every name, in the census's order
  std::map<std::string, std::vector<CensusRule>> listed;  // per library
  // rule -> {canonical name, why it does not resolve}
  std::map<std::string, std::pair<std::string, std::string>> resolved;
};

Cache& cache() {
  static Cache c;
  return c;
}

// The libraries `select` names (every library when it names none), in
// the census's order; throws naming a library the census does not list.
std::vector<std::string> libraries_of(const std::vector<std::string>& all,
                                      const std::vector<std::string>& select) {
  if (select.empty())
    return all;
  std::set<std::string> named;
  for (const std::string& selector : select) {
    const std::string library = selector.substr(0, selector.find(':'));
    TORCH_CHECK(std::count(all.begin(), all.end(), library) > 0,
                "census: no library '", library, "' (the census lists ",
                fmt::format("{}", fmt::join(all, ", ")), ")");
    named.insert(library);
  }
  std::vector<std::string> out;
  for (const std::string& library : all) {
    if (named.count(library))
      out.push_back(library);
  }
  return out;
}

// `rule` with its canonical name, or why it does not resolve.
void resolve(CensusRule& rule, Cache& c) {
  if (rule.rule.empty() || !rule.cannot_run.empty())
    return;
  auto it = c.resolved.find(rule.rule);
  if (it == c.resolved.end()) {
    std::pair<std::string, std::string> outcome;
    try {
      outcome.first = bridge::resolve_rule(rule.rule);
    } catch (const std::exception& e) {
      outcome.second = reason_of(e);
    }
    it = c.resolved.emplace(rule.rule, outcome).first;
  }
  rule.opt = it->second.first;
  rule.cannot_run = it->second.second;
}

bool selected(const CensusRule& rule, const std::string& selector) {
  const size_t colon = selector.find(':');
  if (selector.substr(0, colon) != rule.library)
    return false;
  return colon == std::string::npos ||
         std::count(rule.aliases.begin(), rule.aliases.end(),
                    selector.substr(colon + 1)) > 0;
}

// The rules `select` names, in the census's order; throws naming a rule a
// library does not have.
std::vector<CensusRule> select_rules(const std::vector<CensusRule>& rules,
                                     const std::vector<std::string>& select) {
  if (select.empty())
    return rules;
  auto same = [](const CensusRule& a, const CensusRule& b) {
    return a.library == b.library && a.aliases == b.aliases;
  };
  std::vector<CensusRule> kept;
  for (const std::string& selector : select) {
    const size_t before = kept.size();
    bool matched = false;
    for (const CensusRule& rule : rules) {
      if (!selected(rule, selector))
        continue;
      matched = true;
      if (std::none_of(kept.begin(), kept.end(),
                       [&](const CensusRule& k) { return same(k, rule); }))
        kept.push_back(rule);
    }
    const size_t colon = selector.find(':');
    TORCH_CHECK(matched, "census: library ", selector.substr(0, colon),
                " has no rule named '", selector.substr(colon + 1),
                "' (twin-run census --library ", selector.substr(0, colon),
                " lists its names)");
    // Every rule it names was named before: a duplicate, not a typo.
    TORCH_CHECK(kept.size() > before, "census: --rules selects '", selector,
                "' twice (an earlier name in the list already selects ",
                colon == std::string::npos ? "its rules" : "it", ")");
  }
  std::vector<CensusRule> ordered;
  for (const CensusRule& rule : rules) {
    if (std::any_of(kept.begin(), kept.end(),
                    [&](const CensusRule& k) { return same(k, rule); }))
      ordered.push_back(rule);
  }
  return ordered;
}

}  // namespace

std::vector<CensusRule> rules(bool probe_rules,
                              const std::vector<std::string>& select) {
  TORCH_CHECK(bridge::available(),
              "census: this twin-run was built without Python support, and "
              "the census's rules are Python's (install python3-dev, "
              "pybind11-dev and python3-torch, then reconfigure: cmake -S . "
              "-B build -DTWINS_PYTHON=ON)");
  Cache& c = cache();
  std::vector<CensusRule> rules;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.libraries.empty())
      c.libraries = library_names();
    std::vector<CensusRule> listed;
    for (const std::string& library : libraries_of(c.libraries, select)) {
      auto it = c.listed.find(library);
      if (it == c.listed.end())
        it = c.listed.emplace(library, list_rules(library)).first;
      listed.insert(listed.end(), it->second.begin(), it->second.end());
    }
    rules = select_rules(listed, select);
    for (CensusRule& rule : rules)
      resolve(rule, c);
  }
  if (probe_rules) {
    for (CensusRule& rule : rules) {
      if (rule.runs())
        rule.cannot_run = probe(rule);
    }
  }
  return rules;
}

twins::CensusCatalogue catalogue() {
  if (!bridge::available())
    return nullptr;
  return [](const std::vector<std::string>& select) {
    return rules(false, select);
  };
}

}  // namespace census
