// Helpers of the tests that run Python rules (test_bridge, test_conventions):
// a scratch directory for rule files and results, the small test model, one
// run through the engine, a one-line error, and a scalar Adam in Python.
#pragma once

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sweep/engine.h"
#include "sweep/plan.h"
#include "twins/record.h"

namespace bridge_testing {

namespace fs = std::filesystem;


// A scratch directory for rule files and results, removed at exit.
inline const fs::path& scratch() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() /
                 fmt::format("twins_test_bridge_{}", ::getpid());
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  static struct Cleanup {
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup;
  return dir;
}

inline std::string write_rule(const std::string& name, const std::string& text) {
  const fs::path p = scratch() / name;
  std::ofstream(p) << text;
  return p.string();
}

// The test model: mod11, 2 blocks, d 16, 4 heads of 4 rows, MLP 64.
inline sweep::PlanRequest tiny_request(const std::string& opt, int64_t steps,
                                const std::string& dtype = "float32") {
  sweep::PlanRequest r;
  r.task = "mod11";
  r.opts = {opt};
  r.steps = steps;
  r.dtype = dtype;
  r.depth = 2;
  r.d_model = 16;
  r.heads = 4;
  r.mlp = 64;
  return r;
}

// What two rules' records must share when they compute the same thing:
// everything but the rule's name, hyperparameters, key and timing.
inline nlohmann::json numbers_of(const twins::PairResult& r) {
  nlohmann::json j = twins::without_timing(twins::to_json(r));
  for (const char* k : {"opt", "hparams", "key"})
    j.erase(k);
  return j;
}

inline std::vector<twins::PairResult> run(const std::vector<twins::PairSpec>& specs,
                                   int threads = 1, int jobs = 1,
                                   const std::string& out = "",
                                   bool share = true) {
  sweep::EngineOptions o;
  static int n = 0;
  o.results_path = out.empty()
                       ? (scratch() / fmt::format("run{}.jsonl", n++)).string()
                       : out;
  o.threads = threads;
  o.jobs = jobs;
  o.share = share;
  o.quiet = true;
  std::vector<twins::PairResult> results;
  for (const auto& r : sweep::run_sweep(specs, o).records)
    results.push_back(r.result);
  return results;
}

// The one-line message of what `f` throws (fails the test when nothing is).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    const std::string m = e.what_without_backtrace();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "not one line: " << m;
    return m;
  }
  ADD_FAILURE() << "no error";
  return "";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Scalar Adam (docs/protocol.md §5): Adam's moments per entry, one
// denominator for all parameters, sqrt of the mean of every v_hat: an
// update that commutes with any orthogonal change of basis of a head.
inline const char* kScalarAdam = R"(
import math
import torch

class ScalarAdam(torch.optim.Optimizer):
    twins_predicted = "equivariant"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        total, count = 0.0, 0
        for g in self.param_groups:
            b1, b2 = g["betas"]
            for p in g["params"]:
                s = self.state[p]
                if not s:
                    s["m"] = torch.zeros_like(p)
                    s["v"] = torch.zeros_like(p)
                s["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                s["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                total += s["v"].sum().item()
                count += p.numel()
        b1, b2 = self.param_groups[0]["betas"]
        denom = math.sqrt(total / count / (1 - b2 ** self.t)) + self.param_groups[0]["eps"]
        for g in self.param_groups:
            for p in g["params"]:
                p.add_(self.state[p]["m"], alpha=-g["lr"] / (1 - b1 ** self.t) / denom)
)";

}  // namespace bridge_testing
