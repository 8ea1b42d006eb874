#include "sweep/tables.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "data/task.h"
#include "optim/registry.h"
#include "twins/trained.h"
#include "sweep/plan.h"

namespace sweep {

using twins::PairSpec;

namespace {

// ===========================================================================
// Job-list builders: a table's pairs from the request of its configuration

// Appends the pairs of one (optimizer, twin) row for the given seeds.
class JobList {
 public:
  explicit JobList(PlanRequest base) : base_(std::move(base)) {}

  void add(const std::string& opt, const std::string& twin,
           std::vector<uint64_t> init_seeds, std::vector<uint64_t> twin_seeds,
           std::vector<double> noise_scales = {1e-7}) {
    PlanRequest r = base_;
    r.opts = {opt};
    r.twins = {twin};
    r.init_seeds = std::move(init_seeds);
    r.twin_seeds = std::move(twin_seeds);
    r.noise_scales = std::move(noise_scales);
    for (auto& s : expand(r)) {
      pairs_.push_back(std::move(s));
    }
  }
  std::vector<PairSpec> take() { return std::move(pairs_); }

 private:
  PlanRequest base_;
  std::vector<PairSpec> pairs_;
};

// Table 3: no --opt / --twin, so expand() gives the Table-3 rows.
std::vector<PairSpec> table3_pairs(const PlanRequest& base,
                                   const TableOverrides&) {
  return expand(base);
}

// D.5: six Adam gauge pairs, Adam noise at 1e-7 and 1e-5, and two
// (init, draw) combinations for each equivariant method; Muon's noise twins
// share its init seeds (the chaos metric compares them per seed).
std::vector<PairSpec> multiseed_pairs(const PlanRequest& base,
                                      const TableOverrides&) {
  JobList jobs(base);
  jobs.add("adam", "gauge", {42, 123}, {777, 999, 1234});
  jobs.add("adam", "identity", {42}, {});
  jobs.add("adam", "noise", {42}, {twins::kDefaultNoiseSeed}, {1e-7, 1e-5});
  for (const char* opt : {"sgd", "scalar-adam", "muon"}) {
    jobs.add(opt, "gauge", {42}, {777});
    jobs.add(opt, "gauge", {123}, {999});
  }
  jobs.add("muon", "noise", {42, 123}, {twins::kDefaultNoiseSeed});
  return jobs.take();
}

// Table 9: Adam 6 (init x draw) gauge pairs, noise 1e-7 and 1e-5, identity;
// each equivariant method the first two of Adam's gauge pairs and a 1e-7
// noise twin.
std::vector<PairSpec> table9_pairs(const PlanRequest& base,
                                   const TableOverrides&) {
  JobList jobs(base);
  jobs.add("adam", "gauge", {42, 43}, {777, 888, 999});
  jobs.add("adam", "identity", {42}, {});
  jobs.add("adam", "noise", {42}, {twins::kDefaultNoiseSeed}, {1e-7, 1e-5});
  for (const char* opt : {"sgd", "scalar-adam", "muon"}) {
    jobs.add(opt, "gauge", {42}, {777, 888});
    jobs.add(opt, "noise", {42}, {twins::kDefaultNoiseSeed});
  }
  return jobs.take();
}

// The verdict's five pairs for each of `opts`.
std::vector<PairSpec> verdicts_of(PlanRequest base,
                                  std::vector<std::string> opts) {
  base.opts = std::move(opts);
  base.adam_ps.clear();
  return verdict_specs(base);
}

std::vector<PairSpec> zoo_pairs(const PlanRequest& base,
                                const TableOverrides&) {
  return verdicts_of(base, zoo_optimizers());
}

// The gauges table's key/value heads: g = 2 query heads per key head.
constexpr int64_t kGaugesKvHeads = 2;

// The gauges: the zoo's rules and the modern ones on a LLaMA-style
// attention (rotary positions, two key/value heads for four query heads),
// each under the QK gauge, the VO gauge and both, with the verdict's
// identity and noise twins.
std::vector<PairSpec> gauges_pairs(const PlanRequest& base,
                                   const TableOverrides&) {
  PlanRequest request = base;
  request.kv_heads = kGaugesKvHeads;
  request.rope = true;
  request.twins = {"gauge", "gauge-vo", "gauge-all"};
  std::vector<std::string> opts = zoo_optimizers();
  for (const std::string& opt : modern_optimizers())
    opts.push_back(opt);
  return verdicts_of(request, opts);
}

std::vector<PairSpec> modern_zoo_pairs(const PlanRequest& base,
                                       const TableOverrides&) {
  return verdicts_of(base, modern_optimizers());
}

// torch.optim's own classes run through a program's Python resolvers
// (bridge/): their names resolve only where one is registered.
std::vector<PairSpec> torch_zoo_pairs(const PlanRequest& base,
                                      const TableOverrides&) {
  TORCH_CHECK(runs_torch_rules(),
              "table torch-zoo: this program runs no Python rules (a twin-run "
              "built without Python support: install python3-dev, "
              "pybind11-dev and python3-torch, then reconfigure)");
  return verdicts_of(base, torch_optimizers());
}

// The census's rows that overrides.rules selects, from the catalogue the
// command handed over.
std::vector<twins::CensusRule> census_rows(const TableOverrides& overrides) {
  TORCH_CHECK(overrides.census,
              "table census: this program runs no Python rules (a twin-run "
              "built without Python support: install python3-dev, "
              "pybind11-dev and python3-torch, then reconfigure)");
  return overrides.census(overrides.rules);
}

// The census's job list: the verdict's five twins of every rule of its
// rows that can run, each at its library's default rate, on the Table-3
// model.
std::vector<PairSpec> census_pairs(const PlanRequest& base,
                                   const TableOverrides& overrides) {
  std::vector<std::string> rules;
  for (const twins::CensusRule& row : census_rows(overrides)) {
    if (row.runs())
      rules.push_back(row.opt);
  }
  TORCH_CHECK(!rules.empty(), "table census: no rule of ",
              overrides.rules.empty()
                  ? std::string("the census's libraries is installed")
                  : fmt::format("'{}' can run here",
                                fmt::join(overrides.rules, ", ")));
  std::vector<PairSpec> out;
  for (const std::string& rule : rules) {
    // A rule its library gives no rate (torch 1.13's SGD) is tried at
    // every rate of twins::census_rates() at once; 0: the default.
    std::vector<double> rates = {0};
    if (optim::find_optimizer(rule).lr <= 0)
      rates = twins::census_rates();
    for (double lr : rates) {
      PlanRequest request = base;
      request.lr = lr;
      for (PairSpec& spec : verdicts_of(request, {rule}))
        out.push_back(std::move(spec));
    }
  }
  return out;
}

// The census's second part: for each rule whose gauge twin is recorded at
// its library's default rate (in `pairs`) and did not train there (a
// diverged pair did not either; a failed one is not tried again), the
// verdict's five twins at every rate of twins::census_rates() but the
// default.
std::vector<PairSpec> census_more_rates(
    const PlanRequest& base, const std::vector<PairSpec>& pairs,
    const std::vector<twins::PairResult>& records) {
  std::map<std::string, const twins::PairResult*> by_key;
  for (const twins::PairResult& record : records)
    by_key.emplace(record.spec.key(), &record);
  std::set<std::string> listed, tried;  // pairs' keys; rules tried again
  for (const PairSpec& pair : pairs)
    listed.insert(pair.key());
  std::vector<PairSpec> out;
  for (const PairSpec& pair : pairs) {
    if (pair.twin != twins::TwinKind::kGauge || tried.count(pair.opt))
      continue;
    const auto it = by_key.find(pair.key());
    if (it == by_key.end() ||
        it->second->status == twins::PairStatus::kFailed ||
        twins::trained(*it->second))
      continue;
    for (double lr : twins::census_rates()) {
      if (std::abs(lr - pair.lr) <= 1e-9 * lr)
        continue;
      PlanRequest request = base;
      request.opts = {pair.opt};
      request.lr = lr;
      for (PairSpec& spec : verdict_specs(request)) {
        if (!listed.count(spec.key()))  // already a pair of the table
          out.push_back(std::move(spec));
      }
    }
    tried.insert(pair.opt);
  }
  return out;
}

// Gauge twins of adam-p at every p of the dial, one learning rate for every
// p (adam-p's default, 1e-3).
std::vector<PairSpec> dial_pairs(const PlanRequest& base,
                                 const TableOverrides&) {
  PlanRequest r = base;
  r.opts = {"adam-p"};
  r.adam_ps = dial_exponents();
  r.twins = {"gauge"};
  return expand(r);
}

// docs/protocol.md §9: the Table-3 pairs (every twin kind of the paper's
// optimizers) and the gauge twins of two more rules, one equivariant but
// chaotic (shampoo), one partly basis-dependent (adam-p0.5), each merged at
// steps 1, 100 and the last.
std::vector<PairSpec> merge_pairs(const PlanRequest& table,
                                  const TableOverrides&) {
  PlanRequest base = table;
  base.merge_at = default_merge_steps(base.steps);
  std::vector<PairSpec> pairs = expand(base);  // the Table-3 rows
  base.opts = {"shampoo", "adam-p0.5"};
  base.twins = {"gauge"};
  for (auto& p : expand(base))
    pairs.push_back(std::move(p));
  return pairs;
}

// docs/protocol.md §9 under the gauges of the attention people train: the
// LLaMA-style attention of the gauges table, the paper's equivariant rules,
// Adam and Adam-mini (which keeps the QK gauge and breaks the VO gauge),
// each under the QK gauge, the VO gauge, both, and the unrestricted rotation
// (not a symmetry under rotary positions), merged at steps 1, 100 and the
// last.
std::vector<PairSpec> merge_gauges_pairs(const PlanRequest& table,
                                         const TableOverrides&) {
  PlanRequest request = table;
  request.kv_heads = kGaugesKvHeads;
  request.rope = true;
  request.merge_at = default_merge_steps(request.steps);
  request.opts = {"sgd", "scalar-adam", "muon", "adam", "adam-mini"};
  request.twins = {"gauge", "gauge-vo", "gauge-all", "gauge-full"};
  return expand(request);
}

// ===========================================================================
// The tables

// The paper's model of a table. A zero shape or step count is the task's
// default (data::task_defaults): the mod-47 tables run the model every
// other command runs.
struct Model {
  const char* task;
  int64_t depth, d_model, heads, steps;
  const char* dtype;
  const char* protocol;  // docs/protocol.md §2a
};

constexpr Model kTable3Model = {"mod47", 0, 0, 0, 0, "float32", "paper-cpu"};
// The census: the Table-3 model through kCensusSteps steps (its onsets are
// read at steps 1 and 10, its training at the last; docs/results.md, "The
// census", says why not the paper's 1500).
constexpr int64_t kCensusSteps = 100;
constexpr Model kCensusModel = {"mod47",      0,         0, 0, kCensusSteps,
                                "float32",    "paper-cpu"};

// One table: everything that tells it from the others.
struct Config {
  const char* name;    // what `twin-run table NAME` takes
  const char* layout;  // its row in report's list of layouts
  const char* title;   // one line: what the paper calls it
  Model model;         // the paper's task, shape, steps and dtype
  // The device the paper's figures come from: another one is a deviation;
  // null where the device does not change the claim.
  const char* paper_device;
  // The job list of the table's request, `overrides` for what it alone
  // reads (the census's selection of rules).
  std::vector<PairSpec> (*pairs)(const PlanRequest& base,
                                 const TableOverrides& overrides);
};

// docs/protocol.md §7. Table 3 and D.5 ran on CPU in float32; Table 9 in
// float64 (on GPU in the paper; float64 makes the device immaterial to the
// claim). Beyond the paper, the zoo, the dial and merging are its
// diagnostics on the Table-3 model, on CPU.
const Config kConfigs[] = {
    {"table3", "table3",
     "Table 3: mod-47, 2L d64 4 heads, 1500 full-batch steps, CPU float32",
     kTable3Model, "cpu", table3_pairs},
    {"multiseed", "multiseed",
     "Appendix D.5 multi-seed summary: mod-47, 2L d64, 1500 steps, CPU "
     "float32",
     kTable3Model, "cpu", multiseed_pairs},
    {"table9-mod47",
     "table9",
     "Table 9 row: mod-47, 2L d64 4 heads, 1500 steps, float64",
     {"mod47", 0, 0, 0, 0, "float64", "paper-gpu"},
     nullptr,
     table9_pairs},
    {"table9-mod97-4L",
     "table9",
     "Table 9 row: mod-97, 4L d128 8 heads, 2000 steps, float64",
     {"mod97", 4, 128, 8, 2000, "float64", "paper-gpu"},
     nullptr,
     table9_pairs},
    {"table9-mod97-6L",
     "table9",
     "Table 9 row: mod-97, 6L d256 8 heads, 2000 steps, float64",
     {"mod97", 6, 256, 8, 2000, "float64", "paper-gpu"},
     nullptr,
     table9_pairs},
    {"table9-charlm",
     "table9",
     "Table 9 row: char-LM tiny-Shakespeare, 6L d256 8 heads, 3000 steps, "
     "float64",
     {"charlm", 0, 0, 0, 0, "float64", "paper-gpu"},
     nullptr,
     table9_pairs},
    {"zoo", "zoo",
     "Optimizer zoo: the verdict's five twins per "
     "optimizer, mod-47 2L d64, 1500 steps, CPU float32",
     kTable3Model, "cpu", zoo_pairs},
    {"zoo-modern", "zoo",
     "Optimizers in current use: the verdict's five twins "
     "per optimizer, mod-47 2L d64, 1500 steps, CPU float32",
     kTable3Model, "cpu", modern_zoo_pairs},
    {"torch-zoo", "zoo",
     "torch.optim's own optimizers (Python): the verdict's five twins "
     "per optimizer, mod-47 2L d64, 1500 steps, CPU float32",
     kTable3Model, "cpu", torch_zoo_pairs},
    {"census", "census",
     "The census: every rule of the installed optimizer libraries "
     "(Python), the verdict's five twins at its default rate (and 1e-4..1 "
     "where it does not train), mod-47 2L d64, 100 steps, CPU float32",
     kCensusModel, "cpu", census_pairs},
    {"gauges", "gauges",
     "The gauges of the attention people train: the zoo's and the modern "
     "rules under the QK gauge, the VO gauge and both, with rotary "
     "positions and grouped-query attention (4 query heads, 2 key/value "
     "heads), mod-47 2L d64, 1500 steps, CPU float32",
     kTable3Model, "cpu", gauges_pairs},
    {"dial", "dial",
     "Adam-p dial inside attention: gauge twins for p in {0, 1/8, 1/4, 1/2, "
     "3/4, 1}, lr 1e-3, mod-47 2L d64, 1500 steps, CPU float32",
     kTable3Model, "cpu", dial_pairs},
    {"merge", "merge",
     "Head merging: the Table-3 pairs plus shampoo and adam-p0.5 gauge twins, "
     "barriers at steps 1, 100 and the last, mod-47 2L d64, 1500 steps, CPU "
     "float32",
     kTable3Model, "cpu", merge_pairs},
    {"merge-gauges", "merge",
     "Head merging under the gauges: sgd, scalar-adam, muon, adam and "
     "adam-mini under the QK gauge, the VO gauge, both and the unrestricted "
     "rotation, with rotary positions and grouped-query attention (4 query "
     "heads, 2 key/value heads), barriers at steps 1, 100 and the last, "
     "mod-47 2L d64, 1500 steps, CPU float32",
     kTable3Model, "cpu", merge_gauges_pairs},
};

// The paper's step count of a table.
int64_t paper_steps(const Config& c) {
  return c.model.steps != 0 ? c.model.steps
                            : data::task_defaults(c.model.task).steps;
}

const Config& find_config(const std::string& name) {
  for (const auto& c : kConfigs) {
    if (name == c.name) {
      return c;
    }
  }
  std::string known;
  for (const auto& c : kConfigs) {
    known += (known.empty() ? "" : ", ") + std::string(c.name);
  }
  TORCH_CHECK(false, "Unknown table: '", name, "' (known: ", known, ")");
}

// The protocol table `c` follows in `dtype` (twins::default_protocol).
std::string paper_protocol(const Config& c, const std::string& dtype) {
  return twins::to_string(
      twins::default_protocol(twins::parse_protocol(c.model.protocol),
                              twins::parse_dtype(dtype)));
}

// The request of table `c`'s configuration with `o` applied.
PlanRequest base_request(const Config& c, const TableOverrides& overrides) {
  PlanRequest base;
  base.task = c.model.task;
  base.depth = c.model.depth;
  base.d_model = c.model.d_model;
  base.heads = c.model.heads;
  base.steps = overrides.steps != 0 ? overrides.steps : paper_steps(c);
  base.stop_after = overrides.stop_after;
  base.dtype = !overrides.dtype.empty() ? overrides.dtype : c.model.dtype;
  base.protocol = !overrides.protocol.empty() ? overrides.protocol
                                              : paper_protocol(c, base.dtype);
  base.device = !overrides.device.empty() ? overrides.device : "cpu";
  return base;
}

// How `base` differs from the paper's configuration of `c`.
std::vector<std::string> deviations(const Config& c, const PlanRequest& base) {
  std::vector<std::string> out;
  if (base.steps != paper_steps(c)) {
    out.push_back(
        fmt::format("steps {} (paper: {})", base.steps, paper_steps(c)));
  }
  if (base.stop_after != 0 && base.stop_after < base.steps) {
    out.push_back(fmt::format("stops after step {} of {}", base.stop_after,
                              base.steps));
  }
  if (base.protocol != paper_protocol(c, base.dtype)) {
    out.push_back(fmt::format("protocol {} (paper: {})", base.protocol,
                              c.model.protocol));
  }
  if (base.dtype != c.model.dtype) {
    out.push_back(
        fmt::format("dtype {} (paper: {})", base.dtype, c.model.dtype));
  }
  if (c.paper_device && base.device != c.paper_device) {
    out.push_back(
        fmt::format("device {} (paper: {})", base.device, c.paper_device));
  }
  return out;
}

}  // namespace

std::vector<int64_t> default_merge_steps(int64_t steps) {
  std::vector<int64_t> out;
  for (int64_t s : {int64_t(1), int64_t(100), steps}) {
    if (s <= steps && (out.empty() || out.back() < s))
      out.push_back(s);
  }
  return out;
}

std::vector<std::string> table_names(bool census) {
  std::vector<std::string> out;
  for (const auto& c : kConfigs) {
    if ((c.pairs == torch_zoo_pairs && !runs_torch_rules()) ||
        (c.pairs == census_pairs && !census))
      continue;  // not in a program without Python rules
    out.push_back(c.name);
  }
  return out;
}

Table make_table(const std::string& name, const TableOverrides& overrides) {
  const Config& c = find_config(name);
  TORCH_CHECK(overrides.rules.empty() || c.pairs == census_pairs,
              "--rules selects the census's rules (table census); table ",
              c.name, " takes none");
  TORCH_CHECK(!overrides.default_rates || c.pairs == census_pairs,
              "--default-rates is the census's (table census); table ",
              c.name, " takes none");
  const PlanRequest base = base_request(c, overrides);
  Table t;
  t.name = c.name;
  t.layout = c.layout;
  t.title = c.title;
  t.pairs = c.pairs(base, overrides);
  if (c.pairs == census_pairs)
    t.census = census_rows(overrides);  // the census keeps its listing
  t.records_failures = c.pairs == census_pairs;
  if (c.pairs == census_pairs && !overrides.default_rates) {
    t.follow_up = [base, pairs = t.pairs](
                      const std::vector<twins::PairResult>& records) {
      return census_more_rates(base, pairs, records);
    };
  }
  t.deviations = deviations(c, base);
  if (overrides.default_rates)
    t.deviations.push_back("default rates only (no other rate tried)");
  return t;
}

TableOverrides overrides_of(const std::string& name, const PairSpec& spec) {
  const Config& c = find_config(name);
  TableOverrides o;
  if (spec.steps != paper_steps(c)) {
    o.steps = spec.steps;
  }
  o.stop_after = spec.stop_after;
  if (twins::to_string(spec.protocol) !=
      paper_protocol(c, twins::dtype_name(spec.dtype))) {
    o.protocol = twins::to_string(spec.protocol);
  }
  if (twins::dtype_name(spec.dtype) != c.model.dtype) {
    o.dtype = twins::dtype_name(spec.dtype);
  }
  if (spec.device != "cpu") {
    o.device = spec.device;
  }
  return o;
}

std::string config_name(const std::string& name,
                        const TableOverrides& overrides) {
  std::string out = name;
  if (overrides.steps != 0)
    out += fmt::format("-steps{}", overrides.steps);
  if (overrides.stop_after != 0)
    out += fmt::format("-stop{}", overrides.stop_after);
  if (!overrides.protocol.empty())
    out += "-" + overrides.protocol;
  if (!overrides.dtype.empty())
    out += "-" + overrides.dtype;
  if (!overrides.device.empty() && overrides.device != "cpu") {
    std::string d = overrides.device;
    for (char& c : d) {
      if (c == ':')
        c = '_';
    }
    out += "-" + d;
  }
  if (!overrides.rules.empty()) {
    // "-timm-heavyball_SOAP": a file name's characters only.
    for (const std::string& rule : overrides.rules) {
      std::string part = rule;
      for (char& c : part) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' &&
            c != '.')
          c = '_';
      }
      out += "-" + part;
    }
  }
  if (overrides.default_rates)
    out += "-default-rates";
  return out;
}

// ---------------------------------------------------------------------------
// Verdicts

std::vector<PairSpec> verdict_specs(PlanRequest r) {
  TORCH_CHECK(!r.opts.empty(), "verdict: no optimizer given (--opt)");
  TORCH_CHECK(r.init_seeds.size() == 1,
              "verdict: one init seed per verdict, got ", r.init_seeds.size());
  // The gauge twins asked for (one verdict each), then the four every
  // verdict shares.
  std::vector<std::string> kinds;
  for (const std::string& name :
       r.twins.empty() ? std::vector<std::string>{"gauge"} : r.twins) {
    TORCH_CHECK(twins::is_gauge(twins::parse_twin_kind(name)),
                "verdict: --twin ", name,
                " is not a gauge twin (the identity, noise and "
                "round-trip twins are in every verdict); give "
                "gauge, gauge-vo, gauge-all or gauge-full");
    if (std::find(kinds.begin(), kinds.end(), name) == kinds.end())
      kinds.push_back(name);
  }
  r.twins = kinds;
  r.twins.insert(r.twins.end(), {"identity", "noise", "roundtrip"});
  r.twin_seeds.clear();
  r.noise_scales = {twins::kTripletNoiseScale, twins::kOnsetNoiseScale};
  std::vector<PairSpec> specs = expand(r);
  std::vector<std::string> seen;
  for (const auto& s : specs) {
    if (s.twin != twins::parse_twin_kind(kinds.front()))
      continue;
    TORCH_CHECK(std::find(seen.begin(), seen.end(), s.opt) == seen.end(),
                "verdict: optimizer '", s.opt, "' is listed twice");
    seen.push_back(s.opt);
  }
  return specs;
}

bool listed_when_run(const std::string& name) {
  return find_config(name).pairs == census_pairs;
}

}  // namespace sweep
