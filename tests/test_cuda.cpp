// On a GPU: the Table-3 set on CUDA in float64 keeps the protocol's exact
// promises (docs/protocol.md §11: the identity twin is bitwise equal to its
// reference; an equivariant optimizer's gauge twin differs by rounding only)
// and its first step agrees with the CPU's. Without a GPU (any build here)
// each test skips and says why; scripts/gpu-check.sh checks the same on
// the full sets.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "binary_helpers.h"

namespace fs = std::filesystem;

namespace {

using testing_helpers::fresh_dir;
using testing_helpers::twin_run;

// Why there is no GPU to test on, in one line: this LibTorch has no CUDA
// (Debian's), or it has (libtorch_cuda is loaded) but sees no device.
std::string why_no_gpu() {
  const bool cuda_build =
      dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD) != nullptr;
  return std::string("needs a GPU: LibTorch ") + TORCH_VERSION +
         (cuda_build ? " has CUDA but sees no device"
                     : " has no CUDA (scripts/build-cuda.sh builds against "
                       "a CUDA wheel)");
}

#define SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << why_no_gpu()

// The checks need float64 gauge draws, exact to rounding, on both devices.
// A twin-run with --protocol is asked for the twins protocol (its float64
// draws), as scripts/gpu-check.sh does; one without draws in float64 anyway.
std::string table3_protocol() {
  const auto o = twin_run("--help", fresh_dir("cuda-help"));
  return o.out.find("--protocol") != std::string::npos ? " --protocol twins"
                                                       : "";
}

// The records of `twin-run --task mod47` (the seven Table-3 pairs) on
// `device`, float64, `steps` steps, keyed by optimizer and twin.
std::map<std::string, nlohmann::json> table3(const std::string& device,
                                             int steps) {
  const fs::path dir = fresh_dir("cuda-" + device);
  const auto o = twin_run("--task mod47 --dtype float64 --quiet --device " +
                              device + " --steps " + std::to_string(steps) +
                              " --out r.jsonl" + table3_protocol(),
                          dir);
  EXPECT_EQ(o.code, 0) << o.err;
  std::map<std::string, nlohmann::json> out;
  std::istringstream lines(testing_helpers::slurp(dir / "r.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto r = nlohmann::json::parse(line);
    out[r["opt"].get<std::string>() + " " + r["twin"].get<std::string>()] = r;
  }
  fs::remove_all(dir);
  EXPECT_EQ(out.size(), 7u);
  return out;
}

nlohmann::json record_at_step(const nlohmann::json& r, int step) {
  for (const auto& p : r["curve"])
    if (p["step"] == step) return p;
  ADD_FAILURE() << r["key"] << " has no step " << step;
  return nlohmann::json::object();
}

TEST(Cuda, IdentityTwinIsExactAndEquivariantTwinsAreRounding) {
  SKIP_WITHOUT_GPU();
  const auto recs = table3("cuda", 3);
  for (const auto& [name, r] : recs) {
    EXPECT_EQ(r["device"].get<std::string>().rfind("cuda", 0), 0u) << name;
    const std::string twin = r["twin"], opt = r["opt"];
    if (twin == "identity") {
      for (const auto& p : r["curve"]) {
        EXPECT_EQ(p["logit_drift"].get<double>(), 0) << name;
        EXPECT_EQ(p["qk_drift_max"].get<double>(), 0) << name;
      }
    } else if (twin == "gauge" && opt != "adam") {  // sgd, scalar-adam, muon
      for (int step : {0, 1})
        EXPECT_LE(record_at_step(r, step)["logit_drift"].get<double>(), 1e-13)
            << name << " step " << step;
    } else if (twin == "gauge") {  // Adam sees the basis at step 1
      EXPECT_GE(record_at_step(r, 1)["logit_drift"].get<double>(), 1e-6);
    }
  }
}

TEST(Cuda, FirstStepAgreesWithTheCpu) {
  SKIP_WITHOUT_GPU();
  const auto gpu = table3("cuda", 1), cpu = table3("cpu", 1);
  for (const auto& [name, r] : gpu) {
    ASSERT_TRUE(cpu.count(name)) << name;
    for (int step : {0, 1}) {
      const auto g = record_at_step(r, step), c = record_at_step(cpu.at(name), step);
      // Relative 1e-10, or 1e-13 absolute for a drift at rounding level
      // (float64 rounding differs between devices).
      const double dg = g["logit_drift"], dc = c["logit_drift"];
      EXPECT_LE(std::abs(dg - dc), 1e-10 * std::max(dg, dc) + 1e-13)
          << name << " step " << step;
      for (int i : {0, 1}) {
        const double lg = g["val_loss"][i], lc = c["val_loss"][i];
        EXPECT_NEAR(lg, lc, 1e-10 * std::abs(lc)) << name << " copy " << i;
      }
    }
  }
}

}  // namespace
