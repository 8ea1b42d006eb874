// The paper's own protocols against the paper's own numbers
// (docs/protocol.md §2a): Table 9's mod-47 row under the paper-gpu protocol
// against the published float64 records, step 1 of every Adam pair; Table
// 3's Adam gauge twin under the paper-cpu protocol against its printed
// table; and what tells the three protocols apart.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "model/gemm.h"
#include "sweep/engine.h"
#include "sweep/tables.h"
#include "twins/io.h"
#include "twins/pair.h"
#include "twins_paths.h"  // generated: TWINS_SOURCE_DIR

namespace {

using twins::PairResult;
using twins::PairSpec;
using twins::TwinKind;

double relative(double got, double want) {
  return std::fabs(got - want) / std::fabs(want);
}

// One published record: (step, logit drift, mean QK drift) at steps 0, 1.
struct Published {
  std::map<int64_t, std::pair<double, double>> at;
};

// tests/data/paper_attn_mod_2L64_adam.json: the nine Adam records of the
// paper's attn_mod_2L64.jsonl (its "source" field names the file), keyed
// by (twin, init seed, twin seed, noise scale).
using RecordKey = std::tuple<std::string, uint64_t, uint64_t, double>;
std::map<RecordKey, Published> published_mod47() {
  const auto path = std::filesystem::path(TWINS_SOURCE_DIR) / "tests" /
                    "data" / "paper_attn_mod_2L64_adam.json";
  const nlohmann::json j = nlohmann::json::parse(twins::read_file(path));
  std::map<RecordKey, Published> out;
  for (const auto& r : j.at("records")) {
    Published p;
    for (const auto& c : r.at("curve")) {
      p.at[c[0].get<int64_t>()] = {c[1].get<double>(), c[2].get<double>()};
    }
    out[{r.at("twin").get<std::string>(), r.at("init_seed").get<uint64_t>(),
         r.at("twin_seed").get<uint64_t>(),
         r.at("noise_scale").get<double>()}] = p;
  }
  return out;
}

RecordKey key_of(const PairSpec& s) {
  return {twins::to_string(s.twin), s.init_seed,
          s.uses_twin_seed() ? s.twin_seed : 0,
          s.uses_noise_scale() ? s.noise_scale : 0.0};
}

// Table 9's mod-47 job list, Adam's pairs only, trained through step 1 of
// the paper's 1500 (the data, draws and schedule are those of 1500 steps).
std::vector<PairResult> table9_mod47_adam_step1() {
  sweep::TableOverrides o;
  o.stop_after = 1;
  std::vector<PairSpec> adam;
  for (const PairSpec& p : sweep::make_table("table9-mod47", o).pairs) {
    if (p.opt == "adam")
      adam.push_back(p);
  }
  std::vector<PairResult> out;
  for (const auto& group : sweep::group_pairs(adam, /*share=*/true, 1)) {
    for (PairResult& r : twins::run_group(group)) {
      out.push_back(std::move(r));
    }
  }
  return out;
}

// The products a pair may run on: LibTorch's BLAS, and twins' FMA-chain
// kernels where this CPU has them.
std::vector<model::Matmul> matmul_paths() {
  if (model::best_isa() == model::Isa::kNone)
    return {model::Matmul::kBlas};
  return {model::Matmul::kBlas, model::Matmul::kFmaChain};
}

const twins::CurvePoint& at_step(const PairResult& r, int64_t step) {
  for (const auto& c : r.curve) {
    if (c.step == step)
      return c;
  }
  ADD_FAILURE() << "no checkpoint at step " << step;
  return r.curve.front();
}

// Float64 is deterministic enough across devices that the paper's H100
// records are an oracle to about 12 digits (measured: the six gauge twins
// agree to a relative 2e-14 at step 1). A noise twin's logit drift is a
// difference of logits that agree to about as many digits as the noise is
// small, so it keeps only about (the logits' rounding) / (noise scale) of
// relative precision, and the logits' rounding depends on the BLAS kernels
// of the machine: the 1e-5 twin measured 2e-11 on one CPU and 1.5e-10 on
// CI's (LibTorch 2.11's BLAS), the 1e-7 twin 3e-9. Asserted: a hundred unit
// roundoffs of the logits over the noise scale, 1e-14 / noise (1e-9 and
// 1e-7). Its QK drift (a difference of weights drawn apart by the noise)
// keeps 1e-10.
//
// The same holds on twins' FMA-chain kernels (--matmul fma-chain): float64
// products in another summation order move the records by float64
// roundoff only.
TEST(PaperGpu, Table9Mod47AdamStep1IsThePublishedRecord) {
  for (model::Matmul matmul : matmul_paths()) {
    SCOPED_TRACE("--matmul " + model::matmul_name(matmul));
    const model::ScopedMatmul scope(matmul);
    const auto want = published_mod47();
    const auto got = table9_mod47_adam_step1();
    ASSERT_EQ(got.size(), want.size());
    for (const PairResult& r : got) {
      ASSERT_EQ(r.status, twins::PairStatus::kOk) << r.spec.key();
      const auto it = want.find(key_of(r.spec));
      ASSERT_NE(it, want.end()) << r.spec.key();
      const auto& [logit1, qk1] = it->second.at.at(1);
      const twins::CurvePoint& c1 = at_step(r, 1);
      const twins::CurvePoint& c0 = at_step(r, 0);
      switch (r.spec.twin) {
        case TwinKind::kIdentity:
          EXPECT_EQ(c0.logit_drift, 0.0);
          EXPECT_EQ(c1.logit_drift, 0.0);
          EXPECT_EQ(c1.qk_drift_max, 0.0);
          break;
        case TwinKind::kGauge:
          // Step 0 is float rounding of an exact symmetry, in both.
          EXPECT_LT(c0.logit_drift, 1e-15) << r.spec.key();
          EXPECT_LT(relative(c1.logit_drift, logit1), 1e-10) << r.spec.key();
          EXPECT_LT(relative(c1.qk_drift_mean, qk1), 1e-10) << r.spec.key();
          break;
        case TwinKind::kNoise: {
          const double logit_tol = 1e-14 / r.spec.noise_scale;
          const auto& [logit0, qk0] = it->second.at.at(0);
          EXPECT_LT(relative(c0.qk_drift_mean, qk0), 1e-10) << r.spec.key();
          EXPECT_LT(relative(c1.qk_drift_mean, qk1), 1e-10) << r.spec.key();
          EXPECT_LT(relative(c0.logit_drift, logit0), logit_tol)
              << r.spec.key();
          EXPECT_LT(relative(c1.logit_drift, logit1), logit_tol)
              << r.spec.key();
          break;
        }
      }
    }
  }
}

// The paper's Table-9 row needs its own init: under this project's module
// init the same job list is another experiment. Adam's step-1 split is a
// property of the rule, not of the init, so it stays near (measured: 0.6%
// off), but the published record is not reproduced even to 3 digits.
TEST(PaperGpu, TheModuleInitIsAnotherExperiment) {
  sweep::TableOverrides o;
  o.stop_after = 1;
  o.protocol = "twins";
  PairSpec gauge;
  for (const PairSpec& p : sweep::make_table("table9-mod47", o).pairs) {
    if (p.opt == "adam" && p.twin == TwinKind::kGauge) {
      gauge = p;
      break;
    }
  }
  const auto want = published_mod47().at(key_of(gauge)).at.at(1).first;
  const PairResult r = twins::run_pair(gauge);
  EXPECT_GT(relative(at_step(r, 1).logit_drift, want), 1e-3);
}

// Table 3, as the paper's CPU script prints it (logs/attention_gauge_cpu.txt
// in the paper's code: Adam gauge twin 1.8e-7 at step 0, 3.6e-3 at step 1).
// That script run with this machine's PyTorch gives 3.6192013e-3 at step 1
// (twins: 3.6192005e-3); float32 at step 1 depends on the BLAS kernels only
// in the last digits, so a relative 1e-4 holds on CPUs of one kind. The
// twins protocol (float64 draws) gives 3.93e-3, far outside it: the draw's
// dtype is the whole difference (docs/protocol.md §2a).
//
// On twins' FMA-chain kernels the same step prints the same table: float32
// products summed in another order move step 1 in its last digits only.
TEST(PaperCpu, Table3AdamGaugeStep1IsThePrintedTable) {
  for (model::Matmul matmul : matmul_paths()) {
    SCOPED_TRACE("--matmul " + model::matmul_name(matmul));
    const model::ScopedMatmul scope(matmul);
    sweep::TableOverrides o;
    o.stop_after = 1;
    PairSpec gauge;
    for (const PairSpec& p : sweep::make_table("table3", o).pairs) {
      if (p.opt == "adam" && p.twin == TwinKind::kGauge) {
        gauge = p;
        break;
      }
    }
    ASSERT_EQ(gauge.protocol, twins::Protocol::kPaperCpu);
    const PairResult paper_cpu = twins::run_pair(gauge);
    ASSERT_EQ(paper_cpu.status, twins::PairStatus::kOk);
    EXPECT_LT(relative(at_step(paper_cpu, 1).logit_drift, 3.6192013e-3), 1e-4);
    EXPECT_EQ(fmt::format("{:.1e}", at_step(paper_cpu, 1).logit_drift),
              "3.6e-03");
    // Step 0 is float32 rounding of an exact symmetry: its digits are the
    // kernels' (1.7e-7 to 2.0e-7 across CPUs), its size is not.
    EXPECT_GT(at_step(paper_cpu, 0).logit_drift, 5e-8);
    EXPECT_LT(at_step(paper_cpu, 0).logit_drift, 5e-7);

    gauge.protocol = twins::Protocol::kTwins;
    const PairResult own = twins::run_pair(gauge);
    EXPECT_GT(relative(at_step(own, 1).logit_drift, 3.6192013e-3), 5e-2);
  }
}

}  // namespace
