// Python rules inside the protocol (bridge/): the names and their identity,
// the parameter groups a rule receives, torch.optim's SGD and Adam against
// the built-in rules, a scalar Adam written here in Python, the errors, and
// the records' independence of threads. Built twice: against the bridge
// (embedding Python) and against the stub of a build without Python
// (TWINS_TEST_STUB), which only checks that stub's errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "bridge/bridge.h"
#include "census/census.h"
#include "bridge_test_config.h"
#include "sweep/tables.h"
#include "twins/stop.h"

#ifdef TWINS_TEST_STUB

TEST(BridgeWithoutPython, RuleNamesAreOneLineErrors) {
  EXPECT_FALSE(bridge::available());
  EXPECT_TRUE(bridge::is_python_rule("torch:Adam"));
  EXPECT_TRUE(bridge::is_python_rule("py:rule.py:MyAdam"));
  EXPECT_FALSE(bridge::is_python_rule("adam"));
  for (const char* name : {"torch:Adam", "py:rule.py:MyAdam"}) {
    try {
      bridge::resolve_rule(name);
      FAIL() << name << " resolved without Python support";
    } catch (const c10::Error& e) {
      const std::string m = e.what_without_backtrace();
      EXPECT_NE(m.find("built without Python support"), std::string::npos) << m;
      EXPECT_NE(m.find(name), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  // Built-in names pass through untouched.
  EXPECT_EQ(bridge::resolve_rules({"adam", "sgd"}),
            (std::vector<std::string>{"adam", "sgd"}));
  EXPECT_THROW(bridge::resolve_rules({"adam", "torch:SGD"}), c10::Error);
  // --opt-args without a Python rule is refused, not ignored.
  EXPECT_THROW(bridge::resolve_rules({"adam"}, "{\"momentum\": 0.9}"),
               c10::Error);
}

TEST(BridgeWithoutPython, TheTorchZooIsNotListed) {
  const auto names = sweep::table_names();
  EXPECT_EQ(std::find(names.begin(), names.end(), "torch-zoo"), names.end());
  try {
    sweep::make_table("torch-zoo");
    FAIL() << "torch-zoo made without Python rules";
  } catch (const c10::Error& e) {
    const std::string m = e.what_without_backtrace();
    EXPECT_NE(m.find("runs no Python rules"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(BridgeWithoutPython, TheCensusIsAOneLineError) {
  EXPECT_FALSE(census::catalogue());  // no census table to list
  try {
    census::rules(false);
    FAIL() << "the census listed rules without Python support";
  } catch (const c10::Error& e) {
    const std::string m = e.what_without_backtrace();
    EXPECT_NE(m.find("built without Python support"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

#else  // the bridge itself

#include <fmt/format.h>
#include <signal.h>
#include <torch/version.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmath>
#include <map>
#include <set>
#include <filesystem>
#include <fstream>

#include "binary_helpers.h"
#include "bridge_helpers.h"
#include "bridge/python_optimizer.h"
#include "data/sha256.h"
#include "optim/registry.h"
#include "report/verdict.h"
#include "sweep/engine.h"
#include "sweep/plan.h"
#include "twins/defaults.h"
#include "twins/io.h"
#include "twins/checkpoint.h"
#include "twins/pair.h"
#include "twins/record.h"
#include "twins/setup.h"
#include "twins/trained.h"

using namespace bridge_testing;

// ---------------------------------------------------------------------------
// The parameter groups a rule receives

TEST(BridgeGroups, NamesRolesAndHeadRowsFollowTheModel) {
  model::ModelConfig cfg;
  cfg.vocab_in = 12;
  cfg.vocab_out = 11;
  cfg.n_ctx = 3;
  cfg.depth = 2;
  cfg.d_model = 16;
  cfg.heads = 4;
  cfg.mlp = 64;
  cfg.last_only = true;
  model::Transformer m = model::build(cfg, 42, torch::kFloat, torch::kCPU);
  const auto groups = bridge::param_groups(twins::param_split(m));
  ASSERT_EQ(groups.size(), 2u * 6 + 2 + 2 * 2 + 2);
  EXPECT_EQ(groups.size(), m->parameters().size());  // each parameter once
  auto is = [](const torch::Tensor& a, const torch::Tensor& b) {
    return a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl();
  };
  const auto& l1 = m->blocks[1];
  const std::vector<std::pair<std::string, torch::Tensor> > expected = {
      {"layers.1.wq", l1->attn->wq->weight},
      {"layers.1.wk", l1->attn->wk->weight},
      {"layers.1.wv", l1->attn->wv->weight},
      {"layers.1.wo", l1->attn->wo->weight},
      {"layers.1.w1", l1->w1->weight},
      {"layers.1.w2", l1->w2->weight}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& g = groups[6 + i];
    EXPECT_EQ(g.name, expected[i].first);
    EXPECT_TRUE(is(g.param, expected[i].second)) << g.name;
    EXPECT_EQ(g.layer, 1);
    EXPECT_TRUE(g.matrix);
    EXPECT_EQ(g.gauge, i < 2) << g.name;
    EXPECT_EQ(g.heads, i < 4 ? 4 : 0) << g.name;
    EXPECT_EQ(g.head_dim, i < 4 ? 4 : 0) << g.name;
  }
  // The rotation of a head acts on rows head_dim*h .. head_dim*(h+1) of
  // W_Q: the model's own query block of that head.
  EXPECT_TRUE(
      torch::equal(groups[6].param.narrow(0, 2 * 4, 4), m->query_block(1, 2)));
  const std::vector<std::pair<std::string, std::string> > others = {
      {"embedding", "embedding"}, {"positional", "positional"},
      {"layers.0.norm1", "gain"}, {"layers.0.norm2", "gain"},
      {"layers.1.norm1", "gain"}, {"layers.1.norm2", "gain"},
      {"norm_f", "gain"},         {"head", "head"}};
  for (size_t i = 0; i < others.size(); ++i) {
    EXPECT_EQ(groups[12 + i].name, others[i].first);
    EXPECT_EQ(groups[12 + i].role, others[i].second);
    EXPECT_FALSE(groups[12 + i].matrix);
  }
  EXPECT_TRUE(is(groups[12].param, m->tok_emb));
  EXPECT_TRUE(is(groups[19].param, m->head->weight));
  EXPECT_TRUE(is(groups[16].param, m->blocks[1]->norm1->gain));
  EXPECT_EQ(groups[16].layer, 1);
  EXPECT_EQ(groups[18].layer, -1);
}

TEST(BridgeGroups, APythonRuleSeesTheDocumentedGroups) {
  // The rule writes what it received into a file; it must be the groups of
  // bridge::param_groups, with head_rows of every W_Q / W_K.
  const std::string seen = (scratch() / "groups.json").string();
  const std::string path = write_rule("groups_rule.py", fmt::format(R"(
import json, torch
def record(groups, lr):
    with open(r"{}", "w") as f:
        json.dump([{{k: v for k, v in g.items() if k != "params"}}
                   for g in groups], f)
    return torch.optim.SGD(groups, lr=lr)
)",
                                                                    seen));
  const std::string name = bridge::resolve_rule("py:" + path + ":record");
  auto req = tiny_request(name, 1);
  req.lr = 0.1;  // factories have no default rate
  run(sweep::expand(req));
  std::ifstream in(seen);
  const nlohmann::json g = nlohmann::json::parse(in);
  ASSERT_EQ(g.size(), 20u);
  EXPECT_EQ(g[0]["name"], "layers.0.wq");
  EXPECT_EQ(g[0]["role"], "wq");
  EXPECT_EQ(g[0]["layer"], 0);
  EXPECT_EQ(g[0]["gauge"], true);
  EXPECT_EQ(g[0]["heads"], 4);
  EXPECT_EQ(g[0]["head_rows"],
            nlohmann::json::parse("[[0,4],[4,8],[8,12],[12,16]]"));
  EXPECT_EQ(g[2]["gauge"], false);  // W_V: heads, but no gauge
  EXPECT_FALSE(g[4].contains("heads"));
  EXPECT_EQ(g[12]["name"], "embedding");
  EXPECT_TRUE(g[12]["layer"].is_null());
  EXPECT_EQ(g[19]["role"], "head");
}

// ---------------------------------------------------------------------------
// Names and identity

TEST(BridgeNames, TorchNamesAreCanonicalAndTakeTheirDefaults) {
  const std::string a =
      bridge::resolve_rule("torch:SGD{\"nesterov\": false, \"momentum\": 0.9}");
  EXPECT_EQ(a, "torch:SGD{\"momentum\":0.9,\"nesterov\":false}");
  // --opt-args-style arguments merge under the name's own.
  EXPECT_EQ(bridge::resolve_rule("torch:SGD{\"momentum\": 0.9}",
                                 "{\"nesterov\": false, \"momentum\": 0.5}"),
            a);
  const optim::OptimizerInfo& sgd = optim::find_optimizer(a);
  EXPECT_EQ(sgd.predicted, optim::Equivariance::kEquivariant);
  // torch.optim.SGD's rate is required before torch 2.2, 1e-3 from it on.
  const bool sgd_rate = TORCH_VERSION_MAJOR > 2 ||
                        (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2);
  EXPECT_EQ(sgd.lr, sgd_rate ? 1e-3 : 0);
  // The record's hyperparameters: torch's resolved defaults, lr excluded.
  EXPECT_EQ(twins::hparams_text(sgd.hparams),
            "dampening=0,differentiable=0,maximize=0,momentum=0.9,"
            "nesterov=0,weight_decay=0");
  // lr among the arguments is the default rate, part of the name (one
  // registry entry, one default rate).
  const std::string b = bridge::resolve_rule("torch:SGD{\"lr\": 0.5}");
  EXPECT_EQ(b, "torch:SGD{\"lr\":0.5}");
  EXPECT_EQ(optim::find_optimizer(b).lr, 0.5);
  EXPECT_EQ(twins::default_lr(b, "mod47"), 0.5);
  EXPECT_EQ(optim::find_optimizer(bridge::resolve_rule("torch:Adam")).lr,
            1e-3);  // torch.optim.Adam's signature
  EXPECT_EQ(optim::find_optimizer("torch:Adam").predicted,
            optim::Equivariance::kBasisDependent);
  EXPECT_EQ(bridge::resolve_rules({"adam", "torch:Adam"}),
            (std::vector<std::string>{"adam", "torch:Adam"}));
}

TEST(BridgeNames, EditingAFileRuleChangesItsNameAndKey) {
  const std::string path = write_rule("edited.py", kScalarAdam);
  const std::string before = bridge::resolve_rule("py:" + path + ":ScalarAdam");
  EXPECT_TRUE(contains(before, "py:" + path + "#")) << before;
  EXPECT_TRUE(contains(before, ":ScalarAdam")) << before;
  EXPECT_EQ(optim::find_optimizer(before).predicted,
            optim::Equivariance::kEquivariant);     // twins_predicted
  // A rule that states no class and that the census's predictions do not
  // name has none (it is not taken to be basis-dependent).
  const std::string unstated = write_rule(
      "unstated.py", "import torch\nclass Plain(torch.optim.SGD):\n    pass\n");
  EXPECT_FALSE(optim::find_optimizer(
                   bridge::resolve_rule("py:" + unstated + ":Plain"))
                   .predicted.has_value());
  // A class the census predicts, at its defaults (lr aside), takes the
  // census's class (bridge/predictions.tsv: torch.optim.Adam
  // basis-dependent, torch.optim.SGD equivariant); with other arguments
  // it is a rule the census did not predict.
  EXPECT_EQ(optim::find_optimizer(bridge::resolve_rule("py:torch.optim:Adam"))
                .predicted,
            optim::Equivariance::kBasisDependent);
  EXPECT_EQ(optim::find_optimizer(
                bridge::resolve_rule("py:torch.optim:SGD{\"lr\": 0.1}"))
                .predicted,
            optim::Equivariance::kEquivariant);
  EXPECT_FALSE(optim::find_optimizer(bridge::resolve_rule(
                                         "py:torch.optim:SGD{\"momentum\": 0.9}"))
                   .predicted.has_value());
  EXPECT_EQ(bridge::resolve_rule(before), before);  // a canonical name back
  auto spec = sweep::expand(tiny_request(before, 3))[0];
  std::ofstream(path, std::ios::app) << "\n# edited\n";
  const std::string after = bridge::resolve_rule("py:" + path + ":ScalarAdam");
  EXPECT_NE(after, before);
  auto edited = sweep::expand(tiny_request(after, 3))[0];
  EXPECT_NE(edited.key(), spec.key());
  EXPECT_NE(edited.pair_id(), spec.pair_id());
  // The old name now names a file that is not there any more.
  EXPECT_TRUE(
      contains(error_of([&] { bridge::resolve_rule(before); }),
               "' changed since this name was recorded"));
  // Other arguments, another rule.
  EXPECT_NE(bridge::resolve_rule("py:" + path + ":ScalarAdam{\"eps\": 1e-6}"),
            after);
}

// A module of its own directory that a file rule imports is part of its
// name: an edited helper gave the same key with other numbers (val_loss
// 2.62, then 3.73), and a resume mixed the two codes in one file. A rule
// without helpers keeps the name its file alone gives.
TEST(BridgeNames, AFileRulesOwnHelperModulesArePartOfItsName) {
  const fs::path dir = testing_helpers::fresh_dir("bridge-helpers");
  fs::create_directories(dir / "pkg");
  testing_helpers::spit(dir / "pkg" / "helper_mod_twins.py", "FACTOR = 0.5\n");
  testing_helpers::spit(dir / "pkg" / "userule.py", R"(
import torch
import helper_mod_twins
class H(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr * helper_mod_twins.FACTOR)
)");
  const std::string rule = "py:" + (dir / "pkg" / "userule.py").string() + ":H";
  const std::string before = bridge::resolve_rule(rule);
  testing_helpers::spit(dir / "pkg" / "helper_mod_twins.py", "FACTOR = 2.0\n");
  // (This process keeps the module it imported; the hash is of the files.)
  const std::string after = bridge::resolve_rule(rule);
  EXPECT_NE(after, before);
  const std::string msg = error_of([&] { bridge::resolve_rule(before); });
  EXPECT_TRUE(contains(msg, "or the modules beside it that it imports "
                            "(helper_mod_twins.py) changed since this name "
                            "was recorded"))
      << msg;
  // Without helpers the hash is the file's alone (sha256sum's first 16).
  const std::string alone = write_rule(
      "alone.py", "import torch\nclass A(torch.optim.SGD):\n    pass\n");
  const std::string hash =
      data::sha256_hex(twins::read_file(alone, "rule")).substr(0, 16);
  EXPECT_TRUE(contains(bridge::resolve_rule("py:" + alone + ":A"), "#" + hash))
      << hash;
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------
// torch.optim against the built-in rules

TEST(BridgeTorch, SgdMomentumRecordsAreBitwiseTheBuiltIns) {
  // The built-in sgd is LibTorch's SGD, momentum 0.9, dampening 0; torch's
  // Python SGD runs the same ops in the same order (buf = g at step 1, then
  // buf = 0.9 buf + g; p -= lr buf), so every number of every record is
  // equal, float32, gauge and noise twins.
  const std::string name =
      bridge::resolve_rule("torch:SGD{\"momentum\": 0.9, \"dampening\": 0}");
  for (const char* twin : {"gauge", "noise"}) {
    auto py_req = tiny_request(name, 60);
    py_req.lr = 0.5;
    py_req.twins = {twin};
    auto cpp_req = py_req;
    cpp_req.opts = {"sgd"};
    const auto py = run(sweep::expand(py_req));
    const auto cpp = run(sweep::expand(cpp_req));
    ASSERT_EQ(py.size(), 1u);
    EXPECT_EQ(numbers_of(py[0]), numbers_of(cpp[0])) << twin;
    EXPECT_GT(py[0].curve.back().logit_drift, 0) << twin;
  }
}

TEST(BridgeTorch, AdamFloat64MatchesTheBuiltInAndIsBasisDependent) {
  const std::string name = bridge::resolve_rule("torch:Adam");
  auto py_req = tiny_request(name, 20, "float64");
  auto cpp_req = py_req;
  cpp_req.opts = {"adam"};
  py_req.lr = cpp_req.lr = 1e-3;
  const auto py = run(sweep::verdict_specs(py_req), 2);
  const auto cpp = run(sweep::verdict_specs(cpp_req), 2);
  ASSERT_EQ(py.size(), 5u);
  double largest = 0;
  for (size_t i = 0; i < py.size(); ++i) {
    const double a = twins::drift_at(py[i], 1), b = twins::drift_at(cpp[i], 1);
    if (b == 0) {
      EXPECT_EQ(a, 0) << twins::pair_label(py[i].spec);
      continue;
    }
    largest = std::max(largest, std::abs(a - b) / b);
    EXPECT_LE(std::abs(a - b), 1e-12 * b) << twins::pair_label(py[i].spec);
  }
  std::printf(
      "torch:Adam vs adam, float64: largest relative step-1 drift "
      "difference %.3g\n",
      largest);
  const report::Verdict v = report::judge(py);
  EXPECT_EQ(v.verdict, report::VerdictClass::kBasisDependent)
      << report::format_verdict_line(v);
  EXPECT_EQ(v.identity_max, 0);
}

// A Python rule's state goes into a group's checkpoint as its
// state_dict() (docs/output-format.md, "Checkpoints"): stopped at step 7
// and resumed, the group's records are the straight run's, bit for bit.
TEST(BridgeCheckpoint, APythonRuleResumesToTheSameBits) {
  for (const char* rule : {"torch:Adam", "torch:SGD{\"momentum\":0.9}"}) {
    SCOPED_TRACE(rule);
    auto req = tiny_request(bridge::resolve_rule(rule), 20, "float64");
    req.lr = 1e-2;
    const auto specs = sweep::verdict_specs(req);
    auto text = [](const std::vector<twins::PairResult>& rs) {
      std::vector<std::string> out;
      for (const auto& r : rs)
        out.push_back(twins::without_timing(twins::to_json(r)).dump());
      return out;
    };
    const auto straight = text(twins::run_group(specs));
    const std::string file = (scratch() / "python.ckpt").string();
    fs::remove(file);
    twins::StatePolicy policy;
    policy.every_steps = 1000;
    twins::GroupOptions stop;
    stop.checkpoint = twins::GroupCheckpoint(file, policy);
    stop.progress = [](int64_t step) {
      if (step == 7)
        twins::request_stop(SIGTERM);
    };
    EXPECT_THROW(twins::run_group(specs, stop), twins::Stopped);
    twins::clear_stop();
    EXPECT_EQ(twins::read_state_file(file).header.at("step"), 7);
    twins::GroupOptions resume;
    resume.checkpoint = twins::GroupCheckpoint(file, policy);
    EXPECT_EQ(text(twins::run_group(specs, resume)), straight);
  }
}

TEST(BridgeTorch, PythonScalarAdamIsEquivariant) {
  const std::string path = write_rule("scalar_adam.py", kScalarAdam);
  const std::string name = bridge::resolve_rule("py:" + path + ":ScalarAdam");
  auto req = tiny_request(name, 20);
  req.lr = 3e-3;
  const auto results = run(sweep::verdict_specs(req), 2);
  const report::Verdict v = report::judge(results);
  EXPECT_EQ(v.verdict, report::VerdictClass::kEquivariant)
      << report::format_verdict_line(v);
  EXPECT_TRUE(report::as_predicted(v, optim::find_optimizer(name).predicted.value()));
  EXPECT_EQ(v.identity_max, 0);  // the identity twin exactly 0
  // It trains: the rule moved the parameters from step 1.
  EXPECT_EQ(v.onset_step, 1);
}

// ---------------------------------------------------------------------------
// Threads: both copies stepping in Python at once

TEST(BridgeThreads, ConcurrentPythonStepsGiveTheSequentialRecords) {
  const std::string name = bridge::resolve_rule("torch:Adam");
  const std::string path = write_rule("scalar_adam_threads.py", kScalarAdam);
  const std::string scalar = bridge::resolve_rule("py:" + path + ":ScalarAdam");
  for (const std::string& opt : {name, scalar}) {
    auto req = tiny_request(opt, 30);
    req.lr = 1e-3;
    const auto specs = sweep::verdict_specs(req);
    const auto one = run(specs, 1);
    const auto three = run(specs, 3);  // reference + 5 twins, 3 at once
    // Every pair its own group (copy 1 trained five times), 2 groups at
    // once, each stepping its two copies at once.
    const auto jobs = run(specs, 2, 2, "", /*share=*/false);
    ASSERT_EQ(one.size(), 5u);
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(numbers_of(one[i]), numbers_of(three[i])) << opt << " " << i;
      EXPECT_EQ(numbers_of(one[i]), numbers_of(jobs[i])) << opt << " " << i;
    }
  }
}

// ---------------------------------------------------------------------------
// Errors: one line, naming the rule, before a results file exists

TEST(BridgeErrors, BadNamesFilesAndArguments) {
  const std::string missing = (scratch() / "nope.py").string();
  EXPECT_TRUE(contains(
      error_of([&] { bridge::resolve_rule("py:" + missing + ":Rule"); }),
      "no such file '" + missing + "'"));
  const std::string path = write_rule("defines.py", kScalarAdam);
  const std::string m =
      error_of([&] { bridge::resolve_rule("py:" + path + ":Nope"); });
  EXPECT_TRUE(contains(m, "defines no 'Nope'")) << m;
  EXPECT_TRUE(contains(m, "ScalarAdam")) << m;  // what it does define
  const std::string bad = write_rule("bad.py", "def broken(:\n");
  EXPECT_TRUE(
      contains(error_of([&] { bridge::resolve_rule("py:" + bad + ":broken"); }),
               "failed to load: SyntaxError"));
  const std::string plain =
      write_rule("plain.py", "class NotAnOptimizer:\n  pass\n");
  EXPECT_TRUE(contains(error_of([&] {
                         bridge::resolve_rule("py:" + plain +
                                              ":NotAnOptimizer");
                       }),
                       "not a torch.optim.Optimizer"));
  EXPECT_TRUE(contains(error_of([] { bridge::resolve_rule("torch:Adamm"); }),
                       "Unknown torch.optim optimizer: 'Adamm'"));
  EXPECT_TRUE(contains(
      error_of([] { bridge::resolve_rule("torch:SGD{\"momentum\": -1}"); }),
      "rejected its arguments: ValueError: Invalid momentum value: -1"));
  EXPECT_TRUE(contains(
      error_of([] { bridge::resolve_rule("torch:Adam{\"momentum\": 0.9}"); }),
      "TypeError"));
  EXPECT_TRUE(contains(
      error_of([] { bridge::resolve_rule("torch:Adam{\"betas\": [0.9,}"); }),
      "is not JSON"));
  EXPECT_TRUE(
      contains(error_of([] { bridge::resolve_rule("torch:Adam", "[1]"); }),
               "not a JSON object"));
  // A key twice is refused, not resolved to its last value, in the name
  // and in --opt-args alike.
  EXPECT_TRUE(contains(error_of([] {
                         bridge::resolve_rule(
                             R"(torch:SGD{"momentum":0.9,"momentum":0.5})");
                       }),
                       "key \"momentum\" given twice"));
  EXPECT_TRUE(contains(error_of([] {
                         bridge::resolve_rule("torch:SGD",
                                              R"({"lr":0.1,"lr":0.2})");
                       }),
                       "key \"lr\" given twice"));
  EXPECT_TRUE(contains(error_of([] { bridge::resolve_rule("py:rule.py"); }),
                       "Malformed Python rule name"));
  EXPECT_TRUE(contains(error_of([] {
                         bridge::resolve_rule(
                             "python:__main__.Mine#0123456789abcdef");
                       }),
                       "exists only there"));
}

TEST(BridgeErrors, ARuleRejectingItsGroupsLeavesNoFile) {
  // Accepted by name, refused when built on the model's groups.
  const std::string path = write_rule("picky.py", R"(
import torch
def picky(groups, lr, beta=0.5):
    if any(g["role"] == "head" for g in groups):
        raise ValueError("no head, please")
    return torch.optim.SGD(groups, lr=lr)
)");
  const std::string name = bridge::resolve_rule("py:" + path + ":picky");
  auto req = tiny_request(name, 5);
  req.lr = 0.1;  // factories have no default rate
  const std::string out = (scratch() / "picky.jsonl").string();
  const std::string m = error_of([&] { run(sweep::expand(req), 1, 1, out); });
  EXPECT_TRUE(contains(m, name + ": rejected its arguments or parameters: "
                                 "ValueError: no head, please"))
      << m;
  EXPECT_FALSE(fs::exists(out));
  req.opts = {bridge::resolve_rule("py:" + path + ":picky{\"gamma\": 1}")};
  EXPECT_TRUE(contains(error_of([&] { run(sweep::expand(req), 1, 1, out); }),
                       "TypeError"));
  EXPECT_FALSE(fs::exists(out));
}

// A keyword that a rule's **kwargs takes without using it (neither a
// parameter nor in the built optimizer's defaults) is a misspelling that
// would run as the rule without it: refused when the rule is built, no file
// written. One its base class takes through **kwargs is in its defaults.
TEST(BridgeErrors, AKeywordTheRulesKwargsIgnoreIsRefused) {
  const std::string path = write_rule("swallow.py", R"(
import torch
class Swallow(torch.optim.SGD):
    def __init__(self, params, lr=0.1, **kwargs):
        super().__init__(params, lr=lr)
class Passes(torch.optim.SGD):
    def __init__(self, params, lr=0.1, **kwargs):
        super().__init__(params, lr=lr, **kwargs)
)");
  const std::string name =
      bridge::resolve_rule("py:" + path + ":Swallow{\"nosuchkw\": 1}");
  const std::string out = (scratch() / "swallow.jsonl").string();
  const std::string m =
      error_of([&] { run(sweep::expand(tiny_request(name, 2)), 1, 1, out); });
  EXPECT_TRUE(contains(m, "keyword 'nosuchkw' is neither a parameter of "
                          "Swallow nor in its defaults"))
      << m;
  EXPECT_FALSE(fs::exists(out));
  const std::string passes =
      bridge::resolve_rule("py:" + path + ":Passes{\"momentum\": 0.9}");
  EXPECT_NO_THROW(run(sweep::expand(tiny_request(passes, 2)), 1, 1, out));
  EXPECT_TRUE(fs::exists(out));
}

// A state no checkpoint can hold is found at step 1, not at the first
// checkpoint (ten minutes into a run by default), and leaves no file.
TEST(BridgeErrors, AStateThatCannotBeCheckpointedIsAnErrorAtStepOne) {
  const std::string path = write_rule("locked.py", R"(
import threading
import torch
class Locked(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["lock"] = threading.Lock()
        return super().step(closure)
)");
  const std::string name = bridge::resolve_rule("py:" + path + ":Locked");
  const std::string out = (scratch() / "locked.jsonl").string();
  const std::string m =
      error_of([&] { run(sweep::expand(tiny_request(name, 3)), 1, 1, out); });
  EXPECT_TRUE(contains(m, name + ": its state cannot be checkpointed "
                                 "(torch.save of its state_dict() after "
                                 "step 1: TypeError"))
      << m;
  EXPECT_FALSE(fs::exists(out));
}

// A rule that takes the stop signals for itself (a handler, or SIG_IGN)
// has twin-run's put back after each call: SIGTERM still checkpoints.
TEST(BridgeErrors, ARuleCannotTakeTheStopSignals) {
  const std::string path = write_rule("ignores.py", R"(
import signal
import torch
class Ignores(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    def step(self, closure=None):
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        return super().step(closure)
)");
  const std::string name = bridge::resolve_rule("py:" + path + ":Ignores");
  const std::string out = (scratch() / "ignores.jsonl").string();
  twins::StopSignals guard(true);
  run(sweep::expand(tiny_request(name, 2)), 1, 1, out);
  for (int signal : {SIGTERM, SIGUSR1}) {
    struct sigaction now = {};
    ::sigaction(signal, nullptr, &now);
    EXPECT_NE(now.sa_handler, SIG_IGN) << signal;
  }
  EXPECT_EQ(twins::restore_stop_handlers(), "");
}

TEST(BridgeErrors, AnExceptionInStepNamesTheStepAndLeavesNoFile) {
  const std::string path = write_rule("raises.py", R"(
import torch
class Raises(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
        self.t = 0
    def step(self):
        self.t += 1
        if self.t == 3:
            raise ValueError("boom at three")
        return super().step()
)");
  const std::string name = bridge::resolve_rule("py:" + path + ":Raises");
  const std::string out = (scratch() / "raises.jsonl").string();
  const std::string m = error_of(
      [&] { run(sweep::verdict_specs(tiny_request(name, 10)), 2, 1, out); });
  EXPECT_TRUE(contains(m, name + ": step() raised at step 3: ValueError: "
                                 "boom at three"))
      << m;
  EXPECT_FALSE(fs::exists(out));
}

TEST(BridgeErrors, NonFiniteParametersAreTheUsualDivergence) {
  // A step that writes NaN: the measurement at step 1's checkpoint is not
  // finite (nor would step 2's loss be), so the pair ends at step 1 as any
  // diverging pair does (recorded, status diverged).
  const std::string path = write_rule("nan.py", R"(
import torch
class Poison(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))
    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                p.fill_(float("nan"))
)");
  const std::string name = bridge::resolve_rule("py:" + path + ":Poison");
  const auto results = run(sweep::verdict_specs(tiny_request(name, 10)));
  ASSERT_EQ(results.size(), 5u);
  for (const auto& r : results) {
    EXPECT_EQ(r.status, twins::PairStatus::kDiverged);
    EXPECT_EQ(r.diverged_step, 1);
  }
  // NaN drifts: never a verdict of equivariance or basis dependence.
  const report::Verdict v = report::judge(results);
  EXPECT_TRUE(v.verdict == report::VerdictClass::kUndetermined ||
              v.verdict == report::VerdictClass::kInvalid)
      << report::format_verdict_line(v);
}

// ---------------------------------------------------------------------------
// torch.optim's own rules as a table

TEST(BridgeTorchZoo, TheTableIsTorchOptimsRulesWithTheirPredictions) {
  bridge::install();
  const auto names = sweep::table_names();
  ASSERT_NE(std::find(names.begin(), names.end(), "torch-zoo"), names.end());
  const sweep::Table t = sweep::make_table("torch-zoo");
  const auto opts = sweep::torch_optimizers();
  // torch.optim.Muon joins where the Python's torch has it (2.9+; the
  // bridge runs only a Python whose torch is the LibTorch's release).
  const bool muon = TORCH_VERSION_MAJOR > 2 ||
                    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9);
  ASSERT_EQ(opts.size(), muon ? 14u : 13u);
  if (muon)
    EXPECT_EQ(opts.back(), R"(torch:Muon{"lr":0.001})");
  ASSERT_EQ(t.pairs.size(), 5 * opts.size());  // the verdict's five twins
  for (const auto& opt : opts) {
    // Each name is canonical: resolving it gives it back.
    EXPECT_EQ(bridge::resolve_rule(opt), opt);
    // The rate comes from the name (docs/results.md lists those tried).
    const auto it = std::find_if(t.pairs.begin(), t.pairs.end(),
                                 [&](const auto& p) { return p.opt == opt; });
    ASSERT_NE(it, t.pairs.end()) << opt;
    const double lr = nlohmann::json::parse(opt.substr(opt.find('{')))["lr"];
    EXPECT_EQ(it->lr, lr) << opt;
    // Scalar-coefficient updates (SGD, ASGD) are predicted equivariant,
    // per-entry ones basis-dependent (docs/protocol.md §5).
    const bool scalar = contains(opt, "torch:SGD") || contains(opt, "ASGD") ||
                        contains(opt, "torch:Muon");
    EXPECT_EQ(optim::find_optimizer(opt).predicted,
              scalar ? optim::Equivariance::kEquivariant
                     : optim::Equivariance::kBasisDependent)
        << opt;
  }
}

// The census lists every library it knows, each rule once with its
// aliases and the prediction set for it (bridge/predictions.tsv).
TEST(BridgeCensus, EveryInstalledRuleIsListedOnceWithItsPrediction) {
  bridge::install();
  const std::vector<twins::CensusRule> rules = census::rules(false);
  std::set<std::string> libraries, names;
  std::map<std::string, std::set<std::string>> aliases;  // per library
  for (const auto& rule : rules) {
    libraries.insert(rule.library);
    if (rule.rule.empty()) {  // a library that is not installed
      EXPECT_EQ(rule.cannot_run, "not installed") << rule.library;
      continue;
    }
    EXPECT_TRUE(names.insert(rule.rule).second) << rule.rule << " twice";
    ASSERT_FALSE(rule.aliases.empty()) << rule.rule;
    for (const auto& alias : rule.aliases)
      EXPECT_TRUE(aliases[rule.library].insert(alias).second)
          << rule.library << " lists " << alias << " in two rules";
    // The predictions were set for the pinned releases
    // (tests/python/requirements.txt) and Debian's torch.
    EXPECT_FALSE(rule.predicted.empty()) << rule.rule << " has no prediction";
    EXPECT_FALSE(rule.version.empty()) << rule.rule;
  }
  EXPECT_EQ(libraries,
            (std::set<std::string>{
                "torch", "pytorch_optimizer", "timm", "heavyball",
                "torch-optimizer", "schedulefree", "lion-pytorch",
                "kron-torch", "prodigyopt", "adam_mini",
                "emerging-optimizers", "muon-optimizer", "bitsandbytes",
                "torch-optimi", "dadaptation", "torch-adopt",
                "adam-atan2-pytorch", "came-pytorch", "sophia-opt",
                "grokadamw", "galore-torch", "apollo-torch"}));
  auto find = [&](const std::string& name) {
    const auto it = std::find_if(rules.begin(), rules.end(),
                                 [&](const auto& r) { return r.rule == name; });
    return it == rules.end() ? nullptr : &*it;
  };
  // torch.optim's classes by their names, predicted from their updates.
  ASSERT_NE(find("torch:Adam"), nullptr);
  EXPECT_EQ(find("torch:Adam")->predicted, "basis-dependent");
  EXPECT_EQ(find("torch:Adam")->version.substr(0, 4),
            std::string(TORCH_VERSION).substr(0, 4));
  ASSERT_NE(find("torch:SGD"), nullptr);
  EXPECT_EQ(find("torch:SGD")->predicted, "equivariant");
  // timm's registry names of one class and defaults are one rule.
  if (aliases.count("timm")) {
    const auto it = std::find_if(rules.begin(), rules.end(), [](const auto& r) {
      return r.library == "timm" &&
             std::find(r.aliases.begin(), r.aliases.end(), "sgd") !=
                 r.aliases.end();
    });
    ASSERT_NE(it, rules.end());
    EXPECT_NE(std::find(it->aliases.begin(), it->aliases.end(), "nesterov"),
              it->aliases.end());
    EXPECT_TRUE(contains(it->rule, "create_optimizer_v2")) << it->rule;
  }
}

// The probe trains each rule two steps through the protocol: torch.optim's
// SparseAdam, which takes sparse gradients only, is classified; Adam runs.
TEST(BridgeCensus, TheProbeSaysWhyARuleCannotRunHere) {
  bridge::install();
  const auto rules = census::rules(true, {"torch"});
  bool adam = false, sparse = false;
  for (const auto& rule : rules) {
    EXPECT_EQ(rule.library, "torch");
    if (rule.rule == "torch:Adam") {
      adam = true;
      EXPECT_EQ(rule.cannot_run, "");
    }
    if (rule.rule == "torch:SparseAdam") {
      sparse = true;
      EXPECT_TRUE(contains(rule.cannot_run,
                           "cannot run here: needs sparse gradients"))
          << rule.cannot_run;
    }
  }
  EXPECT_TRUE(adam && sparse);
  // Where torch-optimizer is installed (the CUDA leg's venv): a wrapper
  // that takes no lr and a rule that needs Hessian-vector products are
  // classified, and its plain rules run.
  const auto listed = census::rules(false, {"torch-optimizer"});
  if (!listed.front().rule.empty()) {
    std::map<std::string, std::string> why;
    for (const auto& rule : census::rules(true, {"torch-optimizer"}))
      why[rule.rule] = rule.cannot_run;
    EXPECT_TRUE(contains(why["py:torch_optimizer:Lookahead"],
                         "cannot run here: wraps another optimizer"))
        << why["py:torch_optimizer:Lookahead"];
    EXPECT_TRUE(contains(why["py:torch_optimizer:Adahessian"],
                         "cannot run here: needs second-order gradients"))
        << why["py:torch_optimizer:Adahessian"];
    EXPECT_EQ(why["py:torch_optimizer:Yogi"], "");
  }
  try {
    census::rules(false, {"nope"});
    FAIL() << "an unknown library was listed";
  } catch (const c10::Error& e) {
    const std::string m = e.what_without_backtrace();
    EXPECT_TRUE(contains(m, "no library 'nope'") && contains(m, "torch, "))
        << m;
  }
}

// ---------------------------------------------------------------------------
// The twin-run binary

TEST(BridgeCli, CensusListsAndProbesALibrary) {
  using namespace testing_helpers;
  const fs::path dir = fresh_dir("bridge-census");
  const Outcome o = twin_run("census --library torch --probe", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(contains(o.out, "| torch==")) << o.out;
  EXPECT_TRUE(contains(o.out, "| torch:SGD | equivariant | yes |")) << o.out;
  EXPECT_TRUE(contains(o.out, "needs sparse gradients")) << o.out;
  EXPECT_TRUE(contains(o.out, "1 cannot run here")) << o.out;
  const Outcome bad = twin_run("census --library nope", dir);
  EXPECT_NE(bad.code, 0);
  EXPECT_TRUE(contains(bad.err, "no library 'nope'")) << bad.err;
  EXPECT_EQ(count_lines(bad.err), 1) << bad.err;
  fs::remove_all(dir);
}

// The census as a table: the verdict's five twins of each selected rule;
// a rule that raises while it trains is recorded and the table goes on;
// the aggregate sets each prediction beside its verdict and counts why a
// rule could not run; a rerun trains nothing.
TEST(BridgeCli, TheCensusTableJudgesEachRuleAndRecordsOneThatRaises) {
  using namespace testing_helpers;
  const fs::path dir = fresh_dir("bridge-census-table");
  const std::string args =
      "table census --rules torch:Adam,torch:SparseAdam,torch:ASGD "
      "--steps 20 --jobs 2 --out c.jsonl --quiet";
  const Outcome o = twin_run(args, dir);
  ASSERT_EQ(o.code, 0) << o.err;
  std::map<std::string, int> status;  // "torch:SparseAdam failed" -> n
  std::map<std::string, std::set<double>> rates;  // "torch:Adam" -> lrs
  std::ifstream lines(dir / "c.jsonl");
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string opt = j["opt"];
    const std::string rule = opt.substr(0, opt.find('{'));
    status[rule + " " + j["status"].get<std::string>()]++;
    rates[rule].insert(j["lr"].get<double>());
    if (j["status"] == "failed")
      EXPECT_TRUE(contains(j["error"], "needs sparse gradients")) << line;
  }
  // Neither Adam at its 1e-3 nor ASGD at its 1e-2 halves the loss in 20
  // steps: each is run at the other rates of twins::census_rates() too,
  // five twins a rate; SparseAdam, which raised, is not tried again.
  const std::vector<double> rates_tried = twins::census_rates();
  const std::set<double> grid(rates_tried.begin(), rates_tried.end());
  EXPECT_EQ(rates["torch:Adam"], grid);
  EXPECT_EQ(rates["torch:ASGD"], grid);
  EXPECT_EQ(rates["torch:SparseAdam"], std::set<double>{1e-3});
  EXPECT_EQ(status["torch:Adam ok"] + status["torch:Adam diverged"], 25);
  EXPECT_EQ(status["torch:ASGD ok"], 25);
  EXPECT_EQ(status["torch:SparseAdam failed"], 5);
  const std::string md = slurp(dir / "c.md");
  // Library, registry names, predicted, measured, as predicted; Adam read
  // at a rate that trains, ASGD at its default, trained at none.
  EXPECT_TRUE(contains(md, "| Adam | basis-dependent | basis-dependent | yes | yes ("))
      << md;
  EXPECT_TRUE(contains(md, "(tried: 0.001 no, 0.0001 ")) << md;
  EXPECT_TRUE(contains(md, "| ASGD | equivariant | equivariant | yes | no (")) << md;
  EXPECT_TRUE(contains(md, "no rate recorded trains | 0.01 (tried: 0.01 no, ")) << md;
  EXPECT_TRUE(contains(md, "| cannot run here: needs sparse gradients")) << md;
  EXPECT_TRUE(contains(md, "2 rules judged")) << md;
  EXPECT_TRUE(contains(md, "1 at no recorded rate that trains")) << md;
  EXPECT_TRUE(contains(md, "1 cannot run here (1 needs sparse gradients)"))
      << md;
  const Outcome again = twin_run(args, dir);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(contains(again.out, "55 already recorded")) << again.out;
  EXPECT_EQ(count_lines(slurp(dir / "c.jsonl")), 55);
  // The selection is not in the records: the aggregate takes it again,
  // lists the selected rules' pairs alone as its job list and shows their
  // rows alone.
  const Outcome whole = twin_run(
      "table --aggregate c.jsonl --rules torch:Adam,torch:SparseAdam,torch:ASGD",
      dir);
  ASSERT_EQ(whole.code, 0) << whole.err;
  EXPECT_EQ(slurp(dir / "c.md"), md);
  const Outcome asgd =
      twin_run("table --aggregate c.jsonl --rules torch:ASGD", dir);
  ASSERT_EQ(asgd.code, 0) << asgd.err;
  const std::string one = slurp(dir / "c.md");
  EXPECT_TRUE(contains(one, "| ASGD | equivariant |")) << one;
  EXPECT_FALSE(contains(one, "| Adam |")) << one;
  EXPECT_FALSE(contains(one, "not recorded yet")) << one;
  // A quick census (default rates alone) into this file would replace its
  // summary with one that says no other rate was tried: refused, nothing
  // changed.
  const std::string records = slurp(dir / "c.jsonl");
  const Outcome quick = twin_run(
      "table census --rules torch:ASGD --steps 20 --default-rates --out "
      "c.jsonl --quiet",
      dir);
  EXPECT_NE(quick.code, 0);
  EXPECT_TRUE(contains(quick.err, "--default-rates: --out 'c.jsonl' holds "
                                  "torch:ASGD"))
      << quick.err;
  EXPECT_EQ(slurp(dir / "c.jsonl"), records);
  EXPECT_EQ(slurp(dir / "c.md"), one);
  // --rules is the census's alone; an unknown rule is named.
  const Outcome zoo = twin_run("table zoo --rules torch --steps 2", dir);
  EXPECT_NE(zoo.code, 0);
  EXPECT_TRUE(contains(zoo.err, "--rules selects the census's rules"))
      << zoo.err;
  const Outcome defaults = twin_run("table zoo --default-rates --steps 2", dir);
  EXPECT_NE(defaults.code, 0);
  EXPECT_TRUE(contains(defaults.err, "--default-rates is the census's"))
      << defaults.err;
  const Outcome nope = twin_run("table census --rules torch:Nope --steps 2", dir);
  EXPECT_NE(nope.code, 0);
  EXPECT_TRUE(contains(nope.err, "has no rule named 'Nope'")) << nope.err;
  EXPECT_EQ(count_lines(nope.err), 1) << nope.err;
  // A rule named twice, or a library and then one of its rules, is a
  // duplicate, named as such (not "no rule named").
  for (const char* rules : {"torch:Adam,torch:Adam", "torch,torch",
                            "torch,torch:Adam"}) {
    const Outcome twice = twin_run(
        std::string("table census --steps 2 --rules ") + rules, dir);
    EXPECT_NE(twice.code, 0) << rules;
    EXPECT_TRUE(contains(twice.err, "twice")) << rules << ": " << twice.err;
    EXPECT_FALSE(contains(twice.err, "no rule named")) << twice.err;
    EXPECT_EQ(count_lines(twice.err), 1) << twice.err;
  }
  fs::remove_all(dir);
}

// The short census of CI's torch-2.x leg (where the libraries are
// installed, tests/python/requirements.txt): one or two rules of each
// library whose class is certain from its update (an elementwise second
// moment or sign: basis-dependent; momentum SGD with scalar coefficients:
// equivariant), each judged as predicted in ten steps, at its default rate
// (in ten steps none trains: the other rates are TheCensusTable's test).
TEST(BridgeCli, AShortCensusOfEveryLibraryJudgesTheCertainRules) {
  using namespace testing_helpers;
  // Installed, as the census asks (a distribution's metadata), without
  // listing and resolving each library's every rule.
  const std::string installed =
      std::string("'") + TWINS_TEST_PYTHON +
      "' -c 'from importlib.metadata import version; "
      "[version(d) for d in (\"pytorch_optimizer\", \"timm\", "
      "\"heavyball\", \"torch-optimizer\", \"schedulefree\", "
      "\"lion-pytorch\", \"bitsandbytes\", \"apollo-torch\")]' "
      "2>/dev/null";
  if (std::system(installed.c_str()) != 0)
    GTEST_SKIP() << "the libraries of tests/python/requirements.txt are not "
                    "installed here";
  // emerging-optimizers needs Python >= 3.12 (requirements.txt's marker).
  const std::string python312 = std::string("'") + TWINS_TEST_PYTHON +
                                "' -c 'import sys; "
                                "sys.exit(sys.version_info < (3, 12))'";
  const bool emerging = std::system(python312.c_str()) == 0;
  const fs::path dir = fresh_dir("bridge-census-short");
  // The libraries added on 2026-12-05, one rule each: an elementwise
  // second moment or sign (bitsandbytes' 8-bit Adam, optimi's Lion,
  // D-Adaptation's Adam, adam-atan2, CAME's row factor, SophiaG's sign,
  // GrokAdamW, GaLore's AdamW on its right-projected gradient, APOLLO's
  // AdamW on its randomly projected one, emerging-optimizers' ObliqueAdam):
  // basis-dependent; and two that cannot run here, each with its reason:
  // KellerJordan's Muon all-gathers across ranks; torch-adopt 0.1.0 calls a
  // method torch 2.x renamed. optimi's and CAME's rules have no default
  // rate: five rates each.
  const Outcome o = twin_run(
      std::string("table census --rules torch:Adam,pytorch_optimizer:adabelief,"
                  "pytorch_optimizer:sgdw,timm:lamb,timm:momentum,heavyball:AdamW,"
                  "torch-optimizer:DiffGrad,torch-optimizer:SGDW,"
                  "schedulefree:SGDScheduleFree,lion-pytorch:Lion,"
                  "bitsandbytes:Adam8bit,torch-optimi:Lion,dadaptation:DAdaptAdam,"
                  "adam-atan2-pytorch:AdamAtan2,came-pytorch:CAME,"
                  "sophia-opt:SophiaG,grokadamw:GrokAdamW,galore-torch:GaLoreAdamW,"
                  "apollo-torch:APOLLOAdamW,muon-optimizer:Muon,torch-adopt:ADOPT") +
          (emerging ? ",emerging-optimizers:ObliqueAdam" : "") +
          " --steps 10 --default-rates --jobs 2 --out s.jsonl --quiet",
      dir);
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string md = slurp(dir / "s.md");
  const int judged = emerging ? 20 : 19;
  EXPECT_TRUE(contains(md, fmt::format("{} rules judged", judged))) << md;
  // Five twins at one rate each, at five rates for the two without a
  // default rate; the two that cannot run are recorded as failed, once.
  EXPECT_EQ(count_lines(slurp(dir / "s.jsonl")),
            5 * (judged - 2) + 2 * 25 + 2 * 5);
  EXPECT_TRUE(contains(md, "Every judged rule measured as predicted.")) << md;
  for (const char* library :
       {"pytorch_optimizer ", "timm ", "heavyball ", "torch-optimizer ",
        "schedulefree ", "lion-pytorch ", "bitsandbytes ", "torch-optimi ",
        "dadaptation ", "adam-atan2-pytorch ", "came-pytorch ", "sophia-opt ",
        "grokadamw ", "galore-torch ", "apollo-torch "})
    EXPECT_TRUE(contains(md, std::string("| ") + library)) << library << md;
  if (emerging)
    EXPECT_TRUE(contains(md, "| emerging-optimizers ")) << md;
  EXPECT_TRUE(contains(md, "needs torch.distributed initialised")) << md;
  EXPECT_TRUE(contains(md, "calls torch.optim.Optimizer."
                           "_cuda_graph_capture_health_check")) << md;
  fs::remove_all(dir);
}

TEST(BridgeCli, VerdictOfTorchRulesWithOptArgs) {
  using namespace testing_helpers;
  const fs::path dir = fresh_dir("bridge-cli");
  const std::string model =
      " --task mod11 --depth 2 --d-model 16 --heads 4 --steps 10 --lr 1e-3 ";
  const Outcome o = twin_run(
      "verdict --opt 'torch:Adam,torch:SGD{\"momentum\": 0.9}' --opt-args "
      "'{\"weight_decay\": 0}'" + model + "--out v.jsonl --quiet", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  // --opt-args merged into each rule, in the canonical names.
  EXPECT_TRUE(contains(o.out, "torch:Adam{\"weight_decay\":0} basis-dependent"))
      << o.out;
  EXPECT_TRUE(contains(
      o.out, "torch:SGD{\"momentum\":0.9,\"weight_decay\":0} equivariant"))
      << o.out;
  EXPECT_EQ(count_lines(slurp(dir / "v.jsonl")), 10);
  fs::remove_all(dir);
}

// A rule that keeps state outside its optimizer (a counter every copy
// shares; a file rule's module is loaded once per optimizer, so here one
// on sys) makes the identity twin drift: every command says
// so, twin-run under its drift table and a table in its notes.
TEST(BridgeCli, AnIdentityTwinThatIsNotZeroIsFlagged) {
  using namespace testing_helpers;
  const fs::path dir = fresh_dir("bridge-identity");
  const std::string path = write_rule("counter.py", R"(
import sys
import torch
class Counter(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
    def step(self, closure=None):
        sys.twins_test_calls = getattr(sys, "twins_test_calls", 0) + 1
        for group in self.param_groups:
            group["lr"] = 0.05 * (1 + sys.twins_test_calls % 3)
        return super().step(closure)
)");
  const Outcome o = twin_run("--opt py:" + path +
                                 ":Counter --twin gauge,identity --steps 3 "
                                 "--task mod11 --depth 1 --d-model 8 --heads 2 "
                                 "--quiet --out c.jsonl",
                             dir);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(contains(o.out, "warning: the identity twin of ")) << o.out;
  EXPECT_TRUE(contains(o.out, ", not exactly 0: its two copies did not "
                              "compute the same"))
      << o.out;
  // A rule whose copies agree gets no such line.
  const Outcome sgd = twin_run(
      "--opt sgd --twin identity --steps 3 --task mod11 --depth 1 "
      "--d-model 8 --heads 2 --quiet --out s.jsonl",
      dir);
  ASSERT_EQ(sgd.code, 0) << sgd.err;
  EXPECT_FALSE(contains(sgd.out, "warning:")) << sgd.out;
  fs::remove_all(dir);
}

// What a rule may not do to the process: os._exit — under either name,
// and as a reference taken at import — would end twin-run with status 0
// and no records; os.chdir would move the relative --out, its checkpoints
// and --save-models while the other copy writes them; a thread it leaves
// running after step() would go on writing the parameters (rc 1, 134 or
// 139 from run to run); a results file it removes was re-created with the
// run's records alone. Each is refused in one line, a non-zero exit and
// no results file, and twin-run does not wait for the thread at exit.
TEST(BridgeCli, WhatARuleMayNotDoToTheProcessIsRefused) {
  using namespace testing_helpers;
  const fs::path dir = fresh_dir("bridge-process");
  fs::create_directories(dir / "elsewhere");
  const std::string path = write_rule("process.py", R"(
import os
import posix
import threading
import time
import torch
from os import _exit as saved_exit
posix_exit = posix._exit
class Wander(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
        os.chdir("elsewhere")
class SavedExit(torch.optim.SGD):
    def step(self, closure=None):
        saved_exit(0)
class PosixExit(torch.optim.SGD):
    def step(self, closure=None):
        posix_exit(0)
class Writer(torch.optim.SGD):
    def step(self, closure=None):
        params = [p for g in self.param_groups for p in g["params"]]
        def write():
            while True:
                for p in params:
                    p.data.mul_(1.0)
                time.sleep(0.001)
        threading.Thread(target=write, name="writer").start()
        return super().step(closure)
class Remover(torch.optim.SGD):
    def step(self, closure=None):
        if os.path.exists("rel/r.jsonl"):
            os.remove("rel/r.jsonl")
        return super().step(closure)
class Pool(torch.optim.SGD):
    def step(self, closure=None):
        # Threads that end before the step returns are the rule's own
        # business.
        t = threading.Thread(target=lambda: time.sleep(0.01))
        t.start()
        t.join()
        return super().step(closure)
)");
  const std::string at_import =
      write_rule("exits.py", "import os\nos._exit(3)\nclass R: pass\n");
  const std::string tiny =
      " --steps 3 --task mod11 --depth 1 --d-model 8 --heads 2 --lr 0.1 "
      "--quiet";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {path + ":Wander",
       "RuntimeError: the rule called os.chdir('elsewhere'), a rule may not "
       "change the process's working directory"},
      {path + ":SavedExit",
       "step() raised at step 1: RuntimeError: the rule called os._exit(0), "
       "which would end the process without its records"},
      {path + ":PosixExit", "the rule called os._exit(0)"},
      {at_import + ":R", "the rule called os._exit(3)"},
      {path + ":Writer",
       "step() raised at step 1: RuntimeError: the rule left 1 thread(s) "
       "running after its call returned ('writer')"},
      // Removing the results file is no call to refuse, but the records
      // are not written to a new file of this run's alone.
      {path + ":Remover",
       "results file 'rel/r.jsonl' was removed or replaced while this run "
       "went on"}};
  for (const auto& [rule, message] : cases) {
    const Outcome o = twin_run("--opt py:" + rule + tiny +
                                   " --out rel/r.jsonl --save-models relmodels",
                               dir);
    EXPECT_EQ(o.code, 1) << rule << ": " << o.err;
    EXPECT_TRUE(contains(o.err, message)) << rule << ": " << o.err;
    EXPECT_EQ(count_lines(o.err), 1) << o.err;
    EXPECT_FALSE(fs::exists(dir / "rel" / "r.jsonl")) << rule;
    EXPECT_TRUE(fs::is_empty(dir / "elsewhere")) << rule;
  }
  const Outcome pool =
      twin_run("--opt py:" + path + ":Pool" + tiny + " --out p.jsonl", dir);
  ASSERT_EQ(pool.code, 0) << pool.err;
  EXPECT_EQ(count_lines(slurp(dir / "p.jsonl")), 1);
  fs::remove_all(dir);
}

// A py:MODULE rule of a module no distribution provides keeps its
// module-level state per optimizer, as a py:FILE rule does: a step counter
// at module level was shared by every copy, so the identity twin drifted
// (2.3e-2, "ok") and the records changed with --jobs and --threads.
TEST(BridgeCli, AModuleRulesStateIsEachOptimizersOwn) {
  using namespace testing_helpers;
  const fs::path dir = fresh_dir("bridge-module-state");
  spit(dir / "counted_scale.py", "SCALE = 0.5\n");
  spit(dir / "counted.py", R"(
import torch
from counted_scale import SCALE
calls = 0
class Counted(torch.optim.SGD):
    def step(self, closure=None):
        global calls
        calls += 1
        for g in self.param_groups:
            g["lr"] = SCALE / calls
        return super().step(closure)
)");
  const std::string run =
      "--opt py:counted:Counted --steps 4 --task mod11 --depth 1 --d-model 8 "
      "--heads 2 --lr 0.1 --quiet --init-seed 42,43 --twin gauge,identity ";
  const Outcome one = twin_run(run + "--jobs 1 --threads 1 --out one.jsonl",
                               dir, "PYTHONPATH=. ");
  ASSERT_EQ(one.code, 0) << one.err;
  const Outcome two = twin_run(run + "--jobs 2 --threads 2 --out two.jsonl",
                               dir, "PYTHONPATH=. ");
  ASSERT_EQ(two.code, 0) << two.err;
  auto curves = [](const fs::path& p) {
    std::map<std::string, std::string> out;
    std::ifstream f(p);
    for (std::string line; std::getline(f, line);) {
      const auto r = nlohmann::json::parse(line);
      out[r["key"].get<std::string>()] = r["curve"].dump();
      if (r["twin"] == "identity") {
        for (const auto& point : r["curve"])
          EXPECT_EQ(point["logit_drift"].get<double>(), 0.0) << line;
      }
    }
    return out;
  };
  const auto first = curves(dir / "one.jsonl");
  EXPECT_EQ(first.size(), 4u);
  EXPECT_EQ(curves(dir / "two.jsonl"), first);
  // The module it imports from its own directory is part of its name.
  std::ifstream records(dir / "one.jsonl");
  std::string line;
  std::getline(records, line);
  const std::string opt = nlohmann::json::parse(line)["opt"];
  spit(dir / "counted_scale.py", "SCALE = 0.25\n");
  const Outcome edited = twin_run("--opt '" + opt + "' --steps 4 --task mod11 "
                                  "--depth 1 --d-model 8 --heads 2 --lr 0.1 "
                                  "--quiet --out one.jsonl",
                                  dir, "PYTHONPATH=. ");
  EXPECT_EQ(edited.code, 1) << edited.err;
  EXPECT_TRUE(contains(edited.err, ": the name was recorded with "))
      << edited.err;
  fs::remove_all(dir);
}

// A stop signal reaches a Python rule's step() that does not return: after
// the grace ($TWINS_STOP_GRACE_S) it is interrupted inside Python, the run
// exits 75 with its group's last checkpoint, and the rerun resumes to the
// straight run's record; a step that takes even the interruption
// (`except BaseException`), or holds the GIL in native code, ends the
// process after twice the grace, in one line. Without either it ignored
// SIGTERM until SLURM's SIGKILL. A grace that is not a positive number is
// refused.
TEST(BridgeCli, AStepThatDoesNotReturnIsStoppedAfterTheGrace) {
  using namespace testing_helpers;
  const fs::path dir = fresh_dir("bridge-stop-grace");
  const std::string path = write_rule("hangs.py", R"(
import os
import time
import torch
class Hangs(torch.optim.SGD):
    def step(self, closure=None):
        self.t = getattr(self, "t", 0) + 1
        if self.t == 3 and os.path.exists("hang"):
            open("in_step", "w").close()
            while True:
                time.sleep(0.01)
        return super().step(closure)
class Stubborn(torch.optim.SGD):
    def step(self, closure=None):
        self.t = getattr(self, "t", 0) + 1
        if self.t == 3:
            open("in_step", "w").close()
            while True:
                try:
                    time.sleep(0.01)
                except BaseException:
                    pass
        return super().step(closure)
class Native(torch.optim.SGD):
    def step(self, closure=None):
        self.t = getattr(self, "t", 0) + 1
        if self.t == 3:
            open("in_step", "w").close()
            sum(range(10**13))  # native code that keeps the GIL
        return super().step(closure)
)");
  const std::string run =
      " --steps 6 --task mod11 --depth 1 --d-model 8 --heads 2 --lr 0.1 "
      "--checkpoint-every 1 ";
  const std::string grace = "TWINS_STOP_GRACE_S=1 ";
  for (const std::string bad : {"abc", "0", "-1"}) {
    const Outcome o = twin_run("--opt py:" + path + ":Hangs" + run +
                                   "--quiet --out bad.jsonl",
                               dir, "TWINS_STOP_GRACE_S=" + bad + " ");
    EXPECT_EQ(o.code, 1) << o.err;
    EXPECT_TRUE(contains(o.err, "Invalid TWINS_STOP_GRACE_S: '" + bad + "'"))
        << o.err;
    EXPECT_FALSE(fs::exists(dir / "bad.jsonl"));
  }
  ASSERT_EQ(twin_run("--opt py:" + path + ":Hangs" + run +
                         "--quiet --out straight.jsonl",
                     dir)
                .code,
            0);
  spit(dir / "hang", "");
  auto in_step = [&] { return fs::exists(dir / "in_step"); };
  const int stopped = signalled_run(
      dir, "--opt py:" + path + ":Hangs" + run + "--out r.jsonl", SIGTERM,
      in_step, grace);
  const std::string err = slurp(dir / "err.txt");
  EXPECT_EQ(stopped, 75) << err;
  EXPECT_TRUE(contains(err, ":Hangs: step() at step 3 was interrupted 1 s "
                            "after the stop signal (SIGTERM)"))
      << err;
  fs::remove(dir / "hang");
  const Outcome resumed =
      twin_run("--opt py:" + path + ":Hangs" + run + "--out r.jsonl", dir);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resumed at step 2")) << resumed.err;
  auto record = [](const fs::path& p) {
    return twins::without_timing(nlohmann::json::parse(slurp(p))).dump();
  };
  EXPECT_EQ(record(dir / "r.jsonl"), record(dir / "straight.jsonl"));

  // Neither a rule that catches the interruption nor one in native code
  // that keeps the GIL (which the interruption waits for) outlasts twice
  // the grace.
  for (const std::string name : {"Stubborn", "Native"}) {
    fs::remove(dir / "in_step");
    const int ended = signalled_run(
        dir, "--opt py:" + path + ":" + name + run + "--out s.jsonl", SIGTERM,
        in_step, grace);
    const std::string stubborn = slurp(dir / "err.txt");
    EXPECT_EQ(ended, 75) << stubborn;
    EXPECT_TRUE(contains(stubborn, ":" + name + " has not returned from "
                                   "step() at step 3 2 s after the stop "
                                   "signal (SIGTERM)"))
        << stubborn;
  }
  fs::remove_all(dir);
}

TEST(BridgeCli, ErrorsAreOneLineANonZeroExitAndNoFile) {
  using namespace testing_helpers;
  const fs::path dir = fresh_dir("bridge-cli-errors");
  std::ofstream(dir / "rules.py") << R"(
import torch
class Raises(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
        self.t = 0
    def step(self):
        self.t += 1
        if self.t == 2:
            raise RuntimeError("bad step")
        return super().step()
class Exits(torch.optim.SGD):
    def step(self):
        import os
        os._exit(0)
)";
  // A rule "file" that is a directory or a FIFO is named as what it is
  // (it was "no such file"; reading the FIFO would wait for a writer).
  fs::create_directory(dir / "adir.py");
  ASSERT_EQ(mkfifo((dir / "fifo.py").c_str(), 0600), 0);
  const std::string model =
      " --task mod11 --depth 2 --d-model 16 --heads 4 --steps 5 --lr 0.1 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--opt py:missing.py:Rule", "no such file 'missing.py'"},
      {"--opt py:adir.py:Rule", "'adir.py' is a directory, not a Python file"},
      {"--opt py:fifo.py:Rule", "'fifo.py' is not a regular file (a FIFO"},
      {"--opt py:rules.py:Nope", "defines no 'Nope' (it defines Raises, Exits)"},
      {"--opt 'torch:SGD{\"momentum\": -1}'",
       "rejected its arguments: ValueError: Invalid momentum value: -1"},
      {"--opt torch:Adam --opt-args '{\"momentum\": 0.9}'",
       "rejected its arguments: TypeError"},
      {"--opt adam --opt-args '{\"momentum\": 0.9}'", "--opt names none"},
      // os._exit would end twin-run with status 0 and an empty file.
      {"--opt py:rules.py:Exits",
       "step() raised at step 1: RuntimeError: the rule called os._exit(0), "
       "which would end the process without its records"},
      {"--opt py:rules.py:Raises",
       ":Raises: step() raised at step 2: RuntimeError: bad step"}};
  auto check = [&](const std::string& command, const std::string& message) {
    const Outcome o =
        twin_run(command + model + "--out r.jsonl --quiet", dir);
    EXPECT_NE(o.code, 0) << command;
    EXPECT_TRUE(contains(o.err, message)) << command << ": " << o.err;
    EXPECT_EQ(count_lines(o.err), 1) << command << ": " << o.err;
    EXPECT_FALSE(fs::exists(dir / "r.jsonl")) << command;
  };
  for (const auto& [flags, message] : cases)
    check("verdict " + flags, message);
  // The default run and merge resolve --opt the same way.
  for (const std::string command : {"--twin gauge ", "merge --twin gauge "}) {
    check(command + cases[1].first, cases[1].second);
    check(command + cases.back().first, cases.back().second);
  }
  fs::remove_all(dir);
}

#endif
