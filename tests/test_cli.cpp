// End to end through the twin-run binary: bad input gives one line on
// stderr, a non-zero exit and no results file; a small run writes records.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "binary_helpers.h"
#include "twins/record.h"
#include "twins_paths.h"  // generated: TWINS_SOURCE_DIR

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

void PrintTo(const BadInput& b, std::ostream* os) {
  *os << b.args;
}

// `args` (run in `dir` with --out res.jsonl) fails with one line on stderr
// that mentions `must_mention`, and writes no results file.
void expect_rejected(const std::string& args, const std::string& must_mention,
                     const fs::path& dir) {
  const Outcome o = twin_run(args + " --out res.jsonl", dir);
  EXPECT_NE(o.code, 0) << args;
  EXPECT_EQ(count_lines(o.err), 1) << args << "\n" << o.err;
  EXPECT_NE(o.err.find(must_mention), std::string::npos)
      << args << " -> " << o.err;
  EXPECT_FALSE(fs::exists(dir / "res.jsonl")) << args;
  EXPECT_FALSE(fs::exists(dir / "runs")) << args;
}

class CliRejects : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliRejects, WithOneLineNonZeroExitAndNoResultFile) {
  const auto& bad = GetParam();
  if (bad.args == "--device cuda" && torch::cuda::is_available()) {
    GTEST_SKIP() << "this LibTorch has CUDA and sees a GPU: --device cuda is "
                    "valid here";
  }
  const fs::path dir = fresh_dir("bad");
  expect_rejected(bad.args + " --steps 2", bad.must_mention, dir);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    BadValues, CliRejects,
    ::testing::Values(
        BadInput{"--task mod1", "mod1"}, BadInput{"--task foo", "foo"},
        BadInput{"--opt adamx", "adamx"},
        BadInput{"--opt adam,,sgd", "adam,,sgd"},
        BadInput{"--twin spin", "spin"},
        BadInput{"--opt adam --d-model 30 --heads 4", "30"},
        BadInput{"--heads 0",
                 "--heads: 0 is not a whole number from 1 to 4096"},
        BadInput{"--init-seed 4x2", "4x2"},
        BadInput{"--noise-scale abc", "abc"},
        BadInput{"--noise-scale -1e-7", "-1e-07"}, BadInput{"--lr -1", "-1"},
        BadInput{"--dtype float16", "float16"}, BadInput{"--device tpu", "tpu"},
        BadInput{"--device cuda", "cuda"},
        BadInput{"--device cuda:99", "cuda:99"},
        BadInput{"--threads 0",
                 "--threads: 0 is not a whole number from 1 to 1024"},
        BadInput{"--jobs 0", "--jobs: 0 is not a whole number from 1 to 1024"},
        BadInput{"--bogus-flag", "bogus"}, BadInput{"--init-seed=-3", "-3"},
        BadInput{"--twin-seed 7,", "7,"},
        BadInput{"--depth 0",
                 "--depth: 0 is not a whole number from 1 to 1000"},
        BadInput{"--mlp -4", "--mlp: -4 is not a whole number from 1 to"},
        BadInput{"--mlp 0", "--mlp: 0 is not a whole number from 1 to"},
        // A frequency base of 1 or less is refused by the flag itself, as
        // its help says (NUMBER > 1), not later by the model.
        BadInput{"--rope --rope-base 0.5", "--rope-base: 0.5 is not above 1"},
        BadInput{"--rope --rope-base 1", "--rope-base: 1 is not above 1"},
        // A flag of another command is named with its command.
        BadInput{"--merge-at 5", "--merge-at is an option of twin-run merge"},
        BadInput{"--default-rates", "--default-rates is an option of twin-run table"},
        BadInput{"--d-model 1e3", "--d-model: 1e3 is not a whole number"},
        BadInput{"--task charlm --data /nonexistent/corpus.txt",
                 "/nonexistent/corpus.txt"},
        BadInput{"--task charlm --ctx 0",
                 "--ctx: 0 is not a whole number from 1 to 1048576"},
        // Estimated far beyond this machine's memory: refused before the
        // kernel's out-of-memory killer would end it.
        BadInput{"--task charlm --ctx 100000", "Not enough memory"},
        BadInput{"--task charlm --ctx 200000 --depth 1 --d-model 8 "
                 "--heads 2",
                 "ctx 200000"}),
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

// Every comma-separated list flag of every command goes through one parser:
// an empty value and an empty element are the same one-line error naming
// the flag, with a non-zero exit and nothing written. `base` makes the rest
// of the command line valid.
struct ListFlag {
  std::string base;  // command and the flags it needs
  std::string flag;
};

void PrintTo(const ListFlag& f, std::ostream* os) {
  *os << f.base << " " << f.flag;
}

class ListFlagRejects : public ::testing::TestWithParam<ListFlag> {};

TEST_P(ListFlagRejects, EmptyValueAndEmptyElementAlike) {
  const ListFlag& f = GetParam();
  const fs::path dir = fresh_dir("list");
  const std::pair<std::string, std::string> cases[] = {
      {"''", f.flag + ": empty value"},
      {"x,,y", f.flag + ": empty element in 'x,,y'"},
      {"x,", f.flag + ": empty element in 'x,'"},
      {",x", f.flag + ": empty element in ',x'"}};
  for (const auto& [value, message] : cases)
    expect_rejected(f.base + " " + f.flag + " " + value, message, dir);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    EveryListFlag, ListFlagRejects,
    ::testing::Values(
        ListFlag{"--steps 2", "--opt"}, ListFlag{"--steps 2", "--twin"},
        ListFlag{"--steps 2", "--init-seed"},
        ListFlag{"--steps 2", "--twin-seed"},
        ListFlag{"--steps 2", "--noise-scale"},
        ListFlag{"--steps 2 --opt adam-p", "--p"},
        ListFlag{"verdict --steps 2", "--opt"},
        ListFlag{"verdict --steps 2 --opt adam-p", "--p"},
        ListFlag{"merge --steps 2", "--opt"},
        ListFlag{"merge --steps 2", "--twin"},
        ListFlag{"merge --steps 2", "--init-seed"},
        ListFlag{"merge --steps 2", "--twin-seed"},
        ListFlag{"merge --steps 2", "--noise-scale"},
        ListFlag{"merge --steps 2 --opt adam-p", "--p"},
        ListFlag{"merge --steps 2", "--merge-at"},
        ListFlag{"bench --quick", "--rows"}),
    [](const ::testing::TestParamInfo<ListFlag>& info) {
      const std::string& base = info.param.base;
      std::string name;  // "run_opt_0", "verdict_p_7"
      for (char c : (base.rfind("--", 0) == 0
                         ? std::string("run")
                         : base.substr(0, base.find(' '))) +
                        "_" + info.param.flag) {
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '_')
          name += c;
      }
      return name + "_" + std::to_string(info.index);
    });

// Options that take several values (files, a directory) refuse an empty
// one in the same words.
TEST(Cli, EmptyFileValuesAreRefusedLikeEmptyListValues) {
  const fs::path dir = fresh_dir("empty-files");
  for (const std::string args :
       {"table --aggregate ''", "plot ''", "merge --models ''"}) {
    expect_rejected(args, ": empty value", dir);
  }
  fs::remove_all(dir);
}

// Steps outside 1..1e9, including a number too large for 64 bits (which a
// plain conversion would clamp to 9223372036854775807 and run).
TEST(Cli, RejectsStepsOutsideTheirRangeNamingIt) {
  for (const char* steps :
       {"0", "-5", "99999999999999999999", "1000000001", "12.5", "ten"}) {
    const fs::path dir = fresh_dir("steps");
    Outcome o =
        twin_run(std::string("--steps ") + steps + " --out r.jsonl", dir);
    EXPECT_NE(o.code, 0);
    EXPECT_EQ(count_lines(o.err), 1) << o.err;
    EXPECT_NE(o.err.find(std::string("--steps: ") + steps +
                         " is not a whole number from 1 to 1000000000"),
              std::string::npos)
        << o.err;
    EXPECT_FALSE(fs::exists(dir / "r.jsonl"));
    fs::remove_all(dir);
  }
}

// The memory check comes first, and a user who knows better can turn it
// off: the run then goes on to its next check (here the corpus, missing).
TEST(Cli, MemoryCheckComesFirstAndCanBeOverridden) {
  const fs::path dir = fresh_dir("nomem");
  const std::string args =
      "--task charlm --ctx 100000 --data missing.txt --out r.jsonl";
  Outcome refused = twin_run(args, dir);
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.err.find("Not enough memory"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("GB"), std::string::npos) << refused.err;
  Outcome o = twin_run(args + " --no-memory-check", dir);
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("missing.txt"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("Not enough memory"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(dir / "r.jsonl"));
  fs::remove_all(dir);
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
    if (j["twin"] == "identity")
      EXPECT_EQ(j["curve"][1]["logit_drift"], 0.0);
    ++n;
  }
  EXPECT_EQ(n, 4);
  EXPECT_NE(o.out.find("A=I"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("step 100"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("4 pair(s): 4 run now (2 group(s), 6 models trained)"),
            std::string::npos)
      << o.out;
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
                        "--noise-scale", "1e-7", "--dtype", "--device", "W_Q",
                        "--list-optimizers", "Missing directories are created",
                        "[default: 1500 for mod<p>, 3000 for charlm]"}) {
    EXPECT_NE(o.out.find(s), std::string::npos) << s;
  }
  fs::remove_all(dir);
}

// The default run goes through the same engine as a table: killed after
// some pairs, the same command resumes and ends with every pair once, each
// record what an uninterrupted run writes.
TEST(Cli, AKilledDefaultRunResumes) {
  const fs::path dir = fresh_dir("resume-run");
  const std::string args =
      "--task mod11 --d-model 16 --heads 4 --mlp 64 --steps 200 --threads 1 "
      "--quiet --out r.jsonl";
  ASSERT_EQ(twin_run(args + " --no-share", dir).code, 0);  // reference
  fs::rename(dir / "r.jsonl", dir / "whole.jsonl");
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd = "cd '" + dir.string() + "' && exec '" +
                            TWIN_RUN_PATH + "' " + args +
                            " --no-share >/dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (count_lines(slurp(dir / "r.jsonl")) < 2 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "finished before the kill";
  const int before = count_lines(slurp(dir / "r.jsonl"));
  EXPECT_GE(before, 2);
  EXPECT_LT(before, 7);
  const Outcome o = twin_run(args, dir);  // resumes, sharing copy 1 now
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find(std::to_string(before) + " already recorded"),
            std::string::npos)
      << o.out;
  std::map<std::string, std::string> whole, resumed;
  for (auto* m : {&whole, &resumed}) {
    std::ifstream f(dir / (m == &whole ? "whole.jsonl" : "r.jsonl"));
    for (std::string line; std::getline(f, line);) {
      auto j = nlohmann::json::parse(line);
      const std::string key = j["key"];
      EXPECT_EQ(m->count(key), 0u) << "twice: " << key;
      (*m)[key] = twins::without_timing(j).dump();
    }
  }
  EXPECT_EQ(resumed, whole);
  fs::remove_all(dir);
}

// The named table of head merging runs from the table command (`table
// merge` must not be taken for the merge subcommand): nine pairs, each
// merged at steps 1 and the last.
TEST(MergeCommand, TheMergeTableRunsAsATable) {
  const fs::path dir = fresh_dir("merge-table");
  Outcome o = twin_run("table merge --steps 2 --quiet --out t.jsonl", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  std::ifstream f(dir / "t.jsonl");
  int n = 0;
  for (std::string line; std::getline(f, line); ++n) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_EQ(j["merge"].size(), 2u) << line;
    EXPECT_EQ(j["merge"][0]["step"], 1);
    EXPECT_EQ(j["merge"][1]["step"], 2);
  }
  EXPECT_EQ(n, 9);
  EXPECT_NE(slurp(dir / "t.md").find("barrier aligned"), std::string::npos);
  fs::remove_all(dir);
}

// A merge step that is not a number, or lies past the last step: one line
// naming it, a non-zero exit, and no results file.
TEST(MergeCommand, BadMergeStepsAreOneLineErrorsAndWriteNothing) {
  const fs::path dir = fresh_dir("merge-bad");
  for (const std::string bad : {"abc", "50", "5,,7"}) {
    const Outcome o = twin_run(
        "merge --opt sgd --steps 20 --merge-at " + bad + " --out m.jsonl", dir);
    EXPECT_NE(o.code, 0) << bad;
    EXPECT_EQ(count_lines(o.err), 1) << o.err;
    EXPECT_NE(o.err.find(bad == "5,,7" ? "--merge-at" : bad),
              std::string::npos)
        << o.err;
    EXPECT_FALSE(fs::exists(dir / "m.jsonl")) << bad;
  }
  fs::remove_all(dir);
}

// --plot draws the loss along lambda: one panel per optimizer, naive dashed
// and aligned solid, from a data block per pair whose lambda = 0 and 1 rows
// are the two copies' own losses (equal naive and aligned: alignment only
// moves copy 2 within its gauge orbit, and lambda = 0 is copy 1).
TEST(MergeCommand, PlotDrawsOnePanelPerOptimizerFromTheRecords) {
  const fs::path dir = fresh_dir("merge-plot");
  const Outcome o = twin_run(
      "merge --task mod11 --d-model 16 --heads 4 --mlp 64 --opt sgd,adam "
      "--steps 5 --plot --quiet --out p.jsonl",
      dir);
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string gp = slurp(dir / "p-merge.gp");
  EXPECT_NE(gp.find("multiplot layout 1,2"), std::string::npos) << gp;
  EXPECT_NE(gp.find("set title \"SGD\""), std::string::npos) << gp;
  EXPECT_NE(gp.find("set title \"Adam\""), std::string::npos) << gp;
  EXPECT_NE(gp.find("using 1:2 with linespoints dt 2"), std::string::npos);
  std::ifstream dat(dir / "p-merge.dat");
  std::vector<std::vector<double>> rows;
  for (std::string line; std::getline(dat, line);) {
    if (line.empty() || line[0] == '#')
      continue;
    std::istringstream in(line);
    double l, naive, aligned;
    in >> l >> naive >> aligned;
    rows.push_back({l, naive, aligned});
  }
  ASSERT_EQ(rows.size(), 22u);  // two pairs, lambda = 0, 0.1, ..., 1
  for (size_t b : {size_t(0), size_t(11)}) {
    EXPECT_EQ(rows[b][0], 0);
    EXPECT_EQ(rows[b][1], rows[b][2]);  // copy 1 itself
    EXPECT_EQ(rows[b + 10][0], 1);
    EXPECT_NEAR(rows[b + 10][1], rows[b + 10][2], 1e-6);  // copy 2, rotated
  }
  fs::remove_all(dir);
}

// `twin-run merge` trains pairs and measures merging at its steps; with
// --save-models the pairs' copies are kept, and `merge --models` measures
// them again without training: the same numbers, bit for bit.
TEST(MergeCommand, TrainsMeasuresSavesAndMeasuresSavedPairsAlike) {
  const fs::path dir = fresh_dir("merge");
  const std::string pairs =
      "--task mod11 --d-model 16 --heads 4 --mlp 64 --opt sgd --twin "
      "gauge,identity --steps 20 --quiet";
  Outcome o = twin_run(
      "merge " + pairs + " --merge-at 5,20 --save-models models --out m.jsonl",
      dir);
  ASSERT_EQ(o.code, 0) << o.err;
  std::map<std::string, nlohmann::json> trained;
  {
    std::ifstream f(dir / "m.jsonl");
    for (std::string line; std::getline(f, line);) {
      auto j = nlohmann::json::parse(line);
      ASSERT_EQ(j["merge"].size(), 2u);
      EXPECT_EQ(j["merge"][0]["step"], 5);
      EXPECT_EQ(j["merge"][1]["step"], 20);
      trained[j["twin"]] = j;
    }
  }
  ASSERT_EQ(trained.size(), 2u);
  EXPECT_EQ(trained["identity"]["merge"][1]["aligned"]["barrier"], 0.0);
  EXPECT_NE(slurp(dir / "m.md").find("barrier naive"), std::string::npos);
  int saved = 0;
  for (const auto& e : fs::directory_iterator(dir / "models")) {
    EXPECT_TRUE(fs::exists(e.path() / "spec.json")) << e.path();
    EXPECT_TRUE(fs::exists(e.path() / "model1.pt")) << e.path();
    ++saved;
  }
  EXPECT_EQ(saved, 2);

  o = twin_run("merge --models models --quiet --out s.jsonl", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  std::ifstream f(dir / "s.jsonl");
  int n = 0;
  for (std::string line; std::getline(f, line); ++n) {
    auto j = nlohmann::json::parse(line);
    ASSERT_EQ(j["merge"].size(), 1u);
    EXPECT_EQ(j["merge"][0], trained[j["twin"]]["merge"][1]) << j["twin"];
  }
  EXPECT_EQ(n, 2);
  // The same command again finds both recorded (one results writer: the
  // engine's, which resumes); the trained file holds the same pairs merged
  // at other steps, and refuses to mix them.
  o = twin_run("merge --models models --quiet --out s.jsonl", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(count_lines(slurp(dir / "s.jsonl")), 2);
  o = twin_run("merge --models models --quiet --out m.jsonl", dir);
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("other --merge-at steps"), std::string::npos) << o.err;
  EXPECT_EQ(count_lines(slurp(dir / "m.jsonl")), 2);

  // A missing directory, and a damaged saved model: one line naming it.
  o = twin_run("merge --models nowhere --out x.jsonl", dir);
  EXPECT_NE(o.code, 0);
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("nowhere"), std::string::npos) << o.err;
  fs::path victim;
  for (const auto& e : fs::directory_iterator(dir / "models")) {
    victim = e.path() / "model2.pt";
  }
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << "not a model";
  o = twin_run("merge --models models --out y.jsonl", dir);
  EXPECT_NE(o.code, 0);
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  // Named as the user named the directory (relative here).
  EXPECT_NE(o.err.find((fs::path("models") / victim.parent_path().filename() /
                        "model2.pt")
                           .string()),
            std::string::npos)
      << o.err;
  EXPECT_FALSE(fs::exists(dir / "x.jsonl"));
  EXPECT_FALSE(fs::exists(dir / "y.jsonl"));
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------
// docs/usage.md: its flag tables are generated from --help and checked
// against it here, so that they cannot drift.

// CLI11 2.3 (Debian 12) prints a default as "TEXT=42", 2.4 (trixie) as
// "TEXT [42]": the table takes the first form, so that it does not depend
// on the version. A range "in [1 - 1024]" is not a default.
std::string default_as_equals(std::string flag) {
  while (!flag.empty() && flag.back() == ' ')
    flag.pop_back();
  const size_t open = flag.rfind(" [");
  if (open == std::string::npos || flag.back() != ']' ||
      (open >= 2 && flag.compare(open - 2, 2, "in") == 0))
    return flag;
  return flag.substr(0, open) + "=" +
         flag.substr(open + 2, flag.size() - open - 3);
}

// The flag table of one command's --help: "| `--flag TYPE [default]` | what
// it does |" per option, in --help's order (CLI11 puts an option's
// description after two or more spaces, continuation lines indented).
std::string flag_table(const std::string& help) {
  std::string table = "| flag | what |\n|---|---|\n";
  std::vector<std::pair<std::string, std::string>> rows;
  bool options = false;
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != ' ') {
      options = line.rfind("Options:", 0) == 0;
      continue;
    }
    if (!options || line.find_first_not_of(' ') == std::string::npos) {
      continue;
    }
    const size_t indent = line.find_first_not_of(' ');
    if (indent == 2 && line[2] == '-') {
      const size_t gap = line.find("  ", 2);
      rows.emplace_back(line.substr(2, gap - 2),
                        gap == std::string::npos
                            ? std::string()
                            : line.substr(line.find_first_not_of(' ', gap)));
    } else if (!rows.empty()) {
      auto& what = rows.back().second;
      what += (what.empty() ? "" : " ") + line.substr(indent);
    }
  }
  for (auto [flag, what] : rows) {
    flag = default_as_equals(flag);
    std::string escaped;
    for (char c : what)
      escaped += c == '|' ? std::string("\\|") : std::string(1, c);
    table += "| `" + flag + "` | " + escaped + " |\n";
  }
  return table;
}

TEST(Usage, FlagTablesOfDocsUsageAreEveryCommandsHelp) {
  const fs::path usage = fs::path(TWINS_SOURCE_DIR) / "docs" / "usage.md";
  std::string doc = slurp(usage);
  ASSERT_FALSE(doc.empty()) << usage;
  const bool update = std::getenv("TWINS_UPDATE_USAGE") != nullptr;
  const fs::path dir = fresh_dir("usage");
  for (const std::string command :
       {"run", "table", "verdict", "merge", "plot", "bench", "census"}) {
    const Outcome o =
        twin_run((command == "run" ? "" : command + " ") + "--help", dir);
    ASSERT_EQ(o.code, 0) << command;
    const std::string want = flag_table(o.out);
    ASSERT_GT(count_lines(want), 3) << command << ": no options parsed";
    const std::string open = "<!-- flags: " + command + " -->\n";
    const std::string close = "<!-- /flags -->";
    const size_t a = doc.find(open);
    ASSERT_NE(a, std::string::npos) << "docs/usage.md lacks " << open;
    const size_t b = doc.find(close, a);
    ASSERT_NE(b, std::string::npos) << "docs/usage.md: unclosed " << open;
    const std::string have = doc.substr(a + open.size(), b - a - open.size());
    if (update) {
      doc.replace(a + open.size(), b - a - open.size(), want);
    } else {
      EXPECT_EQ(have, want)
          << "docs/usage.md's flags of '" << command
          << "' differ from --help; regenerate with TWINS_UPDATE_USAGE=1 "
             "./build/tests/test_cli --gtest_filter=Usage.*";
    }
  }
  if (update) {
    std::ofstream(usage, std::ios::binary | std::ios::trunc) << doc;
  }
  fs::remove_all(dir);
}

}  // namespace
