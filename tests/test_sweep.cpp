// sweep/ (and the reports it feeds): plans, named job sets, groups of pairs
// sharing copy 1, shards, --jobs / --threads, resume (after SIGKILL, onto a
// file of another schema or other hyperparameters), reading results back,
// the memory estimate, aggregation against known statistics, and the table
// and plot commands. Library tests run tiny pairs (mod11, d 16); the
// end-to-end tests run `twin-run table table3` at a few steps.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "binary_helpers.h"
#include "optim/registry.h"
#include "report/aggregate.h"
#include "report/plot.h"
#include "sweep/command.h"
#include "sweep/engine.h"
#include "sweep/estimate.h"
#include "sweep/plan.h"
#include "sweep/results.h"
#include "sweep/tables.h"
#include "twins/defaults.h"
#include "twins/pair.h"
#include "twins/record.h"
#include "twins/units.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// ===========================================================================
// Helpers

using namespace testing_helpers;  // tests/binary_helpers.h


// Table 3's seven pairs shrunk to mod11, 2 blocks, d 16, 4 heads.
std::vector<twins::PairSpec> tiny_table3(int64_t steps = 4) {
  sweep::TableOverrides o;
  o.steps = steps;
  std::vector<twins::PairSpec> pairs = sweep::make_table("table3", o).pairs;
  for (auto& p : pairs) {
    p.task = "mod11";
    p.d_model = 16;
    p.heads = 4;
    p.mlp = 64;
  }
  return pairs;
}

std::multiset<std::string> keys_in(const std::string& path) {
  std::multiset<std::string> keys;
  for (const auto& r : sweep::read_results(path).records) {
    keys.insert(r.key);
  }
  return keys;
}

std::vector<twins::PairResult> results_in(const std::vector<fs::path>& paths) {
  std::vector<sweep::ResultsFile> files;
  for (const auto& p : paths) {
    files.push_back(sweep::read_results(p.string()));
  }
  std::vector<twins::PairResult> out;
  for (const auto& r : sweep::merge_records(files)) {
    out.push_back(r.result);
  }
  return out;
}

// ===========================================================================
// Named tables

TEST(Tables, JobListsAreThePapersAndTheirKeysAreUnique) {
  const std::map<std::string, size_t> sizes = {{"table3", 7},
                                               {"multiseed", 17},
                                               {"table9-mod47", 18},
                                               {"table9-mod97-4L", 18},
                                               {"table9-mod97-6L", 18},
                                               {"table9-charlm", 18},
                                               {"zoo", 50},
                                               {"zoo-modern", 55},
                                               {"gauges", 147},
                                               {"dial", 6},
                                               {"merge", 9},
                                               {"merge-gauges", 20}};
  for (const auto& name : sweep::table_names()) {
    const sweep::Table t = sweep::make_table(name);
    ASSERT_TRUE(sizes.count(name)) << name;
    EXPECT_EQ(t.pairs.size(), sizes.at(name)) << name;
    EXPECT_TRUE(t.deviations.empty()) << name;
    std::set<std::string> keys;
    for (const auto& p : t.pairs) {
      keys.insert(p.key());
    }
    EXPECT_EQ(keys.size(), t.pairs.size()) << name;
  }
  const sweep::Table ms = sweep::make_table("multiseed");
  int adam_gauge = 0, muon_noise = 0;
  for (const auto& p : ms.pairs) {
    EXPECT_EQ(p.dtype, torch::kFloat);
    EXPECT_EQ(p.steps, 1500);
    adam_gauge += p.opt == "adam" && p.twin == twins::TwinKind::kGauge;
    muon_noise += p.opt == "muon" && p.twin == twins::TwinKind::kNoise;
  }
  EXPECT_EQ(adam_gauge, 6);
  EXPECT_EQ(muon_noise, 2);
  const sweep::Table t9 = sweep::make_table("table9-mod97-6L");
  EXPECT_EQ(t9.pairs.front().dtype, torch::kDouble);
  EXPECT_EQ(t9.pairs.front().d_model, 256);
  EXPECT_EQ(t9.pairs.front().depth, 6);
  EXPECT_EQ(t9.pairs.front().steps, 2000);
}

TEST(Tables, OverridesAreNamedAsDeviations) {
  sweep::TableOverrides o;
  o.steps = 50;
  o.dtype = "float64";
  const sweep::Table t = sweep::make_table("table3", o);
  ASSERT_EQ(t.deviations.size(), 2u);
  EXPECT_NE(t.deviations[0].find("steps 50"), std::string::npos);
  EXPECT_EQ(t.pairs.front().steps, 50);
  // overrides_of rebuilds the same job list from a record's spec.
  const sweep::TableOverrides back =
      sweep::overrides_of("table3", t.pairs.front());
  EXPECT_EQ(sweep::make_table("table3", back).pairs.front().key(),
            t.pairs.front().key());
}

TEST(Tables, UnknownNameIsRejectedNamingIt) {
  try {
    sweep::make_table("table4");
    FAIL() << "no throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'table4'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("multiseed"), std::string::npos);
  }
}

// ===========================================================================
// Shards

TEST(Shards, ParseAcceptsIOfNAndRejectsTheRest) {
  const sweep::Shard s = sweep::parse_shard("2/5");
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 5);
  for (const char* bad : {"3/2", "0/0", "0/3", "1/0", "a/b", "1/", "/2", "2",
                          "1/2/3", "-1/2", "", " 1/2"}) {
    try {
      sweep::parse_shard(bad);
      ADD_FAILURE() << bad;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Shards, UnionIsTheJobListExactlyOnce) {
  const auto all = sweep::make_table("multiseed").pairs;
  for (int n : {1, 2, 3, 5, 17, 20}) {
    std::multiset<std::string> seen;
    for (int i = 1; i <= n; ++i) {
      const auto part = sweep::shard_of(all, {i, n});
      // Deterministic: the same shard twice is the same list.
      const auto again = sweep::shard_of(all, {i, n});
      ASSERT_EQ(part.size(), again.size());
      for (size_t k = 0; k < part.size(); ++k) {
        EXPECT_EQ(part[k].key(), again[k].key());
      }
      for (const auto& p : part) {
        seen.insert(p.key());
      }
    }
    std::multiset<std::string> want;
    for (const auto& p : all) {
      want.insert(p.key());
    }
    EXPECT_EQ(seen, want) << "N = " << n;
  }
}

// ===========================================================================
// Results read back

// A record as docs/output-format.md describes it, written by hand (not by
// the codec): reading it gives the values it spells, null as NaN, and
// writing it back gives the same record, its key included.
TEST(Results, HandWrittenRecordReadsAndWritesBackTheSame) {
  const std::string key =
      "mod11|adam|gauge|init=42|twin_seed=777|noise=-|protocol=paper-cpu|"
      "steps=3|lr=0.001|float32|cpu|L2-d16-h2-m64|data=42|"
      "hp=beta1=0.9,eps=1e-08|merge=3|schema=3";
  const json hand = json::parse(R"({
    "schema": 3, "key": ")" + key + R"(", "task": "mod11", "opt": "adam",
    "protocol": "paper-cpu",
    "hparams": {"beta1": 0.9, "eps": 1e-08}, "twin": "gauge",
    "init_seed": 42, "twin_seed": 777, "noise_scale": null, "lr": 0.001,
    "steps": 3, "dtype": "float32", "device": "cpu", "data_seed": 42,
    "model": {"depth": 2, "d_model": 16, "heads": 2, "mlp": 64},
    "merge_at": [3],
    "curve": [
      {"step": 0, "logit_drift": 1.5e-07, "qk_drift_mean": 2e-07,
       "qk_drift_max": 3e-07, "val_loss": [2.4, 2.4], "val_acc": [0.1, 0.1]},
      {"step": 3, "logit_drift": 0.25, "qk_drift_mean": 0.125,
       "qk_drift_max": null, "val_loss": [2.2, 2.3], "val_acc": [0.2, 0.3],
       "train_loss": [2.25, null]}],
    "qk_drift_per_head": [0.1, 0.2, 0.3, null],
    "val_acc": [0.2, 0.3], "val_loss": [2.2, 2.3], "train_loss": [2.25, null],
    "status": "ok", "diverged_step": null,
    "merge": [{"step": 3, "lambda": [0, 0.5, 1],
      "naive": {"val_loss": [2.2, 2.5, 2.3], "val_acc": [0.2, 0.1, 0.3],
                "barrier": 0.25},
      "aligned": {"val_loss": [2.2, null, 2.3], "val_acc": [0.2, 0.2, 0.3],
                  "barrier": null},
      "residual_per_head": [0.5, 0.25, 0.125, 0.0625],
      "residual_mean": 0.234375, "residual_max": 0.5,
      "unaligned_residual_mean": 1.0, "unaligned_residual_max": 1.5,
      "rotation_error_per_head": [], "rotation_error_mean": null,
      "rotation_error_max": null, "qk_drift_mean": 0.125,
      "qk_drift_max": 0.25}],
    "wall_s": 1.5, "group_pairs": 1,
    "threads": {"torch": 1, "openblas": 1}, "torch_version": "1.13.0"})");
  const twins::PairResult r = twins::from_json(hand);
  EXPECT_EQ(r.spec.key(), key);
  EXPECT_EQ(r.spec.heads, 2);
  EXPECT_EQ(r.spec.merge_at, std::vector<int64_t>{3});
  EXPECT_EQ(r.spec.hparams.size(), 2u);
  ASSERT_EQ(r.curve.size(), 2u);
  EXPECT_TRUE(std::isnan(r.curve[0].train_loss[0]));  // absent at step 0
  EXPECT_EQ(r.curve[1].train_loss[0], 2.25);
  EXPECT_TRUE(std::isnan(r.curve[1].train_loss[1]));  // null
  EXPECT_TRUE(std::isnan(r.curve[1].qk_drift_max));
  EXPECT_EQ(r.curve[1].val_acc[1], 0.3);
  EXPECT_TRUE(std::isnan(r.qk_per_head[3]));
  ASSERT_EQ(r.merges.size(), 1u);
  EXPECT_EQ(r.merges[0].naive.barrier, 0.25);
  EXPECT_TRUE(std::isnan(r.merges[0].aligned.barrier));
  EXPECT_TRUE(std::isnan(r.merges[0].aligned.loss[1]));
  EXPECT_EQ(r.merges[0].alignment.residual_mean, 0.234375);
  EXPECT_TRUE(r.merges[0].alignment.rotation_error.empty());
  EXPECT_EQ(r.torch_version, "1.13.0");
  // Back: the same record but for the fields that describe the run
  // (threads are this process's).
  EXPECT_EQ(twins::without_timing(twins::to_json(r)),
            twins::without_timing(hand));
  // A record of schema 2 names no protocol: it followed the project's own
  // (docs/output-format.md), and its key is not a schema-3 key.
  json old = hand;
  old.erase("protocol");
  old["schema"] = 2;
  const twins::PairResult o = twins::from_json(old);
  EXPECT_EQ(o.spec.protocol, twins::Protocol::kTwins);
  EXPECT_NE(o.spec.key(), key);
}

TEST(Results, TruncatedLastLineIsIgnoredAndAMalformedMiddleLineIsNot) {
  const fs::path dir = fresh_dir("read");
  const json rec = twins::to_json(twins::run_pair(tiny_table3(2)[0]));
  const std::string line = rec.dump() + "\n";
  spit(dir / "ok.jsonl", line + line.substr(0, line.size() / 2));
  const sweep::ResultsFile f = sweep::read_results((dir / "ok.jsonl").string());
  EXPECT_EQ(f.records.size(), 1u);
  EXPECT_TRUE(f.truncated_tail);
  EXPECT_EQ(f.whole_bytes, line.size());

  spit(dir / "bad.jsonl", line + "{\"key\": oops\n" + line);
  try {
    sweep::read_results((dir / "bad.jsonl").string());
    ADD_FAILURE() << "no throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos)
        << e.what();
  }
  try {
    sweep::read_results((dir / "missing.jsonl").string());
    ADD_FAILURE() << "no throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
  }
  fs::remove_all(dir);
}

// ===========================================================================
// Plans

TEST(Plan, DefaultIsTheSevenTable3Pairs) {
  sweep::PlanRequest req;
  auto specs = sweep::expand(req);
  ASSERT_EQ(specs.size(), 7u);
  EXPECT_EQ(specs[0].opt, "adam");
  EXPECT_EQ(specs[0].twin_seed, 777u);
  EXPECT_EQ(specs[2].twin, twins::TwinKind::kNoise);
  EXPECT_EQ(specs[2].twin_seed, 888u);
  EXPECT_EQ(specs[3].lr, 0.5);  // sgd's mod learning rate
  EXPECT_EQ(specs[0].steps, 1500);
  EXPECT_EQ(specs[0].dtype, torch::kFloat);
  // Every pair carries its optimizer's hyperparameters, as registered.
  EXPECT_EQ(specs[0].hparams, optim::find_optimizer("adam").hparams);
  EXPECT_FALSE(specs[5].hparams.empty());  // muon
}

TEST(Plan, ListsExpandToTheirCartesianProduct) {
  sweep::PlanRequest req;
  req.opts = {"adam", "sgd"};
  req.twins = {"gauge", "identity", "noise"};
  req.init_seeds = {1, 2};
  req.twin_seeds = {5, 6, 7};
  req.noise_scales = {1e-7, 1e-5};
  auto specs = sweep::expand(req);
  // per opt and init seed: gauge 3 seeds + identity 1 + noise 3 x 2
  EXPECT_EQ(specs.size(), 2u * 2u * (3u + 1u + 6u));
  std::set<std::string> keys;
  for (const auto& s : specs)
    keys.insert(s.key());
  EXPECT_EQ(keys.size(), specs.size());
}

// One source of defaults: the plan, the tables and the benchmark's pair
// all take the task's shape and the table's learning rates.
TEST(Plan, DefaultsComeFromTheTaskAndTheLearningRateTable) {
  for (const char* task : {"mod47", "charlm"}) {
    sweep::PlanRequest req;
    req.task = task;
    req.opts = {"sgd"};
    const twins::PairSpec s = sweep::expand(req).front();
    const twins::PairSpec d = twins::default_spec(task, "sgd");
    EXPECT_EQ(s.key(), d.key()) << task;
    EXPECT_EQ(s.steps, data::task_defaults(task).steps);
    EXPECT_EQ(s.lr, twins::default_lr("sgd", task));
  }
  EXPECT_EQ(twins::default_spec("charlm", "adam").steps, 3000);
  EXPECT_EQ(twins::default_spec("mod47", "adam").mlp, 256);
  EXPECT_THROW(twins::default_lr("no-such-rule", "mod47"), c10::Error);
}

// ===========================================================================
// Groups

// The counts of distinct models: each copy 1 once per group, plus a twin
// per pair.
TEST(Groups, TablesTrainEachDistinctModelOnce) {
  const std::map<std::string, std::pair<size_t, size_t>> want = {
      {"table3", {4, 11}},
      {"zoo", {10, 60}},
      {"multiseed", {8, 25}},
      {"table9-mod47", {5, 23}},
      {"dial", {6, 12}}};
  for (const auto& [name, counts] : want) {
    const auto pairs = sweep::make_table(name).pairs;
    const auto groups = sweep::group_pairs(pairs);
    size_t models = 0, listed = 0;
    for (const auto& g : groups) {
      models += g.size() + 1;
      listed += g.size();
      for (const auto& p : g) {
        EXPECT_EQ(p.reference_key(), g.front().reference_key()) << name;
      }
    }
    EXPECT_EQ(groups.size(), counts.first) << name;
    EXPECT_EQ(models, counts.second) << name;
    EXPECT_EQ(listed, pairs.size()) << name;
    // Without sharing every pair trains its own copy 1.
    EXPECT_EQ(sweep::group_pairs(pairs, false).size(), pairs.size()) << name;
  }
  // A cap on the group size splits a group, never mixes two.
  const auto capped =
      sweep::group_pairs(sweep::make_table("zoo").pairs, true, 3);
  EXPECT_EQ(capped.size(), 20u);  // each optimizer's 4 twins: 3 + 1
}

// ===========================================================================
// --jobs, --threads, sharing and resume (library)

sweep::EngineOptions quiet_options(const std::string& path) {
  sweep::EngineOptions o;
  o.results_path = path;
  o.quiet = true;
  return o;
}

std::vector<json> records_without_timing(const std::string& path) {
  std::vector<json> out;
  for (const auto& r : sweep::read_results(path).records) {
    out.push_back(twins::without_timing(r.json));
  }
  return out;
}

// What must not depend on scheduling: every field but the timing ones
// (wall_s, threads, group_pairs), compared as JSON, i.e. bitwise for every
// number, whatever --jobs, --threads and sharing are.
TEST(Jobs, RecordsAreBitwiseTheSameWhateverTheScheduling) {
  const fs::path dir = fresh_dir("jobs");
  const auto pairs = tiny_table3(6);
  std::map<std::string, std::vector<json>> by_run;
  for (int jobs : {1, 2, 3}) {
    for (int threads : {1, 2}) {
      for (bool share : {true, false}) {
        const std::string name =
            fmt::format("j{}t{}{}", jobs, threads, share ? "s" : "n");
        auto o = quiet_options((dir / (name + ".jsonl")).string());
        o.jobs = jobs;
        o.threads = threads;
        o.share = share;
        const auto run = sweep::run_sweep(pairs, o);
        EXPECT_EQ(run.models, share ? 11u : 14u) << name;
        for (const auto& r : run.records) {  // job-list order
          by_run[name].push_back(twins::without_timing(r.json));
        }
      }
    }
  }
  const auto& first = by_run["j1t1n"];
  ASSERT_EQ(first.size(), pairs.size());
  for (const auto& [name, records] : by_run) {
    ASSERT_EQ(records.size(), pairs.size()) << name;
    for (size_t i = 0; i < pairs.size(); ++i) {
      EXPECT_EQ(records[i], first[i]) << name << ", " << pairs[i].key();
    }
  }
  // Not vacuous: Adam's gauge twins did move apart.
  EXPECT_GT(first[0]["curve"][1]["logit_drift"].get<double>(), 1e-5);
  fs::remove_all(dir);
}

TEST(Jobs, ZeroJobsOrThreadsIsRejected) {
  auto o = quiet_options("/nonexistent/never.jsonl");
  o.jobs = 0;
  EXPECT_THROW(sweep::run_sweep(tiny_table3(1), o), c10::Error);
  o.jobs = 1;
  o.threads = 0;
  EXPECT_THROW(sweep::run_sweep(tiny_table3(1), o), c10::Error);
  EXPECT_FALSE(fs::exists("/nonexistent/never.jsonl"));
}

TEST(Resume, SkipsRecordedPairsAndRerunsATruncatedOne) {
  const fs::path dir = fresh_dir("resume");
  const std::string path = (dir / "r.jsonl").string();
  const auto pairs = tiny_table3(3);
  auto o = quiet_options(path);
  o.table = "table3";
  // First run: only three of the pairs (adam's gauge, identity and noise).
  auto first = sweep::run_sweep({pairs.begin(), pairs.begin() + 3}, o);
  EXPECT_EQ(first.ran, 3u);
  EXPECT_EQ(first.models, 4u);  // one copy 1 and three twins
  // A crash mid-write: half of a fourth record.
  const std::string whole = slurp(path);
  const std::string line = whole.substr(0, whole.find('\n') + 1);
  {
    std::ofstream f(path, std::ios::app | std::ios::binary);
    f << line.substr(0, line.size() / 3);
  }
  o.jobs = 2;
  const auto second = sweep::run_sweep(pairs, o);
  EXPECT_EQ(second.already, 3u);
  EXPECT_EQ(second.ran, pairs.size() - 3);
  EXPECT_TRUE(second.dropped_truncated);
  const sweep::ResultsFile f = sweep::read_results(path);
  EXPECT_FALSE(f.truncated_tail);
  std::multiset<std::string> want;
  for (const auto& p : pairs)
    want.insert(p.key());
  EXPECT_EQ(keys_in(path), want);
  for (const auto& r : f.records)
    EXPECT_EQ(r.json["table"], "table3");
  // Third run: nothing to do, nothing written.
  const std::string done = slurp(path);
  const auto third = sweep::run_sweep(pairs, o);
  EXPECT_EQ(third.ran, 0u);
  EXPECT_EQ(third.already, pairs.size());
  EXPECT_EQ(third.records.size(), pairs.size());
  EXPECT_EQ(slurp(path), done);
  fs::remove_all(dir);
}

// A group whose pairs are partly recorded trains its copy 1 and only the
// missing twins, and their records are what a whole run gives.
TEST(Resume, PartlyRecordedGroupTrainsOnlyTheMissingTwins) {
  const fs::path dir = fresh_dir("resume-group");
  const auto pairs = tiny_table3(4);
  const auto whole =
      sweep::run_sweep(pairs, quiet_options((dir / "w.jsonl").string()));
  const std::string path = (dir / "p.jsonl").string();
  sweep::run_sweep({pairs[0]}, quiet_options(path));  // adam gauge alone
  const auto rest = sweep::run_sweep(pairs, quiet_options(path));
  EXPECT_EQ(rest.already, 1u);
  EXPECT_EQ(rest.models, 4u + 6u);  // adam: copy 1 + 2 twins; 3 more groups
  ASSERT_EQ(rest.records.size(), whole.records.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_EQ(twins::without_timing(rest.records[i].json),
              twins::without_timing(whole.records[i].json))
        << pairs[i].key();
  }
  fs::remove_all(dir);
}

// Resuming onto records of another schema or of other hyperparameters for
// the same pair stops with one line naming the difference, and writes
// nothing.
TEST(Resume, AnotherSchemaOrOtherHyperparametersIsAnError) {
  const fs::path dir = fresh_dir("resume-mismatch");
  const std::string path = (dir / "r.jsonl").string();
  const auto pairs = tiny_table3(2);
  sweep::run_sweep({pairs[0]}, quiet_options(path));
  const std::string written = slurp(path);

  // The same pair with another beta2.
  auto changed = pairs;
  for (auto& [name, value] : changed[0].hparams) {
    if (name == "beta2")
      value = 0.99;
  }
  try {
    sweep::run_sweep(changed, quiet_options(path));
    ADD_FAILURE() << "no throw";
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("beta2 0.999 vs 0.99"), std::string::npos) << what;
    EXPECT_NE(what.find("line 1"), std::string::npos) << what;
  }
  EXPECT_EQ(slurp(path), written);

  // A record of schema 1: no schema field, no hyperparameters.
  json old = json::parse(written);
  old.erase("schema");
  old.erase("hparams");
  old["key"] = pairs[0].pair_id();
  spit(path, old.dump() + "\n");
  try {
    sweep::run_sweep(pairs, quiet_options(path));
    ADD_FAILURE() << "no throw";
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("record schema 1"), std::string::npos) << what;
  }
  EXPECT_EQ(count_lines(slurp(path)), 1);
  fs::remove_all(dir);
}

TEST(Memory, AnImpossibleShapeIsRefusedWithTheEstimate) {
  sweep::PlanRequest req;
  req.task = "charlm";
  req.opts = {"adam"};
  req.ctx = 100000;
  const auto pairs = sweep::expand(req);
  const auto m = sweep::estimate_memory(pairs.front());
  EXPECT_GT(m.total(2, 1), sweep::machine_memory_bytes());
  try {
    sweep::check_memory(sweep::group_pairs(pairs), 1, 1);
    ADD_FAILURE() << "no throw";
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("Not enough memory"), std::string::npos) << what;
    EXPECT_NE(what.find("ctx 100000"), std::string::npos) << what;
    EXPECT_NE(what.find("--no-memory-check"), std::string::npos) << what;
  }
  // The default char-LM pair fits, and more twins need more memory.
  const auto fine = sweep::expand([] {
    sweep::PlanRequest r;
    r.task = "charlm";
    return r;
  }());
  EXPECT_NO_THROW(sweep::check_memory(sweep::group_pairs(fine), 2, 2));
  const auto d = sweep::estimate_memory(fine.front());
  EXPECT_LT(d.total(2, 2), d.total(5, 2));
  EXPECT_GT(d.per_model, 4 * 4.0e6 * 4);  // > 4 buffers of ~4M float32s
}

// The memory a job may use is its cgroup's limit where one is set (SLURM's
// --mem is one): v1 and v2 layouts as SLURM's cgroup plugins make them,
// the lowest limit of the cgroup and its ancestors winning, "max" and v1's
// "unlimited" meaning none.
TEST(Memory, ACgroupLimitIsTheJobsMemory) {
  const fs::path top = fresh_dir("cgroup");
  const fs::path root = top / "fs";  // the cgroup file systems' root
  auto limit = [&](const std::string& dir, const std::string& file,
                   const std::string& value) {
    fs::create_directories(root / dir);
    spit(root / dir / file, value + "\n");
  };
  const std::string unlimited_v1 = "9223372036854771712";
  // cgroup v1: the job's cgroup holds the limit, its step's and the root's
  // are unlimited.
  limit("memory", "memory.limit_in_bytes", unlimited_v1);
  limit("memory/slurm/uid_0/job_5", "memory.limit_in_bytes", "4294967296");
  limit("memory/slurm/uid_0/job_5/step_batch", "memory.limit_in_bytes",
        unlimited_v1);
  EXPECT_EQ(sweep::cgroup_memory_limit_bytes(
                "5:cpuacct,memory:/slurm/uid_0/job_5/step_batch\n"
                "1:cpu:/slurm/uid_0/job_5/step_batch\n",
                root.string()),
            4294967296.0);
  // cgroup v2: a lower limit on the task than on the job wins; "max" is none.
  limit("", "memory.max", "max");
  limit("system.slice/slurmstepd.scope/job_7", "memory.max", "2147483648");
  limit("system.slice/slurmstepd.scope/job_7/step_0/user/task_0", "memory.max",
        "1073741824");
  EXPECT_EQ(sweep::cgroup_memory_limit_bytes(
                "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n",
                root.string()),
            1073741824.0);
  EXPECT_EQ(sweep::cgroup_memory_limit_bytes(
                "0::/system.slice/slurmstepd.scope/job_7/step_0\n",
                root.string()),
            2147483648.0);
  // No limit anywhere, no such cgroup, no memory controller, malformed text.
  EXPECT_EQ(sweep::cgroup_memory_limit_bytes("0::/\n", root.string()), 0);
  EXPECT_EQ(sweep::cgroup_memory_limit_bytes("4:memory:/\n", root.string()), 0);
  EXPECT_EQ(sweep::cgroup_memory_limit_bytes("0::/not/there\n4:memory:/x\n",
                                             root.string()),
            0);
  EXPECT_EQ(sweep::cgroup_memory_limit_bytes("3:cpu:/slurm/uid_0/job_5\n",
                                             root.string()),
            0);
  EXPECT_EQ(sweep::cgroup_memory_limit_bytes("garbage", root.string()), 0);
  // A path climbing out of the root reads nothing outside it.
  limit("..", "memory.max", "12345");
  EXPECT_EQ(sweep::cgroup_memory_limit_bytes("0::/../..\n", root.string()), 0);
  fs::remove_all(top);
}

// The refusal names the budget and where it comes from; this process's
// budget is some memory, never more than the machine's.
TEST(Memory, TheRefusalNamesTheBudgetAndItsSource) {
  const auto pairs = sweep::expand([] {
    sweep::PlanRequest r;
    r.task = "charlm";
    r.opts = {"adam"};
    return r;
  }());
  const auto groups = sweep::group_pairs(pairs);
  auto refusal = [&](double budget, bool capped) -> std::string {
    try {
      sweep::check_memory(groups, 1, 1, budget, capped);
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    }
    return "";
  };
  const std::string by_cgroup = refusal(1e9, true);
  EXPECT_NE(by_cgroup.find("cgroup (a job's --mem, a container's limit) "
                           "allows 1.0 GB"),
            std::string::npos)
      << by_cgroup;
  const std::string by_machine = refusal(1e9, false);
  EXPECT_NE(by_machine.find("this machine has 1.0 GB"), std::string::npos)
      << by_machine;
  EXPECT_EQ(refusal(1e15, true), "");  // fits
  EXPECT_EQ(refusal(0, true), "");     // unknown: not checked
  const double physical =
      double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  bool capped = true;
  const double mine = sweep::machine_memory_bytes(&capped);
  EXPECT_GT(mine, 0);
  EXPECT_LE(mine, physical);
  EXPECT_EQ(capped, mine < physical);
}

TEST(Shards, MergedShardsAggregateLikeOneRun) {
  const fs::path dir = fresh_dir("shards");
  const auto pairs = tiny_table3(3);
  sweep::run_sweep(pairs, quiet_options((dir / "full.jsonl").string()));
  std::string merged;
  for (int i = 1; i <= 3; ++i) {
    const std::string path = (dir / fmt::format("s{}.jsonl", i)).string();
    sweep::run_sweep(sweep::shard_of(pairs, {i, 3}), quiet_options(path));
    merged += slurp(path);
  }
  spit(dir / "merged.jsonl", merged);
  const report::Expected t{"tiny", "tiny", {}, pairs};
  const auto single = report::aggregate(report::parse_layout("table3"),
                                        results_in({dir / "full.jsonl"}), {t});
  const auto sharded = report::aggregate(
      report::parse_layout("table3"), results_in({dir / "merged.jsonl"}), {t});
  EXPECT_EQ(report::to_csv(sharded), report::to_csv(single));
  EXPECT_EQ(report::to_markdown(sharded), report::to_markdown(single));
  EXPECT_NE(report::to_csv(single).find("table3,Adam gauge,step 1,1,"),
            std::string::npos)
      << report::to_csv(single);
  fs::remove_all(dir);
}

// Shards are sets of groups: no copy 1 is trained on two machines.
TEST(Shards, EveryGroupIsInExactlyOneShard) {
  const auto all = sweep::make_table("zoo").pairs;
  for (int n : {2, 3, 7}) {
    std::map<std::string, std::set<int>> shards_of_reference;
    for (int i = 1; i <= n; ++i) {
      for (const auto& p : sweep::shard_of(all, {i, n})) {
        shards_of_reference[p.reference_key()].insert(i);
      }
    }
    EXPECT_EQ(shards_of_reference.size(), 10u);
    for (const auto& [ref, shards] : shards_of_reference) {
      EXPECT_EQ(shards.size(), 1u) << ref << " in " << n << " shards";
    }
  }
}

// Only the records of a table's job list enter its aggregate; the others
// (another dtype here) are named as left out.
TEST(Aggregate, RecordsOutsideTheJobListAreLeftOutAndNamed) {
  const fs::path dir = fresh_dir("leftout");
  const auto pairs = tiny_table3(2);
  auto other = pairs;
  for (auto& p : other) {
    p.dtype = torch::kDouble;
    p.protocol = twins::Protocol::kTwins;  // protocol §2a
  }
  sweep::run_sweep(pairs, quiet_options((dir / "a.jsonl").string()));
  sweep::run_sweep(other, quiet_options((dir / "a.jsonl").string()));
  const auto results = results_in({dir / "a.jsonl"});
  ASSERT_EQ(results.size(), 14u);
  const report::Expected t{"tiny", "tiny", {}, pairs};
  const auto mixed =
      report::aggregate(report::parse_layout("table3"), results, {t});
  const auto clean =
      report::aggregate(report::parse_layout("table3"),
                        {results.begin(), results.begin() + 7}, {t});
  EXPECT_EQ(report::to_csv(mixed), report::to_csv(clean));
  const std::string md = report::to_markdown(mixed);
  EXPECT_NE(md.find("7 record(s) left out, not in the job list of tiny"),
            std::string::npos)
      << md;
  fs::remove_all(dir);
}

// ===========================================================================
// Aggregation of a hand-made file

struct Point {
  int64_t step;
  double drift;
};

// One record with hand-picked drifts (2 blocks x 4 heads).
std::string record_line(const std::string& opt, const std::string& twin,
                        uint64_t init, uint64_t seed, double scale,
                        const std::vector<Point>& curve,
                        std::array<double, 2> acc = {0.4, 0.4},
                        const std::string& dtype = "float32") {
  twins::PairSpec s;
  s.task = "mod47";
  s.opt = opt;
  s.twin = twins::parse_twin_kind(twin);
  s.init_seed = init;
  s.twin_seed = seed;
  s.noise_scale = scale;
  s.steps = curve.back().step;
  s.dtype = twins::parse_dtype(dtype);
  json j;
  j["key"] = s.key();
  j["task"] = s.task;
  j["opt"] = opt;
  j["twin"] = twin;
  j["init_seed"] = init;
  j["twin_seed"] = s.uses_twin_seed() ? json(seed) : json(nullptr);
  j["noise_scale"] = s.uses_noise_scale() ? json(scale) : json(nullptr);
  j["lr"] = 1e-3;
  j["steps"] = s.steps;
  j["dtype"] = dtype;
  j["device"] = "cpu";
  j["data_seed"] = 42;
  j["model"] = {{"depth", 2}, {"d_model", 64}, {"heads", 4}, {"mlp", 256}};
  j["curve"] = json::array();
  for (const auto& p : curve) {
    j["curve"].push_back({{"step", p.step},
                          {"logit_drift", p.drift},
                          {"qk_drift_mean", p.drift},
                          {"qk_drift_max", p.drift},
                          {"val_loss", {1.0, 1.0}},
                          {"val_acc", {acc[0], acc[1]}}});
  }
  const double last = curve.back().drift;
  j["qk_drift_per_head"] = {last, last, last, last, last, last, last, last};
  j["val_acc"] = {acc[0], acc[1]};
  j["val_loss"] = {1.0, 1.0};
  j["train_loss"] = {1.0, 1.0};
  j["status"] = "ok";
  j["diverged_step"] = nullptr;
  j["wall_s"] = 1.0;
  return j.dump() + "\n";
}

// Drifts at steps 0, 1, 100, 300, 600, 1000 and 1500.
std::vector<Point> curve(double s1, double s100, double s300, double s600,
                         double s1000, double last, double s0 = 1.8e-7) {
  return {{0, s0},     {1, s1},       {100, s100}, {300, s300},
          {600, s600}, {1000, s1000}, {1500, last}};
}

std::string hand_made_jsonl(const std::string& dtype = "float32") {
  std::string f;
  f += record_line("adam", "gauge", 42, 777, 0, curve(3e-3, 0.6, 0.7, 0.7, 0.7, 0.7),
              {0.40, 0.41}, dtype);
  f += record_line("adam", "gauge", 42, 999, 0, curve(5e-3, 0.6, 0.8, 0.8, 0.8, 0.8),
              {0.40, 0.40}, dtype);
  f += record_line("adam", "gauge", 123, 777, 0,
              curve(4e-3, 0.6, 0.75, 0.75, 0.75, 0.75), {0.40, 0.395}, dtype);
  f += record_line("adam", "identity", 42, 0, 0, curve(0, 0, 0, 0, 0, 0, 0),
              {0.4, 0.4}, dtype);
  f += record_line("adam", "noise", 42, 888, 1e-7,
              curve(3e-7, 1e-5, 1e-5, 1e-5, 1e-5, 1e-5), {0.4, 0.4}, dtype);
  f += record_line("adam", "noise", 42, 888, 1e-5,
              curve(2e-5, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3), {0.4, 0.4}, dtype);
  f += record_line("sgd", "gauge", 42, 777, 0,
              curve(2e-7, 1e-5, 1e-5, 1e-5, 1e-5, 2e-5), {0.4, 0.4}, dtype);
  f += record_line("sgd", "gauge", 123, 999, 0,
              curve(5e-7, 1e-5, 1e-5, 1e-5, 1e-5, 3e-4), {0.4, 0.4}, dtype);
  f += record_line("scalar-adam", "gauge", 42, 777, 0,
              curve(1.6e-7, 4e-6, 4e-6, 4e-6, 4e-6, 4e-6), {0.4, 0.4}, dtype);
  // Muon init 42: gauge / noise = 1/100, 10, 1, 10, 1 from step 100 on
  // (step 1 must not count; step 100 counts, as in the paper's
  // attention_gauge_multiseed.py): the chaos metric is
  // (2 + 1 + 0 + 1 + 0) / 5 = 0.8 decades.
  f += record_line("muon", "gauge", 42, 777, 0,
              curve(2e-7, 1e-2, 0.1, 0.2, 0.5, 0.8), {0.4, 0.4}, dtype);
  f += record_line("muon", "noise", 42, 888, 1e-7,
              curve(3e-7, 1.0, 0.01, 0.2, 0.05, 0.8), {0.4, 0.4}, dtype);
  return f;
}

double lo(const report::Aggregate& a, const std::string& section,
          const std::string& row, const std::string& column) {
  const report::Figure* f = report::find_figure(a, section, row, column);
  EXPECT_TRUE(f) << section << " / " << row << " / " << column;
  return f ? f->lo : std::nan("");
}
double hi(const report::Aggregate& a, const std::string& section,
          const std::string& row, const std::string& column) {
  const report::Figure* f = report::find_figure(a, section, row, column);
  return f ? f->hi : std::nan("");
}

TEST(Aggregate, MultiSeedStatisticsOfAHandMadeFile) {
  const fs::path dir = fresh_dir("agg");
  spit(dir / "h.jsonl", hand_made_jsonl());
  const auto results = results_in({dir / "h.jsonl"});
  ASSERT_EQ(results.size(), 11u);
  const auto a = report::aggregate(report::parse_layout("multiseed"), results);
  const std::string m = "multiseed", c = "measured";
  EXPECT_DOUBLE_EQ(lo(a, m, "Adam gauge, step-1 drift (min–max)", c), 3e-3);
  EXPECT_DOUBLE_EQ(hi(a, m, "Adam gauge, step-1 drift (min–max)", c), 5e-3);
  EXPECT_DOUBLE_EQ(lo(a, m, "Adam gauge, final drift (min–max)", c), 0.7);
  EXPECT_DOUBLE_EQ(hi(a, m, "Adam gauge, final drift (min–max)", c), 0.8);
  EXPECT_NEAR(
      lo(a, m,
         "Adam gauge, Δ validation accuracy between the copies (abs, max)", c),
      0.01, 1e-12);
  EXPECT_DOUBLE_EQ(lo(a, m, "Adam noise 1e-7, final drift", c), 1e-5);
  EXPECT_DOUBLE_EQ(lo(a, m, "Adam noise 1e-5, final drift", c), 1e-3);
  EXPECT_NEAR(lo(a, m,
                 "structural ratio: min final Adam gauge / final noise "
                 "1e-5",
                 c),
              700, 1e-9);
  EXPECT_NEAR(lo(a, m,
                 "onset ratio: min step-1 Adam gauge / step-1 noise "
                 "1e-5",
                 c),
              150, 1e-9);
  EXPECT_DOUBLE_EQ(lo(a, m, "SGD gauge, final drift (max)", c), 3e-4);
  EXPECT_DOUBLE_EQ(lo(a, m, "scalar-Adam gauge, final drift (max)", c), 4e-6);
  EXPECT_NEAR(
      lo(a, m, "Muon chaos metric, init 42 (gauge seed 777), decades", c), 0.8,
      1e-9);
  EXPECT_EQ(lo(a, m, "Adam identity (A=I), largest drift at any checkpoint", c),
            0.0);
  // The paper's value stands beside the figure.
  const report::Figure* s1 =
      report::find_figure(a, m, "Adam gauge, step-1 drift (min–max)", c);
  ASSERT_TRUE(s1);
  EXPECT_EQ(s1->text(), "3.0–5.0e-3");
  EXPECT_EQ(s1->paper.text, "3.4–5.4e-3");
  EXPECT_EQ(s1->n, 3);
  const std::string md = report::to_markdown(a);
  EXPECT_NE(md.find("| 3.0–5.0e-3 | 3.4–5.4e-3 | 3 |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("662x (claim: > 600x)"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Aggregate, Table3AndTable9LayoutsOfAHandMadeFile) {
  const fs::path dir = fresh_dir("agg9");
  spit(dir / "h.jsonl", hand_made_jsonl());
  const auto t3 = report::aggregate(report::parse_layout("table3"),
                                    results_in({dir / "h.jsonl"}));
  EXPECT_DOUBLE_EQ(lo(t3, "table3", "Adam gauge", "step 1"), 3e-3);
  EXPECT_DOUBLE_EQ(hi(t3, "table3", "Adam gauge", "step 1"), 5e-3);
  EXPECT_DOUBLE_EQ(lo(t3, "table3", "Adam noise 1e-7", "step 1500"), 1e-5);
  EXPECT_EQ(lo(t3, "table3", "Adam A=I", "step 0"), 0.0);
  EXPECT_EQ(
      report::find_figure(t3, "table3", "Adam gauge", "step 1")->paper.text,
      "3.6e-3");
  const std::string csv = report::to_csv(t3);
  EXPECT_EQ(csv.rfind("section,row,column,n,measured_min,measured_max,", 0),
            0u);
  EXPECT_NE(csv.find("table3,Adam gauge,step 1,3,0.003,0.005,0.0036,0.0036,"
                     "3.6e-3\n"),
            std::string::npos)
      << csv;

  spit(dir / "h64.jsonl", hand_made_jsonl("float64"));
  const auto t9 = report::aggregate(report::parse_layout("table9"),
                                    results_in({dir / "h64.jsonl"}));
  const std::string row = "mod-47, 2L, d=64";
  EXPECT_DOUBLE_EQ(lo(t9, "table9", row, "Adam gauge, step 1"), 3e-3);
  EXPECT_DOUBLE_EQ(lo(t9, "table9", row, "eq., step 1 (worst)"), 5e-7);
  EXPECT_DOUBLE_EQ(hi(t9, "table9", row, "Adam, final"), 0.8);
  EXPECT_NEAR(lo(t9, "table9", row, "onset ratio"), 150, 1e-9);
  EXPECT_EQ(lo(t9, "table9", row, "A=I, any step"), 0.0);
  EXPECT_EQ(report::find_figure(t9, "table9", row, "onset ratio")->paper.text,
            "93x");
  fs::remove_all(dir);
}

TEST(Aggregate, NamesMissingPairsAndDeviations) {
  sweep::TableOverrides o;
  o.steps = 3;
  const sweep::Table t = sweep::make_table("table3", o);
  const auto a = report::aggregate(report::parse_layout("table3"), {},
                                   {{t.name, t.title, t.deviations, t.pairs}});
  const std::string md = report::to_markdown(a);
  EXPECT_NE(md.find("not the paper's configuration: steps 3 (paper: 1500)"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("7 of 7 pairs not recorded yet"), std::string::npos);
}

// ===========================================================================
// End to end through the binary

TEST(TableCommand, ListShowsEveryTableWithPairsStepsAndAnEstimate) {
  const fs::path dir = fresh_dir("list");
  const Outcome o = twin_run("table --list", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  for (const auto& name : sweep::table_names()) {
    EXPECT_NE(o.out.find(name), std::string::npos) << name;
  }
  // 17 pairs, 25 distinct models (each copy 1 once per group).
  EXPECT_NE(o.out.find("multiseed            17     25   1500"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("zoo                  50     60   1500"),
            std::string::npos)
      << o.out;
  const Outcome unshared = twin_run("table --list --no-share", dir);
  EXPECT_NE(unshared.out.find("zoo                  50    100   1500"),
            std::string::npos)
      << unshared.out;
  EXPECT_NE(o.out.find(" min"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "runs"));
  fs::remove_all(dir);
}

// The blank-separated words of `text`.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    out.push_back(w);
  }
  return out;
}

// The line of `listing` that starts with table `name`.
std::string list_line(const std::string& listing, const std::string& name) {
  std::istringstream in(listing);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + " ", 0) == 0) {
      return line;
    }
  }
  return "";
}

// Each table's cost, recomputed here from the job list, its groups and
// sweep/estimate.h alone: the tasks are the groups, the longest task is the
// largest of the groups' estimates, on one thread and on one thread per
// model.
struct RecomputedCost {
  size_t groups = 0, models = 0;
  int most = 0;
  double total = 0, longest = 0, longest_at_most = 0, memory = 0;
};

RecomputedCost recompute_cost(const sweep::Table& table, bool share) {
  const auto groups = sweep::group_pairs(table.pairs, share);
  RecomputedCost cost;
  cost.groups = groups.size();
  for (const auto& g : groups)
    cost.most = std::max(cost.most, static_cast<int>(g.size()) + 1);
  for (const auto& g : groups) {
    const int k = static_cast<int>(g.size()) + 1;
    const double s = sweep::estimate_seconds(g.front(), k);
    cost.total += s;
    cost.longest = std::max(cost.longest, s);
    cost.longest_at_most =
        std::max(cost.longest_at_most, sweep::estimate_seconds(g.front(), 1));
    cost.memory = std::max(
        cost.memory, sweep::estimate_memory(g.front()).total(k, cost.most));
    cost.models += k;
  }
  return cost;
}

TEST(TableCommand, CostCountsTasksAndTheLongestTaskOfEveryTable) {
  for (bool share : {true, false}) {
    for (const auto& name : sweep::table_names()) {
      SCOPED_TRACE((share ? "" : "--no-share ") + name);
      const sweep::Table t = sweep::make_table(name);
      const RecomputedCost want = recompute_cost(t, share);
      // Shared, each group adds its copy 1 to its pairs; unshared, each pair
      // is a group.
      EXPECT_EQ(want.groups,
                share ? want.models - t.pairs.size() : t.pairs.size());
      // As many tasks as groups is the most --shard allows: shard N/N is
      // not empty at N = groups, and is at N = groups + 1.
      const int n = static_cast<int>(want.groups);
      EXPECT_FALSE(sweep::shard_of(t.pairs, {n, n}, share).empty());
      EXPECT_TRUE(sweep::shard_of(t.pairs, {n + 1, n + 1}, share).empty());
      const sweep::TableCost c = sweep::table_cost(t, share);
      EXPECT_EQ(c.tasks, want.groups);
      EXPECT_EQ(c.models, want.models);
      EXPECT_EQ(c.most_models, want.most);
      EXPECT_EQ(c.longest_s, want.longest);
      EXPECT_EQ(c.longest_at_most_s, want.longest_at_most);
      EXPECT_EQ(c.memory_at_most, want.memory);
      // Not vacuous: a group of several models takes longer on one thread.
      EXPECT_GT(want.longest, want.longest_at_most);
    }
  }
  // docs/performance.md: each table9 set is 18 pairs, 23 distinct models,
  // so 5 groups; the char-LM row's largest group (Adam, init 42) trains a
  // reference and six twins.
  for (const char* name : {"table9-mod47", "table9-mod97-4L", "table9-mod97-6L",
                           "table9-charlm"}) {
    const sweep::TableCost c = sweep::table_cost(sweep::make_table(name), true);
    EXPECT_EQ(c.pairs, 18u) << name;
    EXPECT_EQ(c.models, 23u) << name;
    EXPECT_EQ(c.tasks, 5u) << name;
    EXPECT_EQ(c.most_models, 7) << name;
  }
}

// Each row `twin-run table --list` prints is the recomputed cost.
TEST(TableCommand, ListSaysTasksAndTheLongestTaskOfEveryTable) {
  const fs::path dir = fresh_dir("list-costs");
  const int cores =
      std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  for (bool share : {true, false}) {
    const Outcome listing =
        twin_run(share ? "table --list" : "table --list --no-share", dir);
    ASSERT_EQ(listing.code, 0) << listing.err;
    for (const auto& name : sweep::table_names()) {
      const sweep::Table t = sweep::make_table(name);
      const RecomputedCost c = recompute_cost(t, share);
      const twins::PairSpec& p = t.pairs.front();
      const std::string want = fmt::format(
          "{} {} {} {} {} {} {} {} {} {} {} {}", name, t.pairs.size(), c.models,
          p.steps, twins::dtype_name(p.dtype), twins::format_duration(c.total),
          twins::format_duration(std::max(c.total / cores, c.longest)),
          c.groups, twins::format_duration(c.longest), c.most,
          twins::format_duration(c.longest_at_most),
          twins::format_bytes(c.memory));
      EXPECT_EQ(words(list_line(listing.out, name)), words(want))
          << (share ? "" : "--no-share ") << name << "\n"
          << listing.out;
    }
  }
  fs::remove_all(dir);
}

// On CUDA the estimates are unknown (sweep/estimate.h models CPUs only):
// the list says so rather than 0 s; the tasks are the same.
TEST(TableCommand, ListSaysCudaEstimatesAreUnknown) {
  const fs::path dir = fresh_dir("list-cuda");
  const Outcome on_gpu = twin_run("table --list --device cuda", dir);
  ASSERT_EQ(on_gpu.code, 0) << on_gpu.err;
  sweep::TableOverrides cuda;
  cuda.device = "cuda";
  for (const auto& name : sweep::table_names()) {
    const sweep::TableCost c =
        sweep::table_cost(sweep::make_table(name, cuda), true);
    EXPECT_EQ(c.tasks, sweep::table_cost(sweep::make_table(name), true).tasks)
        << name;
    EXPECT_TRUE(std::isnan(c.longest_s)) << name;
    EXPECT_TRUE(std::isnan(c.longest_at_most_s)) << name;
    const std::vector<std::string> w = words(list_line(on_gpu.out, name));
    EXPECT_EQ(std::count(w.begin(), w.end(), "unknown"), 4) << on_gpu.out;
  }
  fs::remove_all(dir);
}

// Sets an environment variable for a scope, then puts back what was there.
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* name) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    old_ = had_ ? old : "";
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  void set(const std::string& value) { ::setenv(name_, value.c_str(), 1); }
  void unset() { ::unsetenv(name_); }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

sweep::Parallelism parallelism(int jobs, bool jobs_given, int threads,
                               bool threads_given, size_t groups) {
  return sweep::resolve_parallelism(jobs, jobs_given, threads, threads_given,
                                    groups);
}

TEST(Parallelism, SlurmCpusFillTheTaskWhenJobsAndThreadsAreNotGiven) {
  ScopedEnv env("SLURM_CPUS_PER_TASK");
  env.unset();
  auto p = parallelism(1, false, 1, false, 5);
  EXPECT_EQ(p.jobs, 1);
  EXPECT_EQ(p.threads, 1);
  EXPECT_FALSE(p.from_slurm);

  env.set("8");
  struct Case {
    int jobs;
    bool jobs_given;
    int threads;
    bool threads_given;
    size_t groups;
    int want_jobs, want_threads;
  };
  const Case cases[] = {
      {1, false, 1, false, 1, 1, 8},   // a shard of one group: all 8 threads
      {1, false, 1, false, 5, 5, 1},   // five groups side by side
      {1, false, 1, false, 3, 3, 2},   // 3 x 2 of the 8 CPUs
      {1, false, 1, false, 20, 8, 1},  // more groups than CPUs
      {2, true, 1, false, 5, 2, 4},    // --jobs 2: threads fill the rest
      {1, false, 4, true, 5, 2, 4},    // --threads 4: two groups fit
      {1, false, 16, true, 5, 1, 16},  // --threads beyond the CPUs
      {3, true, 5, true, 1, 3, 5},     // both given: as given
  };
  for (const auto& c : cases) {
    p = parallelism(c.jobs, c.jobs_given, c.threads, c.threads_given, c.groups);
    const std::string what =
        fmt::format("jobs {}{} threads {}{} groups {}", c.jobs,
                    c.jobs_given ? " given" : "", c.threads,
                    c.threads_given ? " given" : "", c.groups);
    EXPECT_EQ(p.jobs, c.want_jobs) << what;
    EXPECT_EQ(p.threads, c.want_threads) << what;
    EXPECT_EQ(p.from_slurm, !(c.jobs_given && c.threads_given)) << what;
    EXPECT_EQ(p.said.find("SLURM_CPUS_PER_TASK=8") != std::string::npos,
              p.from_slurm)
        << what << ": " << p.said;
  }

  for (const std::string bad : {"", "0", "-2", "8x", " 8", "2.5", "two",
                                "99999999999"}) {
    env.set(bad);
    try {
      parallelism(1, false, 1, false, 5);
      ADD_FAILURE() << "SLURM_CPUS_PER_TASK='" << bad << "' was accepted";
    } catch (const c10::Error& e) {
      const std::string m = e.what_without_backtrace();
      EXPECT_NE(m.find("SLURM_CPUS_PER_TASK='" + bad + "'"), std::string::npos)
          << m;
      EXPECT_EQ(count_lines(m.substr(0, m.find_last_not_of('\n') + 1)), 0)
          << m;
    }
    // Both given: the variable is not used, so not judged either.
    p = parallelism(2, true, 3, true, 5);
    EXPECT_EQ(p.jobs, 2);
    EXPECT_EQ(p.threads, 3);
  }
}

// The key -> record (without the timing fields) of a results file.
std::map<std::string, json> records_by_key(const fs::path& path) {
  std::map<std::string, json> out;
  for (const auto& r : sweep::read_results(path.string()).records) {
    out.emplace(r.key, twins::without_timing(r.json));
  }
  return out;
}

// Through the binary: SLURM_CPUS_PER_TASK sets --jobs and --threads as the
// banner says, and the records are the same, number for number, as
// without it; a malformed value is one line and writes nothing.
TEST(TableCommand, SlurmCpusChangeTheSchedulingNotTheRecords) {
  const fs::path dir = fresh_dir("slurm-cpus");
  const std::string table = "table table3 --steps 3 ";
  const Outcome plain = twin_run(table + "--out plain.jsonl", dir,
                                 "env -u SLURM_CPUS_PER_TASK ");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_NE(plain.err.find("--jobs 1, --threads 1;"), std::string::npos)
      << plain.err;
  const auto want = records_by_key(dir / "plain.jsonl");
  ASSERT_EQ(want.size(), 7u);
  sweep::TableOverrides o3;
  o3.steps = 3;

  struct Run {
    std::string env, args, file;
    int jobs, threads;
  };
  const Run runs[] = {
      // table3's seven pairs form four groups.
      {"SLURM_CPUS_PER_TASK=2 ", "", "whole.jsonl", 2, 1},
      {"SLURM_CPUS_PER_TASK=16 ", "", "wide.jsonl", 4, 4},
      // Shard 1 of 4 holds one group: all the CPUs train its models.
      {"SLURM_CPUS_PER_TASK=2 ", "--shard 1/4 ", "shard.jsonl", 1, 2},
      {"SLURM_CPUS_PER_TASK=3 ", "--jobs 1 ", "jobs1.jsonl", 1, 3},
  };
  for (const auto& r : runs) {
    const Outcome o =
        twin_run(table + r.args + "--out " + r.file, dir, r.env);
    ASSERT_EQ(o.code, 0) << r.env << r.args << o.err;
    EXPECT_NE(o.err.find(fmt::format("--jobs {}", r.jobs)), std::string::npos)
        << r.env << r.args << o.err;
    EXPECT_NE(o.err.find(fmt::format("--threads {}", r.threads)),
              std::string::npos)
        << r.env << r.args << o.err;
    EXPECT_NE(o.err.find(r.env.substr(0, r.env.size() - 1) + ")"),
              std::string::npos)
        << o.err;
    const auto have = records_by_key(dir / r.file);
    const size_t pairs =
        r.args.find("--shard") == 0
            ? sweep::shard_of(sweep::make_table("table3", o3).pairs, {1, 4})
                  .size()
            : 7u;
    EXPECT_EQ(have.size(), pairs) << r.file;
    for (const auto& [key, record] : have) {
      ASSERT_TRUE(want.count(key)) << r.file << ": " << key;
      EXPECT_EQ(record, want.at(key)) << r.file << ": " << key;
    }
  }

  const Outcome bad =
      twin_run(table + "--out bad.jsonl", dir, "SLURM_CPUS_PER_TASK=two ");
  EXPECT_NE(bad.code, 0);
  EXPECT_EQ(count_lines(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("SLURM_CPUS_PER_TASK='two'"), std::string::npos)
      << bad.err;
  EXPECT_FALSE(fs::exists(dir / "bad.jsonl"));
  EXPECT_FALSE(fs::exists(dir / "runs"));
  fs::remove_all(dir);
}

struct TableBadInput {
  std::string args;
  std::string must_mention;
};

TEST(TableCommand, BadInputGivesOneLineAndNoResultsFile) {
  const fs::path dir = fresh_dir("bad");
  spit(dir / "malformed.jsonl", "{\"key\": 1}\nnot json\n");
  spit(dir / "empty.jsonl", "");
  const std::vector<TableBadInput> bad = {
      {"table table4 --out res.jsonl", "table4"},
      {"table table3 --shard 3/2 --out res.jsonl", "3/2"},
      {"table table3 --shard 0/0 --out res.jsonl", "0/0"},
      {"table table3 --jobs 0 --out res.jsonl",
       "--jobs: 0 is not a whole number from 1 to 1024"},
      {"table table3 --threads 0 --out res.jsonl",
       "--threads: 0 is not a whole number from 1 to 1024"},
      {"table table3 --dtype float16 --out res.jsonl", "float16"},
      {"table table3 --device tpu --out res.jsonl", "tpu"},
      {"table table3 --steps 0 --out res.jsonl",
       "--steps: 0 is not a whole number from 1 to 1000000000"},
      {"table --out res.jsonl", "name a table"},
      {"table --aggregate missing.jsonl", "missing.jsonl"},
      {"table --aggregate malformed.jsonl", "line 1"},
      {"table --aggregate empty.jsonl", "no records"},
      {"plot missing.jsonl", "missing.jsonl"},
      {"plot malformed.jsonl", "malformed.jsonl"},
  };
  for (const auto& b : bad) {
    const Outcome o = twin_run(b.args, dir);
    EXPECT_NE(o.code, 0) << b.args;
    EXPECT_EQ(count_lines(o.err), 1) << b.args << "\n" << o.err;
    EXPECT_NE(o.err.find(b.must_mention), std::string::npos)
        << b.args << " -> " << o.err;
    EXPECT_FALSE(fs::exists(dir / "res.jsonl")) << b.args;
    EXPECT_FALSE(fs::exists(dir / "runs")) << b.args;
  }
  fs::remove_all(dir);
}

// Starts twin-run in `dir` and returns its pid (output to files).
pid_t spawn(const std::vector<std::string>& args, const fs::path& dir) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(dir.c_str()) != 0) {
      ::_exit(127);
    }
    std::freopen("spawn.out", "w", stdout);
    std::freopen("spawn.err", "w", stderr);
    std::vector<char*> argv{const_cast<char*>(TWIN_RUN_PATH)};
    for (const auto& a : args) {
      argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    ::execv(TWIN_RUN_PATH, argv.data());
    ::_exit(127);
  }
  return pid;
}

TEST(TableCommand, SigkillThenRerunLosesAndDuplicatesNothing) {
  const fs::path dir = fresh_dir("kill");
  const std::vector<std::string> args = {"table", "table3",  "--steps", "6",
                                         "--out", "r.jsonl", "--quiet"};
  const pid_t pid = spawn(args, dir);
  ASSERT_GT(pid, 0);
  // Kill it once two pairs are recorded (or give up after a minute).
  const auto t0 = std::chrono::steady_clock::now();
  while (count_lines(slurp(dir / "r.jsonl")) < 2 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "finished before the kill";
  const auto before = keys_in((dir / "r.jsonl").string());
  EXPECT_GE(before.size(), 2u);
  EXPECT_LT(before.size(), 7u);

  std::string cmd = "table table3 --steps 6 --out r.jsonl --quiet";
  const Outcome o = twin_run(cmd, dir);
  ASSERT_EQ(o.code, 0) << o.err;
  std::multiset<std::string> want;
  for (const auto& p : sweep::make_table("table3", {6, "", ""}).pairs) {
    want.insert(p.key());
  }
  EXPECT_EQ(keys_in((dir / "r.jsonl").string()), want);
  EXPECT_NE(o.out.find(fmt::format("{} run now", 7 - before.size())),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find(fmt::format("{} already recorded", before.size())),
            std::string::npos)
      << o.out;
  EXPECT_TRUE(fs::exists(dir / "r.md"));
  EXPECT_TRUE(fs::exists(dir / "r.csv"));
  EXPECT_NE(o.out.find("not the paper's configuration"), std::string::npos);
  fs::remove_all(dir);
}

TEST(TableCommand, ConcatenatedShardFilesAggregateLikeOneRun) {
  const fs::path dir = fresh_dir("e2e-shards");
  ASSERT_EQ(twin_run("table table3 --steps 2 --quiet --jobs 2", dir).code, 0);
  std::string cat;
  for (int i = 1; i <= 3; ++i) {
    const Outcome o = twin_run(
        fmt::format("table table3 --steps 2 --quiet --shard {}/3", i), dir);
    ASSERT_EQ(o.code, 0) << o.err;
    cat += slurp(dir / fmt::format("runs/table3-steps2-shard{}of3.jsonl", i));
  }
  spit(dir / "runs/all.jsonl", cat);
  const Outcome merged = twin_run("table --aggregate runs/all.jsonl", dir);
  ASSERT_EQ(merged.code, 0) << merged.err;
  EXPECT_EQ(slurp(dir / "runs/all.csv"), slurp(dir / "runs/table3-steps2.csv"));
  EXPECT_EQ(slurp(dir / "runs/all.md"), slurp(dir / "runs/table3-steps2.md"));
  // The shard files named directly give the same table.
  const Outcome named = twin_run(
      "table --aggregate runs/table3-steps2-shard1of3.jsonl "
      "runs/table3-steps2-shard2of3.jsonl runs/table3-steps2-shard3of3.jsonl",
      dir);
  ASSERT_EQ(named.code, 0) << named.err;
  EXPECT_EQ(slurp(dir / "runs/table3-steps2-merged.csv"),
            slurp(dir / "runs/table3-steps2.csv"));
  // Shards of another configuration merge into a file of their own: the
  // merged aggregate of the 2-step run stays as it was.
  const std::string before = slurp(dir / "runs/table3-steps2-merged.csv");
  for (int i = 1; i <= 2; ++i) {
    ASSERT_EQ(twin_run(fmt::format("table table3 --steps 1 --quiet --shard "
                                   "{}/2",
                                   i),
                       dir)
                  .code,
              0);
  }
  ASSERT_EQ(twin_run("table --aggregate runs/table3-steps1-shard1of2.jsonl "
                     "runs/table3-steps1-shard2of2.jsonl",
                     dir)
                .code,
            0);
  EXPECT_TRUE(fs::exists(dir / "runs/table3-steps1-merged.csv"));
  EXPECT_EQ(slurp(dir / "runs/table3-steps2-merged.csv"), before);
  fs::remove_all(dir);
}

bool well_formed_svg(const std::string& svg, std::string* why) {
  // Tags balance (comments, declarations and CDATA skipped).
  std::vector<std::string> open;
  size_t i = 0;
  while ((i = svg.find('<', i)) != std::string::npos) {
    if (svg.compare(i, 4, "<!--") == 0) {
      i = svg.find("-->", i);
    } else if (svg.compare(i, 9, "<![CDATA[") == 0) {
      i = svg.find("]]>", i);
    } else if (svg.compare(i, 2, "<?") == 0 || svg.compare(i, 2, "<!") == 0) {
      i = svg.find('>', i);
    } else {
      const size_t end = svg.find('>', i);
      if (end == std::string::npos) {
        break;
      }
      const std::string tag = svg.substr(i + 1, end - i - 1);
      const bool closing = !tag.empty() && tag[0] == '/';
      const bool self = !tag.empty() && tag.back() == '/';
      const std::string name =
          tag.substr(closing, tag.find_first_of(" \t\n/>", closing) - closing);
      if (closing) {
        if (open.empty() || open.back() != name) {
          *why = "unbalanced </" + name + ">";
          return false;
        }
        open.pop_back();
      } else if (!self) {
        open.push_back(name);
      }
      i = end;
    }
    if (i == std::string::npos) {
      *why = "unterminated comment or CDATA";
      return false;
    }
  }
  if (!open.empty()) {
    *why = "unclosed <" + open.back() + ">";
  }
  return open.empty() && svg.find("<svg") != std::string::npos;
}

TEST(PlotCommand, DrawsAValidSvgWithEveryOptimizersLabel) {
  if (report::find_on_path("gnuplot").empty()) {
    GTEST_SKIP() << "gnuplot not installed (setup.sh installs gnuplot-nox)";
  }
  const fs::path dir = fresh_dir("plot");
  spit(dir / "fixture.jsonl", hand_made_jsonl());
  const Outcome o = twin_run("plot fixture.jsonl -o fig/f.svg", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  for (const char* file : {"fig/f.svg", "fig/f-qk.svg"}) {
    const std::string svg = slurp(dir / file);
    std::string why;
    EXPECT_TRUE(well_formed_svg(svg, &why)) << file << ": " << why;
    for (const char* label : {"Adam", "SGD", "scalar-Adam", "Muon"}) {
      EXPECT_NE(svg.find(label), std::string::npos) << file << " " << label;
    }
  }
  const std::string fig2 = slurp(dir / "fig/f.svg");
  EXPECT_NE(fig2.find("Adam gauge (3 pairs)"), std::string::npos);
  EXPECT_NE(fig2.find("Adam noise 1e-7"), std::string::npos);
  EXPECT_NE(fig2.find("Adam A=I: exactly 0 at every step"), std::string::npos);
  fs::remove_all(dir);
}

TEST(PlotCommand, WithoutGnuplotSaysSoInOneLineAndLeavesTheScript) {
  const fs::path dir = fresh_dir("nognuplot");
  spit(dir / "fixture.jsonl", hand_made_jsonl());
  fs::create_directories(dir / "empty-bin");
  const Outcome o = twin_run("plot fixture.jsonl", dir,
                             "PATH='" + (dir / "empty-bin").string() + "' ");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("gnuplot not found"), std::string::npos) << o.err;
  EXPECT_TRUE(fs::exists(dir / "fixture.gp"));
  EXPECT_TRUE(fs::exists(dir / "fixture-drift.dat"));
  EXPECT_TRUE(fs::exists(dir / "fixture-qk.dat"));
  EXPECT_FALSE(fs::exists(dir / "fixture.svg"));
  fs::remove_all(dir);
}

TEST(PlotCommand, RejectsAnUnknownFigureFormat) {
  const fs::path dir = fresh_dir("plotext");
  spit(dir / "fixture.jsonl", hand_made_jsonl());
  const Outcome o = twin_run("plot fixture.jsonl -o f.pdf", dir);
  EXPECT_NE(o.code, 0);
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("f.pdf"), std::string::npos) << o.err;
  fs::remove_all(dir);
}

}  // namespace
