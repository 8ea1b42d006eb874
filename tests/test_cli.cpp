// End to end through the twin-run binary: bad input gives one line on
// stderr, a non-zero exit and no results file; a small run writes records.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/cuda.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "binary_helpers.h"

namespace fs = std::filesystem;

namespace {

using testing_helpers::count_lines;
using testing_helpers::fresh_dir;
using testing_helpers::Outcome;
using testing_helpers::slurp;
using testing_helpers::twin_run;

struct BadInput {
  std::string args;
  std::string must_mention;
};

void PrintTo(const BadInput& b, std::ostream* os) { *os << b.args; }

class CliRejects : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliRejects, WithOneLineNonZeroExitAndNoResultFile) {
  const auto& bad = GetParam();
  if (bad.args == "--device cuda" && torch::cuda::is_available()) {
    GTEST_SKIP() << "this LibTorch has CUDA and sees a GPU: --device cuda is "
                    "valid here";
  }
  const fs::path dir = fresh_dir("bad");
  Outcome o = twin_run(bad.args + " --steps 2 --out res.jsonl", dir);
  EXPECT_NE(o.code, 0) << bad.args;
  EXPECT_EQ(count_lines(o.err), 1) << bad.args << "\n" << o.err;
  EXPECT_NE(o.err.find(bad.must_mention), std::string::npos)
      << bad.args << " -> " << o.err;
  EXPECT_FALSE(fs::exists(dir / "res.jsonl")) << bad.args;
  EXPECT_FALSE(fs::exists(dir / "runs")) << bad.args;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    BadValues, CliRejects,
    ::testing::Values(
        BadInput{"--task mod1", "mod1"}, BadInput{"--task foo", "foo"},
        BadInput{"--opt adamx", "adamx"}, BadInput{"--opt adam,,sgd", "adam,,sgd"},
        BadInput{"--twin spin", "spin"},
        BadInput{"--opt adam --d-model 30 --heads 4", "30"},
        BadInput{"--heads 0", "0"}, BadInput{"--init-seed 4x2", "4x2"},
        BadInput{"--noise-scale abc", "abc"},
        BadInput{"--noise-scale -1e-7", "-1e-07"},
        BadInput{"--lr -1", "-1"}, BadInput{"--dtype float16", "float16"},
        BadInput{"--device tpu", "tpu"}, BadInput{"--device cuda", "cuda"},
        BadInput{"--device cuda:99", "cuda:99"},
        BadInput{"--threads 0", "0"}, BadInput{"--bogus-flag", "bogus"},
        BadInput{"--init-seed=-3", "-3"}, BadInput{"--twin-seed 7,", "7,"},
        BadInput{"--depth 0", "0"}, BadInput{"--mlp -4", "-4"},
        BadInput{"--task charlm --data /nonexistent/corpus.txt",
                 "/nonexistent/corpus.txt"},
        BadInput{"--task charlm --ctx 0", "0"},
        BadInput{"--task charlm --ctx 200000 --depth 1 --d-model 8 "
                 "--heads 2",
                 "200000"}),
    [](const ::testing::TestParamInfo<BadInput>& info) {
      // A readable test name from the flags: "--d-model 30" -> d_model_30.
      std::string name;
      for (char c : info.param.args) {
        if (std::isalnum(static_cast<unsigned char>(c))) {
          name += c;
        } else if (!name.empty() && name.back() != '_') {
          name += '_';
        }
      }
      return name + "_" + std::to_string(info.index);
    });

TEST(Cli, RejectsNonPositiveSteps) {
  for (const char* steps : {"0", "-5"}) {
    const fs::path dir = fresh_dir("steps");
    Outcome o =
        twin_run(std::string("--steps ") + steps + " --out r.jsonl", dir);
    EXPECT_NE(o.code, 0);
    EXPECT_EQ(count_lines(o.err), 1) << o.err;
    EXPECT_NE(o.err.find(steps), std::string::npos) << o.err;
    EXPECT_FALSE(fs::exists(dir / "r.jsonl"));
    fs::remove_all(dir);
  }
}

TEST(Cli, SmallRunWritesOneRecordPerPairAndPrintsTheTable) {
  const fs::path dir = fresh_dir("run");
  Outcome o = twin_run(
      "--task mod11 --opt adam,sgd --twin gauge,identity --steps 3 "
      "--d-model 16 --heads 2 --quiet --out r.jsonl",
      dir);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err, "");  // --quiet
  std::ifstream f(dir / "r.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["task"], "mod11");
    EXPECT_EQ(j["steps"], 3);
    EXPECT_EQ(j["model"]["heads"], 2);
    if (j["twin"] == "identity") EXPECT_EQ(j["curve"][1]["logit_drift"], 0.0);
    ++n;
  }
  EXPECT_EQ(n, 4);
  EXPECT_NE(o.out.find("identity"), std::string::npos);
  EXPECT_NE(o.out.find("step 100"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Cli, DefaultOutputGoesToANewFileUnderRuns) {
  const fs::path dir = fresh_dir("default-out");
  Outcome o = twin_run(
      "--task mod5 --opt sgd --steps 1 --d-model 8 --heads 2 --quiet", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  ASSERT_TRUE(fs::exists(dir / "runs"));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir / "runs")) {
    EXPECT_EQ(e.path().extension(), ".jsonl");
    EXPECT_EQ(e.path().filename().string().rfind("mod5-", 0), 0u);
    ++files;
  }
  EXPECT_EQ(files, 1);
  fs::remove_all(dir);
}

TEST(Cli, HelpShowsDefaultsAndProtocolTerms) {
  const fs::path dir = fresh_dir("help");
  Outcome o = twin_run("--help", dir);
  EXPECT_EQ(o.code, 0);
  for (const char* s : {"--task", "mod47", "--twin-seed", "777", "888",
                        "--noise-scale", "1e-7", "--dtype", "--device",
                        "W_Q", "--list-optimizers"}) {
    EXPECT_NE(o.out.find(s), std::string::npos) << s;
  }
  fs::remove_all(dir);
}

}  // namespace
