// The benchmark's bookkeeping: the analytic FLOP count of a training step,
// the page-fault figure, and a quick end-to-end run of `twin-run bench`.
#include <gtest/gtest.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "bench/bench.h"
#include "model/flops.h"
#include "model/fused.h"
#include "model/transformer.h"
#include "twin_run_path.h"
#include "twins/device.h"
#include "twins/environment.h"

namespace fs = std::filesystem;

namespace {

TEST(Flops, Mod47StepCountsEveryProductOfTheShortcutModel) {
  model::ModelConfig cfg;  // mod47: 2 layers, d 64, 4 heads, mlp 256
  const double rows = 883 * 3, last = 883, d = 64, mlp = 256;
  const double table = 48 * 3;  // (token, position) rows of the first block
  const double attention1 = 883 * 4 * (3 * 16 * 3 + 3 * 3 * 16);
  // Forward multiply-adds. Layer 1: W_Q, W_K, W_V on the token table on
  // CPU (on every position on CUDA), W_O and the MLP on every position;
  // layer 2 with the last-position shortcut (K and V still on every
  // position); then the head.
  const double layer1_cpu =
      table * 3 * d * d + rows * (d * d + 2 * d * mlp) + attention1;
  const double layer1_cuda = rows * (4 * d * d + 2 * d * mlp) + attention1;
  const double layer2 = rows * 2 * d * d + last * (2 * d * d + 2 * d * mlp) +
                        883 * 4 * (1 * 16 * 3 + 1 * 3 * 16);
  const double head = last * d * 47;
  // x 2 FLOPs per multiply-add, x 3 for forward + the two backward products.
  const double cpu = 2 * 3 * (layer1_cpu + layer2 + head);
  const double cuda = 2 * 3 * (layer1_cuda + layer2 + head);
  EXPECT_DOUBLE_EQ(
      model::total_flops(model::training_step_matmuls(cfg, 883, 3)), cpu);
  EXPECT_DOUBLE_EQ(
      model::total_flops(model::training_step_matmuls(cfg, 883, 3, true)),
      cuda);
  EXPECT_NEAR(cuda / 1e9, 1.15, 0.01);  // ~1.15 GFLOP per model step
  EXPECT_NEAR(cpu / 1e9, 0.96, 0.01);   // the table saves ~1/6
  // Fewer sequences than tokens: no table.
  EXPECT_FALSE(model::uses_token_table(cfg, 48, false));
  EXPECT_TRUE(model::uses_token_table(cfg, 49, false));
}

// Each linear map's products are Y = X W^T, dX = dY W and dW = dY^T X, in
// that order; only dW reads its A (dY) transposed, and its k is the rows
// Y had. The bench times each product in that layout.
TEST(Flops, OnlyTheWeightGradientsReadATransposed) {
  model::ModelConfig cfg;
  std::vector<model::MatmulShape> linear;
  for (const auto& s : model::training_step_matmuls(cfg, 883, 3))
    if (s.batch == 1)
      linear.push_back(s);
  ASSERT_EQ(linear.size() % 3, 0u);
  for (size_t i = 0; i < linear.size(); i += 3) {
    const auto &y = linear[i], &dx = linear[i + 1], &dw = linear[i + 2];
    EXPECT_FALSE(y.a_transposed) << i;
    EXPECT_FALSE(dx.a_transposed) << i;
    EXPECT_TRUE(dw.a_transposed) << i;
    // dW (out x rows)(rows x in) from Y's (rows x in)(in x out).
    EXPECT_EQ(dw.m, y.n) << i;
    EXPECT_EQ(dw.k, y.m) << i;
    EXPECT_EQ(dw.n, y.k) << i;
  }
}

TEST(Flops, FullModelScalesWithTokensAndDepth) {
  model::ModelConfig cfg;
  cfg.last_only = false;
  cfg.causal = true;
  cfg.vocab_in = cfg.vocab_out = 65;
  cfg.n_ctx = 16;
  const double one =
      model::total_flops(model::training_step_matmuls(cfg, 4, 16));
  const double two =
      model::total_flops(model::training_step_matmuls(cfg, 8, 16));
  EXPECT_DOUBLE_EQ(two, 2 * one);  // linear in the number of sequences
  cfg.depth = 4;
  const double deeper =
      model::total_flops(model::training_step_matmuls(cfg, 4, 16));
  const double head = 2 * 3 * 4 * 16 * 64 * 65.0;
  EXPECT_DOUBLE_EQ(deeper - head, 2 * (one - head));  // per layer
}

long minor_faults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

// The mechanism, not a figure: after keep_freed_memory() a freed 16 MiB
// block (below the 32 MiB mmap threshold, and never trimmed) stays in the
// process, so allocating and touching it again faults in almost nothing,
// where glibc's defaults unmap it and fault in all 4096 pages. The
// per-step figure of a real pair is the benchmark's (faults_per_pair_step).
TEST(Allocator, FreedMemoryStaysInTheProcess) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "keep_freed_memory tunes glibc's malloc only";
#endif
  ASSERT_TRUE(twins::keep_freed_memory());
  constexpr size_t kBytes = 16 << 20;
  auto touch = [] {
    auto* p = static_cast<volatile char*>(std::malloc(kBytes));
    for (size_t i = 0; i < kBytes; i += 4096)
      p[i] = 1;
    std::free(const_cast<char*>(p));
  };
  touch();  // the heap grows once
  const long before = minor_faults();
  touch();
  EXPECT_LT(minor_faults() - before, long(kBytes / 4096 / 10))
      << "pages faulted re-touching a freed 16 MiB block";
  // The measurement sees faults where they happen: a block above the mmap
  // threshold is still mapped afresh.
  const long big = minor_faults();
  torch::empty({(64 << 20) / 4}, torch::kFloat32).fill_(1.0f);
  EXPECT_GT(minor_faults() - big, (64 << 20) / 4096 / 2);
}

// The benchmark's fault figure sees faults where a run makes them: under
// glibc's default malloc settings (mmap and trim thresholds 128 KiB, set
// here explicitly in case keep_freed_memory ran earlier in this process)
// every mod47 step maps and faults its activations in afresh: thousands of
// faults per pair-step (docs/performance.md: about 3,000 with glibc's
// self-raising threshold; about 21,000 with it fixed as here, 2-core EPYC),
// against 0 to 150 with the memory kept (BenchCommand below).
TEST(BenchFaults, GlibcDefaultsFaultEveryPairStep) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "the fault figure is compared with glibc's malloc defaults";
#else
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 << 10), 1);
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 128 << 10), 1);
  bench::BenchOptions o;
  o.rows = {"mod47-f32-seq1"};
  o.quick = true;
  o.repeats = 2;
  const std::vector<bench::BenchRow> rows = bench::run_bench(o);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_GT(rows[0].faults_per_pair_step, 1000);
#endif
}

TEST(BenchCommand, QuickRunWritesRowsWithPositiveFigures) {
  const fs::path dir =
      fs::temp_directory_path() / ("twins-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "bench.json").string();
  const std::string cmd = std::string("'") + TWIN_RUN_PATH +
                          "' bench --quick --rows "
                          "mod47-f32-seq1,mod47-f32,mod47-f32-rope-gqa "
                          "--out '" +
                          out + "' > '" + (dir / "log").string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::ifstream f(out);
  const auto j = nlohmann::json::parse(f);
  ASSERT_EQ(j["rows"].size(), 3u);
  // The BLAS and its kernels, as this process (the same libraries, the
  // same choice of core: tests/main.cpp) names them.
  const twins::NumericEnv& env = twins::numeric_env("cpu");
  EXPECT_EQ(j["blas"], env.blas);
  EXPECT_EQ(j["blas_core"], env.blas_core);
  for (const auto& r : j["rows"]) {
    // twin-run keeps freed memory (twins::keep_freed_memory): far fewer
    // faults than glibc's defaults make (BenchFaults above).
    EXPECT_LT(r["faults_per_pair_step"].get<double>(), 1000) << r["row"];
    EXPECT_GT(r["s_per_pair_step"].get<double>(), 0);
    EXPECT_GT(r["roof_gflops"].get<double>(), 0);
    EXPECT_GT(r["model_gflops"].get<double>(), 0);
    EXPECT_EQ(r["task"], "mod47");
  }
  for (const auto& r : j["rows"]) {  // in the benchmark's own row order
    EXPECT_EQ(r["concurrent_copies"], r["row"] != "mod47-f32-seq1") << r["row"];
    // The LLaMA-style row: rotary positions, 2 key/value heads for 4.
    const bool llama = r["row"] == "mod47-f32-rope-gqa";
    EXPECT_EQ(r["model"]["rope"], llama) << r["row"];
    EXPECT_EQ(r["model"]["kv_heads"], llama ? 2 : 4) << r["row"];
    EXPECT_EQ(r["model"]["heads"], 4) << r["row"];
  }
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  fs::remove_all(dir);
}

// The FMA-chain row runs the same pair on twins' kernels and says so; the
// kernel table names every linear-map product shape of the mod47 step
// once, with how many of the step's products have it, and positive
// figures.
TEST(BenchCommand, TheKernelRowAndTableRunWhereTheCpuHasTheKernels) {
  if (model::best_isa() == model::Isa::kNone)
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  const fs::path dir = fs::temp_directory_path() /
                       ("twins-bench-fma-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string row = (dir / "row.json").string();
  const std::string table = (dir / "kernels.json").string();
  const std::string quiet = " > '" + (dir / "log").string() + "' 2>&1";
  ASSERT_EQ(std::system((std::string("'") + TWIN_RUN_PATH +
                         "' bench --quick --rows mod47-f32-fma --out '" + row +
                         "'" + quiet)
                            .c_str()),
            0);
  std::ifstream r(row);
  const auto j = nlohmann::json::parse(r);
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["matmul"], "fma-chain");
  EXPECT_GT(j["rows"][0]["s_per_pair_step"].get<double>(), 0);
  ASSERT_EQ(std::system((std::string("'") + TWIN_RUN_PATH +
                         "' bench --kernels --quick --out '" + table + "'" +
                         quiet)
                            .c_str()),
            0);
  std::ifstream t(table);
  const auto k = nlohmann::json::parse(t);
  EXPECT_EQ(k["rows"].size(), 0u);
  // Nothing of a row applies to the table: refused, nothing written.
  const std::string refused = (dir / "refused.json").string();
  const std::string err = (dir / "err").string();
  EXPECT_NE(std::system((std::string("'") + TWIN_RUN_PATH +
                         "' bench --kernels --rows mod47-f32 --out '" +
                         refused + "' > /dev/null 2>'" + err + "'")
                            .c_str()),
            0);
  std::ifstream e(err);
  const std::string message((std::istreambuf_iterator<char>(e)),
                            std::istreambuf_iterator<char>());
  EXPECT_NE(message.find("--kernels"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(refused));
  for (const char* dtype : {"float32", "float64"}) {
    ASSERT_TRUE(k["kernels"].contains(dtype)) << dtype;
    int products = 0;
    for (const auto& f : k["kernels"][dtype]) {
      products += f["count"].get<int>();
      EXPECT_GT(f["blas_gflops"].get<double>(), 0);
      EXPECT_GT(f["fma_chain_gflops"].get<double>(), 0);
      EXPECT_GT(f["fma_peak_gflops"].get<double>(), 0);
    }
    // Every product of the step but attention's (batch > 1), each shape in
    // the layout the step reads it (a_transposed: the weight gradients).
    model::ModelConfig cfg;
    int want = 0;
    std::set<std::tuple<int64_t, int64_t, int64_t, bool>> want_shapes,
        shapes;
    for (const auto& s : model::training_step_matmuls(cfg, 883, 3)) {
      want += s.batch == 1;
      if (s.batch == 1)
        want_shapes.insert({s.m, s.k, s.n, s.a_transposed});
    }
    for (const auto& f : k["kernels"][dtype]) {
      shapes.insert({f["m"].get<int64_t>(), f["k"].get<int64_t>(),
                     f["n"].get<int64_t>(), f["a_transposed"].get<bool>()});
    }
    EXPECT_EQ(products, want) << dtype;
    EXPECT_EQ(shapes, want_shapes) << dtype;
    // The products inside the step, by the kernels' clock: exactly the
    // FLOPs of every product above (the timed segments only train), in a
    // share of the copy-step's wall time.
    double step_flops = 0;
    for (const auto& s : model::training_step_matmuls(cfg, 883, 3))
      step_flops += s.batch == 1 ? 2.0 * s.m * s.k * s.n : 0.0;
    const auto& in_step = k["kernels"]["in_step"][dtype];
    EXPECT_EQ(in_step["flops_per_copy_step"].get<double>(), step_flops)
        << dtype;
    EXPECT_GT(in_step["kernel_calls_per_copy_step"].get<double>(), 0);
    EXPECT_GT(in_step["gflops"].get<double>(), 0);
    EXPECT_GT(in_step["fma_peak_gflops"].get<double>(), 0);
    EXPECT_GT(in_step["product_s_per_copy_step"].get<double>(), 0);
    EXPECT_LT(in_step["product_s_per_copy_step"].get<double>(),
              in_step["s_per_copy_step"].get<double>());
    // The MLP's SiLU beside its product: forward and backward for the
    // first block's 2649 token rows and the last block's 883 sequences.
    std::vector<std::pair<std::string, int64_t>> passes;
    for (const auto& f : k["kernels"]["silu"][dtype]) {
      passes.emplace_back(f["pass"].get<std::string>(), f["m"].get<int64_t>());
      EXPECT_EQ(f["k"], cfg.d_model);
      EXPECT_EQ(f["n"], cfg.mlp);
      for (const char* path : {"blas_ms", "fma_chain_ms", "fused_ms"})
        EXPECT_GT(f[path].get<double>(), 0) << path;
    }
    const std::vector<std::pair<std::string, int64_t>> expected{
        {"forward", 2649},
        {"backward", 2649},
        {"forward", 883},
        {"backward", 883}};
    EXPECT_EQ(passes, expected) << dtype;
  }
  fs::remove_all(dir);
}

// A row name longer than the column (mod47-f32-rope-gqa) widens it: every
// line's columns start where the header's do.
TEST(BenchTable, ColumnsLineUpWhateverTheRowNames) {
  bench::BenchRow a;
  a.name = "mod47-f32";
  a.s_per_pair_step = 0.0222;
  a.model_gflops = 10;
  a.roof_gflops = 20;
  bench::BenchRow b = a;
  b.name = "mod47-f32-rope-gqa-and-longer";
  b.threads.concurrent = true;
  const std::string table = bench::format_bench_table({a, b});
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = table.find('\n', start)) != std::string::npos;
       start = end + 1)
    lines.push_back(table.substr(start, end - start));
  ASSERT_GE(lines.size(), 3u);
  const size_t threads = lines[0].find("threads");
  const size_t step = lines[0].find("s/pair-step") + 11;  // right-aligned
  EXPECT_GT(threads, b.name.size());
  for (int i : {1, 2}) {
    const bench::BenchRow& r = i == 1 ? a : b;
    EXPECT_EQ(lines[i].find(r.threads.name()), threads) << lines[i];
    EXPECT_EQ(lines[i].find("0.0222") + 6, step) << lines[i];
  }
}

TEST(BenchCommand, UnknownRowIsAOneLineErrorNamingTheKnownRows) {
  const fs::path dir = fs::temp_directory_path() /
                       ("twins-bench-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string err = (dir / "err").string();
  const std::string cmd =
      std::string("cd '") + dir.string() + "' && '" + TWIN_RUN_PATH +
      "' bench --rows mod99-f16 > /dev/null 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  std::ifstream f(err);
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(text.find("'mod99-f16'"), std::string::npos) << text;
  EXPECT_NE(text.find("mod47-f32-seq1"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(dir / "runs")) << "nothing written";
  fs::remove_all(dir);
}

}  // namespace
