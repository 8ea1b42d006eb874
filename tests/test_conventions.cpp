// The conventions of real optimizer libraries (bridge/conventions.py and
// the adapter, isolation and errors beside it in bridge/*.py,
// docs/extending.md): rules named by module, closures, train() / eval(),
// one random stream per copy, isolation from the process's global torch
// state, the checks after each step, and the rules that cannot run here.
// Each rule is written here in a few lines of Python with the convention it
// needs, so that the tests run under Debian's torch 1.13 as well as a
// torch 2.x; the libraries themselves are tested from Python
// (tests/python/test_libraries.py).
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <signal.h>

#include <cmath>

#include "bridge/bridge.h"
#include "bridge_helpers.h"
#include "optim/registry.h"
#include "report/verdict.h"
#include "sweep/tables.h"
#include "twins/checkpoint.h"
#include "twins/pair.h"

using namespace bridge_testing;

namespace {

// Records as text without their timing fields: equal means bitwise equal.
std::vector<std::string> texts(const std::vector<twins::PairResult>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs)
    out.push_back(twins::without_timing(twins::to_json(r)).dump());
  return out;
}

// `specs` as one group stopped after step `stop_at` (its checkpoint
// written), then resumed to the end.
std::vector<twins::PairResult> stopped_and_resumed(
    const std::vector<twins::PairSpec>& specs, int64_t stop_at,
    const std::string& name) {
  const std::string file = (scratch() / (name + ".ckpt")).string();
  fs::remove(file);
  twins::StatePolicy policy;
  policy.every_steps = 1000;
  twins::GroupOptions stop;
  stop.checkpoint = twins::GroupCheckpoint(file, policy);
  stop.progress = [stop_at](int64_t step) {
    if (step == stop_at)
      twins::request_stop(SIGTERM);
  };
  EXPECT_THROW(twins::run_group(specs, stop), twins::Stopped);
  twins::clear_stop();
  twins::GroupOptions resume;
  resume.checkpoint = twins::GroupCheckpoint(file, policy);
  return twins::run_group(specs, resume);
}

const twins::PairResult& twin_of(const std::vector<twins::PairResult>& rs,
                                 const std::string& kind) {
  for (const auto& r : rs) {
    if (r.spec.twin == twins::parse_twin_kind(kind))
      return r;
  }
  ADD_FAILURE() << "no " << kind << " twin";
  return rs.front();
}

// SGD plus torch.randn_like noise in every step: a rule that draws random
// numbers, as PSGD's probes do.
const char* kNoisy = R"(
import torch

class NoisySGD(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1, noise=1e-3):
        super().__init__(params, dict(lr=lr, noise=noise))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                p.add_(p.grad + g["noise"] * torch.randn_like(p), alpha=-g["lr"])
)";

}  // namespace

// ---------------------------------------------------------------------------
// py:MODULE:NAME

TEST(ConventionsModules, AModuleRuleCarriesItsDistributionAndVersion) {
  const std::string name = bridge::resolve_rule("py:torch.optim:Adam");
  std::string version;
  {
    // The distribution is torch, at the version this Python imports.
    const auto info = optim::find_optimizer(name);
    version = name.substr(name.find("==") + 2);
    version = version.substr(0, version.find(']'));
    EXPECT_TRUE(contains(info.summary, "torch==" + version)) << info.summary;
  }
  EXPECT_EQ(name, "py:torch.optim[torch==" + version + "]:Adam");
  EXPECT_EQ(bridge::resolve_rule(name), name);  // canonical
  EXPECT_EQ(bridge::resolve_rule("py:torch.optim:SGD{\"momentum\": 0.9}"),
            "py:torch.optim[torch==" + version + "]:SGD{\"momentum\":0.9}");
  // Another release never resumes into the records.
  const std::string m =
      error_of([] { bridge::resolve_rule("py:torch.optim[torch==0.0.1]:Adam"); });
  EXPECT_TRUE(contains(m, "recorded with torch==0.0.1")) << m;
  EXPECT_TRUE(contains(m, "this Python has torch==" + version)) << m;
  EXPECT_TRUE(contains(
      error_of([] { bridge::resolve_rule("py:no_such_module_x:Adam"); }),
      "module 'no_such_module_x' does not import: ModuleNotFoundError"));
  EXPECT_TRUE(contains(
      error_of([] { bridge::resolve_rule("py:torch.optim:Nope"); }),
      "module 'torch.optim' defines no 'Nope' (its optimizers: "));
}

TEST(ConventionsModules, TheModulesAdamIsTorchAdamBitForBit) {
  const auto module = sweep::verdict_specs(
      tiny_request(bridge::resolve_rule("py:torch.optim:Adam"), 10));
  const auto torch_rule =
      sweep::verdict_specs(tiny_request(bridge::resolve_rule("torch:Adam"), 10));
  const auto a = run(module), b = run(torch_rule);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(numbers_of(a[i]), numbers_of(b[i])) << i;
}

// ---------------------------------------------------------------------------
// Closures

TEST(ConventionsClosure, AnUnmovedClosureIsTheStepsOwnEvaluation) {
  // SAM: the gradient at p + rho * g / |g|, then the step from p. With
  // rho 0 the closure is called where nothing moved: SGD's records exactly;
  // with rho > 0 it re-evaluates there, and the records differ.
  const std::string path = write_rule("sam.py", R"(
import torch

class SAM(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1, rho=0.0):
        super().__init__(params, dict(lr=lr, rho=rho))

    def step(self, closure):
        with torch.no_grad():
            norm = torch.sqrt(sum((p.grad ** 2).sum() for g in self.param_groups
                                  for p in g["params"]))
            moved = []
            for g in self.param_groups:
                for p in g["params"]:
                    e = g["rho"] * p.grad / (norm + 1e-12)
                    if g["rho"] > 0:
                        p.add_(e)
                    moved.append((p, e))
        closure()
        with torch.no_grad():
            for p, e in moved:
                if self.param_groups[0]["rho"] > 0:
                    p.sub_(e)
                p.add_(p.grad, alpha=-self.param_groups[0]["lr"])
)");
  auto request = [&](const std::string& args) {
    auto r = tiny_request(bridge::resolve_rule("py:" + path + ":SAM", args), 15);
    r.twins = {"gauge", "identity"};
    return r;
  };
  auto sgd = tiny_request(bridge::resolve_rule("torch:SGD"), 15);
  sgd.twins = {"gauge", "identity"};
  sgd.lr = 0.1;
  const auto plain = run(sweep::expand(sgd));
  const auto rho0 = run(sweep::expand(request("{\"rho\": 0.0}")));
  const auto rho = run(sweep::expand(request("{\"rho\": 0.05}")));
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(numbers_of(rho0[i]), numbers_of(plain[i])) << i;
  EXPECT_NE(numbers_of(rho[0]), numbers_of(plain[0]));
  EXPECT_EQ(twins::largest_drift(twin_of(rho, "identity")), 0);
  // SAM's perturbation is g / |g| over the whole model: equivariant.
  EXPECT_LT(twins::largest_drift(twin_of(rho, "gauge")), 1e-5);
}

TEST(ConventionsClosure, LbfgsTakesOneGroupAndItsClosure) {
  // torch.optim.LBFGS takes no parameter groups (one flat list) and calls
  // its closure up to max_iter times a step: it runs, both copies in
  // lockstep (identity exactly 0), and its records are not SGD's.
  auto req = tiny_request(
      bridge::resolve_rule("torch:LBFGS{\"max_iter\": 4, \"history_size\": 5}"),
      6, "float64");
  req.lr = 0.05;
  req.twins = {"identity"};
  const auto lbfgs = run(sweep::expand(req));
  ASSERT_EQ(lbfgs.size(), 1u);
  EXPECT_EQ(twins::largest_drift(lbfgs.front()), 0);
  const auto& curve = lbfgs.front().curve;  // it trains
  EXPECT_LT(curve.back().train_loss[0], curve[1].train_loss[0]);
  auto sgd = req;
  sgd.opts = {bridge::resolve_rule("torch:SGD")};
  EXPECT_NE(numbers_of(run(sweep::expand(sgd)).front()),
            numbers_of(lbfgs.front()));
}

// A rule that reads its argument as tensors (heavyball's PSGDLRA,
// kron-torch's distributed Krons call .numel() on each) fails on a group's
// dict at construction: it is given the flat list, and runs as SGD would.
TEST(ConventionsGroups, ARuleThatReadsTensorsIsGivenTheFlatList) {
  const std::string path = write_rule("flat.py", R"(
import torch

class Flat(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        params = list(params)
        self.size = sum(p.numel() for p in params)
        super().__init__(params, lr=lr)
)");
  auto req = tiny_request(bridge::resolve_rule("py:" + path + ":Flat"), 4);
  req.lr = 0.1;
  const auto flat = run(sweep::expand(req));
  auto sgd = req;
  sgd.opts = {bridge::resolve_rule("torch:SGD")};
  const auto plain = run(sweep::expand(sgd));
  ASSERT_EQ(flat.size(), plain.size());
  for (size_t i = 0; i < flat.size(); ++i)
    EXPECT_EQ(numbers_of(flat[i]), numbers_of(plain[i])) << i;
  // Another AttributeError at construction is the rule's own error.
  const std::string broken = write_rule("broken.py", R"(
import torch

class Broken(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        self.nothing.here
)");
  auto bad = req;
  bad.opts = {bridge::resolve_rule("py:" + broken + ":Broken")};
  const std::string m = error_of([&] { run(sweep::expand(bad)); });
  EXPECT_TRUE(contains(m, "has no attribute 'nothing'")) << m;
}

TEST(ConventionsClosure, AClosureKeptPastItsStepIsAnError) {
  const std::string path = write_rule("late.py", R"(
import torch

class Late(torch.optim.SGD):
    kept = None
    def step(self, closure=None):
        if Late.kept is not None:
            Late.kept()
        Late.kept = closure
        return super().step()
)");
  auto req = tiny_request(bridge::resolve_rule("py:" + path + ":Late"), 3);
  req.lr = 0.1;
  const std::string m = error_of([&] { run(sweep::expand(req)); });
  EXPECT_TRUE(contains(m, "step() raised at step 2")) << m;
  EXPECT_TRUE(contains(m, "the closure was called after its step() returned"))
      << m;
}

// ---------------------------------------------------------------------------
// train() / eval()

TEST(ConventionsModes, MeasurementsSeeTheEvaluationWeights) {
  // eval() halves every parameter (keeping them) and train() restores
  // them: every checkpoint measures the halved model (its validation loss
  // is not SGD's), while training goes on from the kept weights (the same
  // training losses as SGD's).
  const std::string path = write_rule("modes.py", R"(
import torch

class Modes(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
        self.kept = None
        self.training = False

    def train(self):
        assert not self.training, "train() twice"
        if self.kept is not None:
            with torch.no_grad():
                for p, k in zip(self.params(), self.kept):
                    p.copy_(k)
        self.training = True

    def eval(self):
        assert self.training, "eval() twice"
        with torch.no_grad():
            self.kept = [p.clone() for p in self.params()]
            for p in self.params():
                p.mul_(0.5)
        self.training = False

    def params(self):
        return [p for g in self.param_groups for p in g["params"]]

    def step(self):
        assert self.training, "step() in eval mode"
        return super().step()
)");
  auto req = tiny_request(bridge::resolve_rule("py:" + path + ":Modes"), 12);
  req.twins = {"identity"};
  const auto modes = run(sweep::expand(req));
  auto sgd = tiny_request(bridge::resolve_rule("torch:SGD"), 12);
  sgd.twins = {"identity"};
  sgd.lr = 0.1;
  const auto plain = run(sweep::expand(sgd));
  const auto& r = modes.front();
  const auto& s = plain.front();
  ASSERT_EQ(r.curve.size(), s.curve.size());
  for (size_t i = 0; i < r.curve.size(); ++i) {
    EXPECT_NE(r.curve[i].val_loss[0], s.curve[i].val_loss[0]) << i;
    if (i > 0)  // training is SGD's
      EXPECT_EQ(r.curve[i].train_loss, s.curve[i].train_loss) << i;
  }
  EXPECT_EQ(twins::largest_drift(r), 0);
}

// ---------------------------------------------------------------------------
// Random numbers: one stream per copy

TEST(ConventionsRandom, BothCopiesDrawTheSameStream) {
  const std::string path = write_rule("noisy.py", kNoisy);
  auto req = tiny_request(bridge::resolve_rule("py:" + path + ":NoisySGD"), 20);
  req.twins = {"identity", "gauge"};
  const auto specs = sweep::expand(req);
  // The process's own generator is untouched by the rule's draws: it ends
  // where a run of the same pairs whose rule draws nothing (torch's SGD)
  // leaves it (each pair's build seeds and draws from it, as always).
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  const torch::Tensor start = generator.get_state();
  auto plain = tiny_request(bridge::resolve_rule("torch:SGD"), 20);
  plain.twins = req.twins;
  plain.lr = 0.1;
  run(sweep::expand(plain), 1);
  const torch::Tensor after_plain = generator.get_state();
  generator.set_state(start);
  const auto one = run(specs, 1);
  EXPECT_TRUE(torch::equal(generator.get_state(), after_plain));
  EXPECT_EQ(twins::largest_drift(twin_of(one, "identity")), 0);
  // The same records on more threads, in separate groups, and after a stop.
  const auto three = run(specs, 3);
  const auto apart = run(specs, 2, 2, "", /*share=*/false);
  EXPECT_EQ(texts(three), texts(one));
  EXPECT_EQ(texts(apart), texts(one));
  EXPECT_EQ(texts(stopped_and_resumed(specs, 7, "noisy")), texts(one));
  // The noise is real: without it the rule is SGD and its records differ.
  auto quiet = tiny_request(
      bridge::resolve_rule("py:" + path + ":NoisySGD", "{\"noise\": 0}"), 20);
  quiet.twins = req.twins;
  EXPECT_NE(numbers_of(run(sweep::expand(quiet)).front()),
            numbers_of(one.front()));
}

// ---------------------------------------------------------------------------
// Isolation and the checks after each step

TEST(ConventionsIsolation, ARulesGlobalSettingsStayInsideIt) {
  // A rule that switches the default dtype to float64 and the thread count
  // to 3: the other pairs of the run are untouched (their records are an
  // adam-only run's) and so is the process afterwards.
  const std::string path = write_rule("leak.py", R"(
import torch

class Leak(torch.optim.SGD):
    def __init__(self, params, lr=0.1):
        torch.set_default_dtype(torch.float64)
        super().__init__(params, lr=lr)

    def step(self):
        torch.set_num_threads(3)
        torch.set_default_dtype(torch.float64)
        return super().step()
)");
  auto both = tiny_request(bridge::resolve_rule("py:" + path + ":Leak"), 10);
  both.opts.push_back("adam");
  both.twins = {"gauge", "noise"};
  both.lr = 0.1;
  auto alone = both;
  alone.opts = {"adam"};
  const auto mixed = run(sweep::expand(both), 2);
  const auto adam = run(sweep::expand(alone), 2);
  std::vector<std::string> adam_in_mixed;
  for (const auto& r : mixed) {
    if (r.spec.opt == "adam")
      adam_in_mixed.push_back(twins::without_timing(twins::to_json(r)).dump());
  }
  EXPECT_EQ(adam_in_mixed, texts(adam));
  EXPECT_EQ(torch::get_default_dtype(), caffe2::TypeMeta::Make<float>());
}

TEST(ConventionsChecks, AParameterChangedOutOfPlaceIsNamedWithItsStep) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"p.data = p.data.double()",
       "changed parameter layers.0.wq at step 2: dtype float32 -> float64"},
      {"p.requires_grad_(False)",
       "changed parameter layers.0.wq at step 2: requires_grad True -> False"},
      {"p.data = p.data[:, :2].clone()",
       "changed parameter layers.0.wq at step 2: shape [16, 16] -> [16, 2]"}};
  int n = 0;
  for (const auto& [change, message] : cases) {
    const std::string path = write_rule(fmt::format("change{}.py", n++),
                                        fmt::format(R"(
import torch

class Change(torch.optim.SGD):
    t = 0
    def step(self):
        self.t += 1
        super().step()
        if self.t == 2:
            p = self.param_groups[0]["params"][0]
            {}
)",
                                                    change));
    auto req = tiny_request(bridge::resolve_rule("py:" + path + ":Change"), 4);
    req.lr = 0.1;
    const std::string out = (scratch() / "changed.jsonl").string();
    const std::string m = error_of([&] { run(sweep::expand(req), 1, 1, out); });
    EXPECT_TRUE(contains(m, "step() raised at step 2")) << m;
    EXPECT_TRUE(contains(m, message)) << m;
    EXPECT_FALSE(fs::exists(out)) << change;
  }
}

TEST(ConventionsChecks, ARuleThatClearsItsGradientsRuns) {
  // heavyball's convention: p.grad = None inside step().
  const std::string path = write_rule("clears.py", R"(
import torch

class Clears(torch.optim.SGD):
    def step(self):
        super().step()
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None
)");
  auto req = tiny_request(bridge::resolve_rule("py:" + path + ":Clears"), 8);
  req.lr = 0.1;
  req.twins = {"identity"};
  auto sgd = req;
  sgd.opts = {bridge::resolve_rule("torch:SGD")};
  EXPECT_EQ(numbers_of(run(sweep::expand(req)).front()),
            numbers_of(run(sweep::expand(sgd)).front()));
}

// ---------------------------------------------------------------------------
// Rules that cannot run here

TEST(ConventionsCannotRun, SecondOrderRulesSayWhyInOneLine) {
  // A Hessian-vector product needs the gradient's own graph
  // (backward(create_graph=True)), which the protocol's backward does not
  // keep: AdaHessian's and Sophia-H's case.
  const std::string path = write_rule("hessian.py", R"(
import torch

class HessianDiag(torch.optim.SGD):
    def step(self):
        params = [p for g in self.param_groups for p in g["params"]]
        grads = [p.grad for p in params]
        v = [torch.randint_like(p, 2) * 2 - 1 for p in params]
        torch.autograd.grad(grads, params, grad_outputs=v)
        return super().step()
)");
  auto req = tiny_request(bridge::resolve_rule("py:" + path + ":HessianDiag"), 3);
  req.lr = 0.1;
  const std::string out = (scratch() / "hessian.jsonl").string();
  const std::string m = error_of([&] { run(sweep::expand(req), 1, 1, out); });
  EXPECT_TRUE(contains(m, "step() raised at step 1: RuntimeError: cannot run "
                          "here: needs second-order gradients"))
      << m;
  EXPECT_FALSE(fs::exists(out));
}
