// Records of different numeric environments never mix silently: every
// record says under which LibTorch, BLAS core and ATen CPU capability it
// was computed (twins/environment.h); a resume into, or an aggregate of,
// records of another environment stops with one line naming the file, the
// line and the difference, or warns with --allow-mixed-env; and
// --portable-kernels pins the kernels, so that runs whose libraries would
// choose others write the same bits. Each case runs the twin-run binary
// and checks the files byte for byte afterwards.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>

#include "binary_helpers.h"
#include "model/gemm.h"
#include "twins/environment.h"
#include "twins/record.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using namespace testing_helpers;  // tests/binary_helpers.h

// kPair (tests/binary_helpers.h), and a second pair of the same command
// line (so that a resume has something to append).
const std::string kTwoPairs = "--opt sgd,adam --steps 1 --quiet";

// The record of `line` with numeric_env.blas_core set to another core than
// the one it has; *was receives the one it had.
std::string other_core(const std::string& line, std::string* was) {
  json j = json::parse(line);
  *was = j.at("numeric_env").at("blas_core").get<std::string>();
  j["numeric_env"]["blas_core"] = *was == "Sandybridge" ? "Prescott"
                                                        : "Sandybridge";
  return j.dump() + "\n";
}

bool has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

}  // namespace

// The field is written by every run, read back by the codec, and a record
// without it (written before it existed) reads as of an unknown
// environment, which differs from none.
TEST(NumericEnv, EveryRecordCarriesItAndTheCodecReadsItBack) {
  const fs::path dir = fresh_dir("numenv-field");
  ASSERT_EQ(twin_run(kPair + " --out r.jsonl", dir).code, 0);
  const json j = json::parse(slurp(dir / "r.jsonl"));
  ASSERT_TRUE(j.contains("numeric_env")) << j.dump();
  const json& env = j["numeric_env"];
  EXPECT_EQ(env.at("torch"), TORCH_VERSION);
  for (const char* part : {"blas", "blas_core", "cpu_capability", "device"})
    EXPECT_TRUE(env.at(part).is_string() && !env.at(part).get<std::string>().empty())
        << part;
  EXPECT_EQ(env.at("device").get<std::string>().rfind("cpu", 0), 0u);
  // This process (the test) links the same libraries as the binary.
  EXPECT_EQ(twins::to_json(twins::numeric_env("cpu")), env);

  const twins::PairResult r = twins::from_json(j);
  EXPECT_TRUE(r.numeric_env.known());
  EXPECT_EQ(twins::to_json(r), j) << "written, read back, written again";

  json old = j;
  old.erase("numeric_env");
  const twins::PairResult o = twins::from_json(old);
  EXPECT_FALSE(o.numeric_env.known());
  EXPECT_EQ(o.numeric_env.blas_core, twins::kUnknownEnvironment);
  EXPECT_EQ(twins::environment_difference(o.numeric_env, r.numeric_env), "");
  EXPECT_FALSE(twins::to_json(o).contains("numeric_env"));

  twins::NumericEnv a = r.numeric_env, b = r.numeric_env;
  b.blas_core = "Sandybridge";
  a.blas_core = "Haswell";
  EXPECT_EQ(twins::environment_difference(a, b),
            "blas_core Haswell vs Sandybridge");
  // The CPU's model name alone is no difference (the kernels are the
  // core's and the capability's); a GPU's is.
  b = a;
  b.device = "cpu: another CPU";
  EXPECT_EQ(twins::environment_difference(a, b), "");
  a.device = "cuda: NVIDIA H100";
  b.device = "cuda: NVIDIA H200";
  EXPECT_EQ(twins::environment_difference(a, b),
            "device cuda: NVIDIA H100 vs cuda: NVIDIA H200");
  fs::remove_all(dir);
}

// Appending to a file whose records were written under another numeric
// environment stops before any step with one line naming the file, the
// line and the difference, and leaves the file as it was; with
// --allow-mixed-env it is one warning and the run appends. A record
// without the field does not stop it.
TEST(NumericEnv, AResumeUnderAnotherEnvironmentIsRefused) {
  const fs::path dir = fresh_dir("numenv-resume");
  ASSERT_EQ(twin_run(kPair + " --out r.jsonl", dir).code, 0);
  std::string core;
  const std::string edited = other_core(slurp(dir / "r.jsonl"), &core);
  spit(dir / "r.jsonl", edited);
  const std::string other = json::parse(edited)["numeric_env"]["blas_core"];

  Outcome o = twin_run(kTwoPairs + " --out r.jsonl", dir);
  EXPECT_NE(o.code, 0);
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  for (const std::string& part :
       {std::string("'r.jsonl', line 1"),
        "blas_core " + other + " vs " + core, std::string("--allow-mixed-env")})
    EXPECT_NE(o.err.find(part), std::string::npos) << part << " in " << o.err;
  EXPECT_EQ(slurp(dir / "r.jsonl"), edited) << "the file was changed";

  o = twin_run(kTwoPairs + " --allow-mixed-env --out r.jsonl", dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("warning"), std::string::npos) << o.err;
  EXPECT_EQ(count_lines(slurp(dir / "r.jsonl")), 2);

  // Written before the field existed: unknown, resumed without a word.
  json old = json::parse(edited);
  old.erase("numeric_env");
  spit(dir / "old.jsonl", old.dump() + "\n");
  o = twin_run(kTwoPairs + " --out old.jsonl", dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  EXPECT_EQ(count_lines(slurp(dir / "old.jsonl")), 2);
  fs::remove_all(dir);
}

// --matmul fma-chain is part of the environment: its records say so, a
// run on the BLAS's products does not append to them (nor they to its),
// both keep the identity twin at exactly 0, and the choice is the same
// bits under --jobs and --threads. A record written before the field
// existed reads as blas. An unknown value is refused in one line.
TEST(NumericEnv, TheMatmulChoiceIsPartOfTheEnvironment) {
  const fs::path dir = fresh_dir("numenv-matmul");
  Outcome o = twin_run(kPair + " --matmul cublas --out x.jsonl", dir);
  EXPECT_NE(o.code, 0);
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("--matmul"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("cublas"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(dir / "x.jsonl"));
  if (model::best_isa() == model::Isa::kNone)
    GTEST_SKIP() << "this CPU has neither AVX2 with FMA nor AVX-512";
  const std::string pairs = "--task mod11 --opt adam,sgd --twin gauge,identity "
                            "--steps 3 --quiet --matmul fma-chain";
  ASSERT_EQ(twin_run(pairs + " --out f.jsonl", dir).code, 0);
  ASSERT_EQ(twin_run(pairs + " --jobs 1 --threads 1 --out f1.jsonl", dir).code,
            0);
  const std::string records = slurp(dir / "f.jsonl");
  std::istringstream lines(records);
  std::istringstream lines1(slurp(dir / "f1.jsonl"));
  std::map<std::string, json> by_key;
  for (std::string line; std::getline(lines1, line);) {
    json j = json::parse(line);
    by_key[j.at("key").get<std::string>()] = j;
  }
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    const json j = json::parse(line);
    EXPECT_EQ(j["numeric_env"]["matmul"], "fma-chain");
    const json& other = by_key.at(j.at("key").get<std::string>());
    EXPECT_EQ(j["curve"], other["curve"]) << j["key"];
    if (j["twin"] == "identity") {
      for (const auto& point : j["curve"])
        EXPECT_EQ(point["logit_drift"].get<double>(), 0.0) << j["key"];
    }
  }
  EXPECT_EQ(n, 4);
  // Resumed on the BLAS's products: refused, naming the difference.
  o = twin_run("--task mod11 --opt adam,sgd,muon --twin gauge,identity "
               "--steps 3 --quiet --out f.jsonl",
               dir);
  EXPECT_NE(o.code, 0);
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("matmul fma-chain vs blas"), std::string::npos)
      << o.err;
  EXPECT_EQ(slurp(dir / "f.jsonl"), records) << "the file was changed";
  // A record without the field is a blas record.
  json old = json::parse(records.substr(0, records.find('\n')));
  old["numeric_env"].erase("matmul");
  EXPECT_EQ(twins::numeric_env_from_json(old["numeric_env"]).matmul, "blas");
  fs::remove_all(dir);
}

// An aggregate (and a plot) of files of two environments: the same.
TEST(NumericEnv, AnAggregateOfTwoEnvironmentsIsRefused) {
  const fs::path dir = fresh_dir("numenv-aggregate");
  ASSERT_EQ(twin_run(kPair + " --out a.jsonl", dir).code, 0);
  ASSERT_EQ(twin_run("--opt adam --steps 1 --quiet --out b.jsonl", dir).code,
            0);
  std::string core;
  spit(dir / "b.jsonl", other_core(slurp(dir / "b.jsonl"), &core));
  const std::string a = slurp(dir / "a.jsonl"), b = slurp(dir / "b.jsonl");

  for (const std::string cmd :
       {"table --aggregate a.jsonl b.jsonl", "plot a.jsonl b.jsonl"}) {
    const Outcome o = twin_run(cmd, dir);
    EXPECT_NE(o.code, 0) << cmd;
    EXPECT_EQ(count_lines(o.err), 1) << cmd << ": " << o.err;
    EXPECT_NE(o.err.find("'b.jsonl', line 1"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("'a.jsonl', line 1"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("vs " + core), std::string::npos) << o.err;
  }
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    EXPECT_TRUE(ext == ".jsonl" || ext == ".txt") << e.path() << " written";
  }

  const Outcome o =
      twin_run("table --aggregate a.jsonl b.jsonl --allow-mixed-env", dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("warning"), std::string::npos) << o.err;
  EXPECT_EQ(slurp(dir / "a.jsonl"), a);
  EXPECT_EQ(slurp(dir / "b.jsonl"), b);
  fs::remove_all(dir);
}

// --portable-kernels re-executes the binary once with the kernels pinned:
// its records carry the pinned core and capability whatever the caller's
// environment chose, and runs under different caller choices are bitwise
// equal (the emulation, on one machine, of two AVX2 machines whose
// libraries' auto-detection differs). A re-exec that did not pin is never
// repeated.
TEST(NumericEnv, PortableRunsPinTheKernelsAndAgreeBitwise) {
  if (!has_avx2())
    GTEST_SKIP() << "no AVX2/FMA: --portable-kernels refuses to run";
  const fs::path dir = fresh_dir("numenv-portable");
  const std::string run = "--opt adam --steps 3 --quiet --portable-kernels";
  const std::string callers[] = {"", "OPENBLAS_CORETYPE=Sandybridge ",
                                 "ATEN_CPU_CAPABILITY=default ",
                                 "TWINS_PORTABLE=1 OPENBLAS_CORETYPE=Prescott "};
  std::vector<json> records;
  for (size_t i = 0; i < std::size(callers); ++i) {
    const std::string out = "p" + std::to_string(i) + ".jsonl";
    // The last one asks through the variable, not the flag.
    std::string args = run;
    if (i == 3)
      args = "--opt adam --steps 3 --quiet";
    const Outcome o = twin_run(args + " --out " + out, dir, callers[i]);
    ASSERT_EQ(o.code, 0) << callers[i] << o.err;
    // Re-executed once: the note of the caller's value is said once.
    if (!callers[i].empty()) {
      EXPECT_EQ(count_lines(o.err), 1) << callers[i] << o.err;
      EXPECT_NE(o.err.find("-> "), std::string::npos) << o.err;
    }
    records.push_back(twins::without_timing(json::parse(slurp(dir / out))));
    const json& env = records.back()["numeric_env"];
    EXPECT_EQ(env["cpu_capability"], twins::kPortableCpuCapability) << env;
    // A DYNAMIC_ARCH OpenBLAS honours OPENBLAS_CORETYPE (another BLAS, or a
    // build for one core, has no core to pin).
    const std::string blas = env["blas"];
    if (blas.rfind("OpenBLAS", 0) == 0 &&
        blas.find("DYNAMIC_ARCH") != std::string::npos) {
      EXPECT_EQ(env["blas_core"], twins::kPortableBlasCore) << env;
    }
  }
  for (size_t i = 1; i < records.size(); ++i)
    EXPECT_EQ(records[i], records[0]) << callers[i] << "differs from plain";

  const Outcome loop = twin_run(run + " --out loop.jsonl", dir,
                                "TWINS_PORTABLE_REEXEC=1 "
                                "OPENBLAS_CORETYPE=Sandybridge ");
  EXPECT_NE(loop.code, 0);
  EXPECT_EQ(count_lines(loop.err), 1) << loop.err;
  EXPECT_NE(loop.err.find("not re-executing again"), std::string::npos)
      << loop.err;
  EXPECT_FALSE(fs::exists(dir / "loop.jsonl"));
  fs::remove_all(dir);
}

// TWINS_PORTABLE is 1, 0 or empty: a typo is refused, not read as "no".
TEST(NumericEnv, AnUnknownTwinsPortableIsRefused) {
  const fs::path dir = fresh_dir("numenv-portable-value");
  const Outcome o = twin_run("--opt sgd --steps 1 --quiet --out r.jsonl", dir,
                             "TWINS_PORTABLE=banana ");
  EXPECT_NE(o.code, 0);
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("TWINS_PORTABLE='banana'"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(dir / "r.jsonl"));
  const Outcome off = twin_run("--opt sgd --steps 1 --quiet --out r.jsonl",
                               dir, "TWINS_PORTABLE=0 ");
  EXPECT_EQ(off.code, 0) << off.err;
  fs::remove_all(dir);
}

// A DYNAMIC_ARCH OpenBLAS that does not know the CPU falls back to its
// Prescott kernels (SSE3); twin-run names the CPU's own core instead:
// SkylakeX with AVX-512, Haswell with AVX2 and FMA. Every other case
// keeps the chosen core.
TEST(NumericEnv, AnUnknownCpuGetsTheCoreOfItsVectorInstructions) {
  const std::string dynamic =
      "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Prescott "
      "MAX_THREADS=64";
  const twins::CpuVectors none, avx2{true, false}, avx512{true, true};
  EXPECT_EQ(twins::core_for_unknown_cpu(dynamic, "Prescott", avx512),
            "SkylakeX");
  EXPECT_EQ(twins::core_for_unknown_cpu(dynamic, "Prescott", avx2), "Haswell");
  EXPECT_EQ(twins::core_for_unknown_cpu(dynamic, "Prescott", none), "");
  for (const char* known : {"Haswell", "SkylakeX", "Zen", "Sandybridge"})
    EXPECT_EQ(twins::core_for_unknown_cpu(dynamic, known, avx512), "") << known;
  // A build for one core, or another BLAS, has no other core to take.
  EXPECT_EQ(twins::core_for_unknown_cpu(
                "OpenBLAS 0.3.21 NO_LAPACKE NO_AFFINITY Prescott", "Prescott",
                avx512),
            "");
  EXPECT_EQ(twins::core_for_unknown_cpu("Intel(R) oneAPI Math Kernel Library",
                                        "Prescott", avx512),
            "");
}

// On every machine: a plain run's records never name the Prescott
// fallback on a CPU with AVX2 (on one OpenBLAS does not know, twin-run
// re-executes with the CPU's core), and on x86 a core the caller names
// stands, Prescott included, without a word on stderr. The plain run is
// started without OPENBLAS_CORETYPE: this process may have been given one
// (tests/main.cpp), and twin-run must choose for itself.
TEST(NumericEnv, APlainRunUsesTheCpusCoreAndACallersCoreStands) {
  const fs::path dir = fresh_dir("numenv-unknown-cpu");
  const Outcome plain = twin_run("--opt sgd --steps 1 --quiet --out p.jsonl",
                                 dir, "env -u OPENBLAS_CORETYPE ");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.err, "");
  const json env = json::parse(slurp(dir / "p.jsonl"))["numeric_env"];
  const std::string blas = env["blas"];
  const bool dynamic = blas.rfind("OpenBLAS", 0) == 0 &&
                       blas.find("DYNAMIC_ARCH") != std::string::npos;
  if (dynamic && has_avx2())
    EXPECT_NE(env["blas_core"], "Prescott") << env;
#if defined(__x86_64__) || defined(__i386__)  // an x86 core's name
  const Outcome chosen = twin_run("--opt sgd --steps 1 --quiet --out c.jsonl",
                                  dir, "OPENBLAS_CORETYPE=Prescott ");
  ASSERT_EQ(chosen.code, 0) << chosen.err;
  EXPECT_EQ(chosen.err, "");
  if (dynamic) {
    EXPECT_EQ(json::parse(slurp(dir / "c.jsonl"))["numeric_env"]["blas_core"],
              "Prescott");
  }
#endif
  fs::remove_all(dir);
}
