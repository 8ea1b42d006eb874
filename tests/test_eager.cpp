// Cross-check against the eager-PyTorch reference (bench/eager_pytorch.py):
// the same seeds give bit-identical initial weights (docs/protocol.md §3), so
// the first drifts of the C++ program and of plain PyTorch must agree to at
// least 3 significant digits. Skipped when python3-torch is not installed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "bench/bench.h"
#include "data/charlm.h"
#include "optim/registry.h"
#include "twins/defaults.h"
#include "twins/pair.h"

namespace {

const char* kPython = "/usr/bin/python3";

bool python_has_torch() {
  const std::string cmd =
      std::string(kPython) + " -c 'import torch' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// Runs the reference with `args` and returns its JSON.
nlohmann::json eager(const std::string& args) {
  const std::string cmd =
      std::string(kPython) + " '" + bench::eager_script_path() + "' " + args;
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  // Without a pipe there is nothing to compare: the test fails here (an
  // exception fails it) rather than reading from null.
  if (pipe == nullptr)
    throw std::runtime_error("cannot start: " + cmd);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe))
    out.append(buf, n);
  EXPECT_EQ(::pclose(pipe), 0) << cmd << "\n" << out;
  return nlohmann::json::parse(out);
}

double drift_at(const nlohmann::json& curve, int64_t step) {
  for (const auto& c : curve) {
    if (c["step"] == step)
      return c["logit_drift"].get<double>();
  }
  ADD_FAILURE() << "no checkpoint " << step;
  return std::nan("");
}

class EagerCrossCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!python_has_torch()) {
      GTEST_SKIP() << kPython << " has no torch (Debian's python3-torch): "
                   << "cross-check against eager PyTorch skipped";
    }
    ASSERT_FALSE(bench::eager_script_path().empty());
  }

  // Compares step 1 of `spec` with the reference run on `args`, and step 0
  // for a noise twin (a gauge twin's step 0 is rounding noise, which
  // depends on the order of operations, not a figure to reproduce).
  void compare(const twins::PairSpec& spec, const std::string& args) {
    auto ours = twins::run_pair(spec);
    auto ref = eager(args + " --steps " + std::to_string(spec.steps));
    std::vector<int64_t> steps{1};
    if (spec.twin == twins::TwinKind::kNoise)
      steps.push_back(0);
    for (int64_t step : steps) {
      const double a = twins::drift_at(ours, step);
      const double b = drift_at(ref["curve"], step);
      EXPECT_NEAR(a, b, 5e-4 * std::abs(b))
          << args << " step " << step << ": C++ " << a << " vs PyTorch " << b;
    }
  }
};

twins::PairSpec mod47(const std::string& opt, twins::TwinKind kind,
                      torch::Dtype dtype) {
  twins::PairSpec s;
  s.opt = opt;
  s.twin = kind;
  s.twin_seed = kind == twins::TwinKind::kNoise ? 888 : 777;
  s.steps = 2;
  s.dtype = dtype;
  s.protocol = twins::default_protocol(twins::Protocol::kPaperCpu, dtype);
  s.lr = twins::default_lr(opt, "mod47");
  return s;
}

TEST_F(EagerCrossCheck, AdamGaugeMod47Float32FirstStepsAgree) {
  compare(mod47("adam", twins::TwinKind::kGauge, torch::kFloat),
          "--opt adam --twin gauge --dtype float32");
}

TEST_F(EagerCrossCheck, AdamGaugeMod47Float64FirstStepsAgree) {
  compare(mod47("adam", twins::TwinKind::kGauge, torch::kDouble),
          "--opt adam --twin gauge --dtype float64");
}

TEST_F(EagerCrossCheck, AdamNoiseMod47Float64FirstStepsAgree) {
  compare(mod47("adam", twins::TwinKind::kNoise, torch::kDouble),
          "--opt adam --twin noise --dtype float64");
}

TEST_F(EagerCrossCheck, AdamGaugeCharLMFloat64FirstStepsAgree) {
  twins::PairSpec s;
  s.task = "charlm";
  s.opt = "adam";
  s.steps = 2;
  s.lr = 1e-3;
  s.dtype = torch::kDouble;
  s.protocol = twins::Protocol::kTwins;  // protocol §2a
  s.depth = 2;
  s.d_model = 32;
  s.heads = 4;
  s.mlp = 128;
  s.ctx = 16;
  s.batch = 4;
  compare(s,
          "--task charlm --opt adam --twin gauge --dtype float64 "
          "--depth 2 --d-model 32 --heads 4 --ctx 16 --batch 4 --data '" +
              data::default_corpus_path() + "'");
}

TEST_F(EagerCrossCheck, InitialWeightsAreBitwiseThoseOfPyTorch) {
  // The reference sums its initial parameters in float64 in build order.
  auto ref = eager("--steps 1 --opt sgd");
  model::ModelConfig cfg;  // mod47 defaults
  auto m = model::build(cfg, 42, torch::kFloat, torch::kCPU);
  // Parameters in the reference's registration order: tok, pos, blocks
  // (norm1, wq, wk, wv, wo, norm2, w1, w2), norm, head.
  double sum = m->tok_emb.to(torch::kDouble).sum().item<double>() +
               m->pos_emb.to(torch::kDouble).sum().item<double>();
  for (auto& b : m->blocks) {
    for (const auto& p :
         {b->norm1->gain, b->attn->wq->weight, b->attn->wk->weight,
          b->attn->wv->weight, b->attn->wo->weight, b->norm2->gain,
          b->w1->weight, b->w2->weight}) {
      sum += p.to(torch::kDouble).sum().item<double>();
    }
  }
  sum += m->norm_f->gain.to(torch::kDouble).sum().item<double>() +
         m->head->weight.to(torch::kDouble).sum().item<double>();
  EXPECT_EQ(sum, ref["init_checksum"].get<double>());
}

}  // namespace
