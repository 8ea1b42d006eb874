// Checkpoints inside a group (twins/checkpoint.h, docs/clusters.md): a
// group stopped at any step and resumed from its state file ends with
// records bitwise equal, in every number that describes training, to the
// same group run straight through — for full-batch mod-p and the char-LM's
// minibatch stream, float32 and float64, every optimizer family; and a
// state file that cannot be used is refused, never silently replaced.
// The second half runs the binary: SIGKILL between a checkpoint's write and
// its rename, and after it, and SIGTERM / SIGINT with their exit statuses.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <thread>

#include "binary_helpers.h"
#include "helpers.h"
#include "sweep/engine.h"
#include "twins/environment.h"
#include "twins/checkpoint.h"
#include "twins/stop.h"
#include "twins/pair.h"
#include "twins/record.h"

namespace {

namespace fs = std::filesystem;
using testing_helpers::fresh_dir;
using testing_helpers::signalled_run;
using testing_helpers::slurp;
using testing_helpers::tiny_spec;
using testing_helpers::twin_run;
using twins::PairSpec;
using twins::TwinKind;

// Every field but the run's timing, as text: equal means bitwise.
std::vector<std::string> records(const std::vector<twins::PairResult>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs)
    out.push_back(twins::without_timing(twins::to_json(r)).dump());
  return out;
}

// A gauge, an identity and a noise twin of one reference: a group of three.
std::vector<PairSpec> triplet(PairSpec s) {
  std::vector<PairSpec> g;
  for (TwinKind k : {TwinKind::kGauge, TwinKind::kIdentity, TwinKind::kNoise}) {
    s.twin = k;
    s.twin_seed = k == TwinKind::kNoise ? 888 : 777;
    g.push_back(s);
  }
  return g;
}

PairSpec mod_spec(const std::string& opt, torch::Dtype dtype) {
  PairSpec s = tiny_spec(opt, TwinKind::kGauge, 60, dtype);
  s.depth = 1;  // one block keeps 7 families x 2 dtypes quick
  s.lr = opt == "sgd" ? 0.5 : 1e-2;
  return s;
}

PairSpec charlm_spec(const std::string& opt, torch::Dtype dtype) {
  PairSpec s = mod_spec(opt, dtype);
  s.task = "charlm";
  s.steps = 30;
  s.ctx = 16;
  s.batch = 4;
  return s;
}

// A checkpoint policy that writes every `steps` steps.
twins::StatePolicy every(int64_t steps, bool restart = false) {
  twins::StatePolicy policy;
  policy.every_steps = steps;
  policy.restart = restart;
  return policy;
}

// Runs the group with its checkpoint in `file` until it stops (as SIGTERM
// would) after step `at`, leaving the file of that step.
void stop_at(const std::vector<PairSpec>& group, int64_t at,
             const fs::path& file) {
  twins::GroupOptions options;
  options.checkpoint = twins::GroupCheckpoint(file.string(), every(1000000));
  options.progress = [at](int64_t step) {
    if (step == at)
      twins::request_stop(SIGTERM);
  };
  EXPECT_THROW(twins::run_group(group, options), twins::Stopped);
  twins::clear_stop();
  ASSERT_EQ(twins::read_state_file(file.string()).header.at("step"), at);
}

struct Interrupted {
  std::vector<twins::PairResult> results;
  std::vector<int64_t> saved_at;  // the step each stop left in the file
};

// Runs the group, stopping it (as SIGTERM would) after each of `stops`, and
// resuming it from its state file each time; the group that ends removes
// its file.
Interrupted run_interrupted(const std::vector<PairSpec>& group,
                            const std::vector<int64_t>& stops,
                            const fs::path& file) {
  Interrupted out;
  fs::remove(file);
  for (size_t k = 0; k <= stops.size(); ++k) {
    twins::GroupOptions options;
    // Only the stops write it.
    options.checkpoint = twins::GroupCheckpoint(file.string(), every(1000000));
    if (k < stops.size()) {
      const int64_t at = stops[k];
      options.progress = [at](int64_t step) {
        if (step == at)
          twins::request_stop(SIGTERM);
      };
    }
    try {
      out.results = twins::run_group(group, options);
      EXPECT_EQ(k, stops.size()) << "the run was not stopped at step "
                                 << stops[k];
      EXPECT_FALSE(fs::exists(file)) << "the ended group left its file";
    } catch (const twins::Stopped& e) {
      twins::clear_stop();
      EXPECT_EQ(e.signal(), SIGTERM);
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos)
          << e.what();
      out.saved_at.push_back(
          twins::read_state_file(file.string()).header.at("step"));
    }
  }
  return out;
}

void expect_same_as_straight(const std::vector<PairSpec>& group,
                             const std::vector<int64_t>& stops) {
  const fs::path dir = fresh_dir("ckpt");
  const auto straight = records(twins::run_group(group));
  const Interrupted r = run_interrupted(group, stops, dir / "g.ckpt");
  EXPECT_EQ(r.saved_at, stops);
  EXPECT_EQ(records(r.results), straight);
  fs::remove_all(dir);
}

const char* const kFamilies[] = {"adam",    "sgd",  "scalar-adam", "muon",
                                 "shampoo", "soap", "adam-mini"};

// Stops inside the first segment, just after a measurement, and inside the
// second segment (past the 50-step loss check).
TEST(Checkpoint, ModPResumesToTheSameBitsForEveryFamily) {
  for (const char* opt : kFamilies) {
    for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
      SCOPED_TRACE(std::string(opt) + " " + twins::dtype_name(dtype));
      expect_same_as_straight(triplet(mod_spec(opt, dtype)), {3, 10, 52});
    }
  }
}

// The char-LM draws a new minibatch every step: the stream must go on from
// the step the file holds.
TEST(Checkpoint, CharLmStreamResumesToTheSameBitsForEveryFamily) {
  for (const char* opt : kFamilies) {
    for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
      SCOPED_TRACE(std::string(opt) + " " + twins::dtype_name(dtype));
      expect_same_as_straight(triplet(charlm_spec(opt, dtype)), {2, 11, 25});
    }
  }
}

// A pair that diverges after the stop is recorded as diverged at the same
// step as in the straight run.
TEST(Checkpoint, DivergenceAfterAResumeIsTheStraightRunsDivergence) {
  PairSpec s = mod_spec("sgd", torch::kFloat);
  s.lr = 1e3;  // diverges at step 7
  const auto straight = twins::run_group(triplet(s));
  ASSERT_FALSE(straight[0].ok()) << "the test needs a diverging pair";
  ASSERT_GT(straight[0].diverged_step, 5);
  expect_same_as_straight(triplet(s), {2, 5});
}

// Head merging at a step before the stop is kept in the file's partial
// record, and one after it measured as in a straight run.
TEST(Checkpoint, MergesBeforeAndAfterTheStopAreKept) {
  PairSpec s = mod_spec("adam", torch::kFloat);
  s.merge_at = {5, 50};
  expect_same_as_straight(triplet(s), {20});
}

TEST(Checkpoint, TwoThreadsAndOneGiveTheSameResumedBits) {
  const auto group = triplet(mod_spec("adam", torch::kFloat));
  const auto straight = records(twins::run_group(group));
  const fs::path dir = fresh_dir("ckpt-threads");
  const fs::path file = dir / "g.ckpt";
  twins::GroupOptions options;
  // Written by the policy, not by a stop.
  options.checkpoint = twins::GroupCheckpoint(file.string(), every(7));
  options.threads = 2;
  options.progress = [](int64_t step) {
    if (step == 30)
      twins::request_stop(SIGUSR1);
  };
  EXPECT_THROW(twins::run_group(group, options), twins::Stopped);
  twins::clear_stop();
  EXPECT_EQ(twins::read_state_file(file.string()).header.at("step"), 30);
  twins::GroupOptions resume;
  resume.checkpoint = twins::GroupCheckpoint(file.string(), every(7));
  EXPECT_EQ(records(twins::run_group(group, resume)), straight);
  fs::remove_all(dir);
}

// A file stopped with a twin the resumed group no longer runs (its record
// was written before the stop) serves the others.
TEST(Checkpoint, AGroupOfFewerPairsResumesFromItsFile) {
  const auto group = triplet(mod_spec("adam", torch::kDouble));
  const auto straight = records(twins::run_group(group));
  const fs::path dir = fresh_dir("ckpt-subset");
  stop_at(group, 9, dir / "g.ckpt");
  // Resume only the noise twin, from the file of step 9 written for three.
  twins::GroupOptions options;
  std::vector<std::string> notes;
  options.checkpoint = twins::GroupCheckpoint(
      (dir / "g.ckpt").string(), every(1000),
      [&](const std::string& line) { notes.push_back(line); });
  const auto resumed = twins::run_group({group[2]}, options);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("resumed at step 9"), std::string::npos) << notes[0];
  EXPECT_EQ(records(resumed)[0], straight[2]);
  fs::remove_all(dir);
}

// Everything a bad file can be is refused naming the file; with
// StatePolicy::restart it is removed and the group starts afresh.
class BadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir("ckpt-bad");
    file_ = dir_ / "g.ckpt";
    group_ = triplet(mod_spec("adam", torch::kFloat));
    stop_at(group_, 6, file_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `group` on the file; the error's message, or "" if none.
  std::string error_of(const std::vector<PairSpec>& group,
                       bool restart = false) {
    twins::GroupOptions options;
    options.checkpoint = twins::GroupCheckpoint(
        file_.string(), every(1000, restart),
        [this](const std::string& line) { notes_.push_back(line); });
    try {
      results_ = twins::run_group(group, options);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

  void truncate_to(uintmax_t bytes) { fs::resize_file(file_, bytes); }

  fs::path dir_, file_;
  std::vector<PairSpec> group_;
  std::vector<twins::PairResult> results_;
  std::vector<std::string> notes_;
};

TEST_F(BadCheckpoint, ATruncatedFileIsRefusedNamingIt) {
  truncate_to(fs::file_size(file_) / 2);
  const std::string e = error_of(group_);
  EXPECT_NE(e.find("checkpoint '" + file_.string() + "' is damaged"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--checkpoint-restart"), std::string::npos) << e;
  EXPECT_TRUE(fs::exists(file_)) << "a refused file must be left as it was";
}

TEST_F(BadCheckpoint, AFlippedByteIsRefused) {
  std::string bytes = slurp(file_);
  bytes[bytes.size() - 100] ^= 0x40;
  std::ofstream(file_, std::ios::binary) << bytes;
  EXPECT_NE(error_of(group_).find("header or data do not match its SHA-256"),
            std::string::npos);
}

// The header is digested with the archive: one digit of a partial curve
// changed by hand would otherwise be recorded as measured (and a twin's
// index changed would resume one twin from another's weights).
TEST_F(BadCheckpoint, AnEditedHeaderIsRefused) {
  std::string bytes = slurp(file_);
  const size_t curve = bytes.find("\"curve\":");
  ASSERT_NE(curve, std::string::npos);
  const size_t digit = bytes.find_first_of("123456789", curve);
  ASSERT_LT(digit, bytes.find('\n', curve)) << "the curve is in the header";
  bytes[digit] = bytes[digit] == '9' ? '1' : char(bytes[digit] + 1);
  std::ofstream(file_, std::ios::binary) << bytes;
  const std::string e = error_of(group_);
  EXPECT_NE(e.find("header or data do not match its SHA-256"),
            std::string::npos)
      << e;
  EXPECT_TRUE(fs::exists(file_));
}

// A whole, digested header without a field this twins reads (another
// version's, or written by hand) names the file and the field, not the
// JSON library's words alone.
TEST_F(BadCheckpoint, AHeaderWithoutAFieldNamesTheFile) {
  twins::StateFile state = twins::read_state_file(file_.string());
  state.header.erase("pairs");
  twins::write_state_file(file_.string(), state.header, state.payload);
  const std::string e = error_of(group_);
  EXPECT_NE(e.find("checkpoint '" + file_.string() + "' is damaged: its "
                   "header does not have the fields"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("'pairs'"), std::string::npos) << e;
  EXPECT_NE(e.find("--checkpoint-restart"), std::string::npos) << e;
}

// A file of the earlier layout (the archive digested, the header not) is
// refused naming its first line.
TEST_F(BadCheckpoint, AnEarlierLayoutIsRefusedNamingIt) {
  std::string bytes = slurp(file_);
  const size_t digest_line = bytes.find('\n') + 1;
  bytes = "twins-checkpoint 1\n" + bytes.substr(bytes.find('\n', digest_line) + 1);
  std::ofstream(file_, std::ios::binary) << bytes;
  const std::string e = error_of(group_);
  EXPECT_NE(e.find("its first line 'twins-checkpoint 1' is not this twins' "
                   "layout 2"),
            std::string::npos)
      << e;
}

// A pipe at the file's name (a SLURM task would block in open() until its
// time limit): refused, or with restart removed. A watchdog opens the
// pipe's other end after 20 s, so that a reader that does block fails this
// test instead of hanging it.
TEST_F(BadCheckpoint, APipeIsRefusedNotWaitedOn) {
  for (const bool restart : {false, true}) {
    fs::remove(file_);
    ASSERT_EQ(::mkfifo(file_.c_str(), 0600), 0);
    std::atomic<bool> done{false};
    std::thread watchdog([&] {
      for (int i = 0; i < 2000 && !done; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (done)
        return;
      const int fd = ::open(file_.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0)
        ::close(fd);
    });
    const std::string e = error_of(group_, restart);
    done = true;
    watchdog.join();
    if (!restart) {
      EXPECT_NE(e.find("checkpoint '" + file_.string() +
                       "' is damaged: it is a pipe, not a file"),
                std::string::npos)
          << e;
      EXPECT_TRUE(fs::is_fifo(file_));
    } else {
      EXPECT_EQ(e, "");
      EXPECT_FALSE(fs::exists(file_)) << "the pipe is removed";
      EXPECT_EQ(records(results_), records(twins::run_group(group_)));
    }
  }
}

TEST_F(BadCheckpoint, AForeignFileIsRefused) {
  std::ofstream(file_) << "notes of mine\n";
  EXPECT_NE(error_of(group_).find("not a twins checkpoint"), std::string::npos);
}

TEST_F(BadCheckpoint, AnotherConfigurationIsRefused) {
  auto other = group_;
  for (auto& s : other)
    s.lr = 2e-2;  // another run under the same file name
  const std::string e = error_of(other);
  EXPECT_NE(e.find("written for another configuration"), std::string::npos)
      << e;
  auto proto = group_;
  for (auto& s : proto)
    s.protocol = twins::Protocol::kPaperGpu;
  EXPECT_NE(error_of(proto).find("another configuration"), std::string::npos);
}

// A checkpoint carries the numeric environment it was written under; steps
// of another would make one pair's bits a mix of two.
TEST_F(BadCheckpoint, AnotherNumericEnvironmentIsRefused) {
  const twins::NumericEnv here = twins::numeric_env("cpu");
  if (here.blas_core == twins::kUnknownEnvironment)
    GTEST_SKIP() << "this build's BLAS has no core type to tell apart";
  // Written whole, its digest matching, as another machine would write it.
  twins::StateFile state = twins::read_state_file(file_.string());
  ASSERT_EQ(state.header.at("numeric_env").at("blas_core"), here.blas_core);
  state.header["numeric_env"]["blas_core"] = here.blas_core + "-other";
  twins::write_state_file(file_.string(), state.header, state.payload);
  const std::string e = error_of(group_);
  EXPECT_NE(e.find("another numeric environment (blas_core"),
            std::string::npos)
      << e;
}

TEST_F(BadCheckpoint, APairTheFileDoesNotHoldIsRefused) {
  auto more = group_;
  more.push_back(more[2]);
  more.back().twin_seed = 889;
  EXPECT_NE(error_of(more).find("does not hold pair"), std::string::npos);
}

// A file that fails late in its reading — after the pairs it holds have
// been read, at the one it lacks — leaves nothing of itself behind: the
// restarted group's records are a fresh group's, curves included.
TEST_F(BadCheckpoint, RestartAfterAPartlyReadFileIsAFreshGroup) {
  auto more = group_;
  more.push_back(more[2]);
  more.back().twin_seed = 889;
  EXPECT_EQ(error_of(more, /*restart=*/true), "");
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_NE(notes_[0].find("does not hold pair"), std::string::npos)
      << notes_[0];
  EXPECT_FALSE(fs::exists(file_));
  EXPECT_EQ(records(results_), records(twins::run_group(more)));
}

TEST_F(BadCheckpoint, RestartRemovesItAndStartsAtStepZero) {
  truncate_to(100);
  EXPECT_EQ(error_of(group_, /*restart=*/true), "");
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_NE(notes_[0].find("removed: --checkpoint-restart"), std::string::npos)
      << notes_[0];
  EXPECT_EQ(records(results_), records(twins::run_group(group_)));
}

// ---------------------------------------------------------------------------
// The binary: kills, signals, exit statuses.

// The records of a results file without their timing fields, in file order.
std::vector<std::string> file_records(const fs::path& path) {
  std::vector<std::string> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (!line.empty())
      out.push_back(twins::without_timing(nlohmann::json::parse(line)).dump());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A reference's pairs split over several groups (capped at two twins each
// here, as a memory cap splits them) keep their groups, and so find their
// checkpoints, whichever pairs were recorded since: the first run stops
// with [gauge 777, identity] and [noise, gauge 999] checkpointed; gauge
// 777's record then appears (as a pair's does the moment it diverges); the
// rerun must resume both groups, end with the straight run's records and
// leave no checkpoint behind.
// Every group's checkpoint is checked before any group trains: a damaged
// file of the group that would run last, a folder that is a file, a pipe —
// each a one-line error naming it, with nothing recorded.
TEST(CheckpointEngine, EveryCheckpointIsCheckedBeforeTheFirstStep) {
  PairSpec adam = mod_spec("adam", torch::kFloat);
  PairSpec sgd = mod_spec("sgd", torch::kFloat);
  std::vector<PairSpec> pairs = triplet(adam);
  for (const auto& pair : triplet(sgd))
    pairs.push_back(pair);
  const fs::path dir = fresh_dir("ckpt-before");
  sweep::EngineOptions o;
  o.results_path = (dir / "r.jsonl").string();
  o.quiet = true;
  o.state.every_steps = 1;
  const auto paths = twins::checkpoint_paths(
      o.results_path, {triplet(adam), triplet(sgd)});
  auto error_of_run = [&] {
    try {
      sweep::run_sweep(pairs, o);
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string();
  };
  // The folder is a file.
  std::ofstream(twins::checkpoint_folder(o.results_path)) << "notes\n";
  std::string e = error_of_run();
  EXPECT_NE(e.find("Cannot write checkpoint '" + paths[0] + "': '" +
                   twins::checkpoint_folder(o.results_path) +
                   "' is a file, not a directory"),
            std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(o.results_path)) << "nothing may be recorded";
  // The sgd group's file (which would run second) is damaged.
  fs::remove(twins::checkpoint_folder(o.results_path));
  fs::create_directories(twins::checkpoint_folder(o.results_path));
  std::ofstream(paths[1]) << "twins-checkpoint 2\nsha256 0\n";
  e = error_of_run();
  EXPECT_NE(e.find("checkpoint '" + paths[1] + "' is damaged"),
            std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(o.results_path)) << "no group may train first";
  // A pipe is refused before it is opened.
  fs::remove(paths[1]);
  ASSERT_EQ(::mkfifo(paths[1].c_str(), 0600), 0);
  e = error_of_run();
  EXPECT_NE(e.find("Cannot write checkpoint '" + paths[1] + "': it is a pipe"),
            std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(o.results_path));
  fs::remove_all(dir);
}

TEST(CheckpointEngine, SplitGroupsKeepTheirCheckpointsWhenAPairIsRecorded) {
  PairSpec base = mod_spec("adam", torch::kFloat);
  base.steps = 400;
  std::vector<PairSpec> pairs = triplet(base);
  pairs.push_back(pairs[0]);
  pairs[3].twin_seed = 999;
  const fs::path dir = fresh_dir("ckpt-split");
  auto options = [&](const std::string& name, std::FILE* log) {
    sweep::EngineOptions o;
    o.results_path = (dir / name).string();
    o.quiet = true;
    o.max_twins = 2;
    o.jobs = 2;
    o.log = log;
    return o;
  };
  std::FILE* log = std::tmpfile();
  ASSERT_NE(log, nullptr);
  sweep::run_sweep(pairs, options("straight.jsonl", log));
  const auto straight = file_records(dir / "straight.jsonl");
  ASSERT_EQ(straight.size(), 4u);

  auto o = options("split.jsonl", log);
  o.state.every_steps = 1;
  const fs::path ckpt = twins::checkpoint_folder(o.results_path);
  // Stopped as SIGTERM would once both groups have written a checkpoint.
  auto checkpoints = [&] {
    int n = 0;
    std::error_code ec;
    for (fs::directory_iterator e(ckpt, ec), end; !ec && e != end;
         e.increment(ec))
      n += e->path().extension() == ".ckpt";
    return n;
  };
  std::thread watcher([&] {
    for (int i = 0; i < 60000 && checkpoints() < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    twins::request_stop(SIGTERM);
  });
  EXPECT_THROW(sweep::run_sweep(pairs, o), twins::Stopped);
  watcher.join();
  twins::clear_stop();
  ASSERT_EQ(checkpoints(), 2);
  ASSERT_TRUE(fs::exists(o.results_path) == false ||
              file_records(o.results_path).empty())
      << "a group ended before the stop";
  // Gauge 777's record, as if it had diverged and been recorded.
  {
    std::ifstream in(dir / "straight.jsonl");
    std::ofstream out(o.results_path, std::ios::app);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.at("twin") == "gauge" && j.at("twin_seed") == 777)
        out << line << "\n";
    }
  }
  ASSERT_EQ(file_records(o.results_path).size(), 1u);

  std::FILE* resumed_log = std::tmpfile();
  ASSERT_NE(resumed_log, nullptr);
  o.log = resumed_log;  // the resume notes are written even when quiet
  o.state.every_steps = 1000000;  // the files are read, none is written
  const auto out = sweep::run_sweep(pairs, o);
  EXPECT_EQ(out.already, 1u);
  EXPECT_EQ(out.ran, 3u);
  std::rewind(resumed_log);
  std::string text;
  for (int c; (c = std::fgetc(resumed_log)) != EOF;)
    text += static_cast<char>(c);
  size_t resumes = 0;
  for (size_t at = text.find("resumed at step"); at != std::string::npos;
       at = text.find("resumed at step", at + 1))
    ++resumes;
  EXPECT_EQ(resumes, 2u) << text;
  EXPECT_EQ(file_records(o.results_path), straight);
  EXPECT_FALSE(fs::exists(ckpt)) << "checkpoints outlived their groups";
  std::fclose(log);
  std::fclose(resumed_log);
  fs::remove_all(dir);
}

// A float64 char-LM run of seven groups, one per optimizer family (gauge
// and noise twins each), 40 steps, small shape.
const std::string kCharLm =
    "--task charlm --dtype float64 "
    "--opt adam,sgd,scalar-adam,muon,shampoo,soap,adam-mini "
    "--twin gauge,noise --steps 40 --depth 1 --d-model 16 --heads 2 "
    "--ctx 16 --batch 4 --quiet --threads 1 ";

TEST(CheckpointBinary, SigkillAroundTheRenameResumesToTheStraightRecords) {
  const fs::path dir = fresh_dir("ckpt-kill");
  ASSERT_EQ(twin_run(kCharLm + "--out straight.jsonl", dir).code, 0);
  const auto straight = file_records(dir / "straight.jsonl");
  ASSERT_EQ(straight.size(), 14u);
  // Every group writes at steps 3, 6, ..., 39 (13 writes) and the process
  // counts its writes from 1. Killed three times, resuming after each: just
  // before the rename of Adam's 5th write (the file of step 12 stays, the
  // new one is left as a .tmp); just after scalar-Adam's 8th (step 24),
  // the 30th write of the second process; and just before the rename of
  // SOAP's 9th, the 40th of the third (SOAP resumes at step 24).
  const std::string every = "--checkpoint-every 3 --out killed.jsonl";
  for (const char* hook : {"rename:5", "written:30", "rename:40"}) {
    SCOPED_TRACE(hook);
    const auto o = twin_run(kCharLm + every, dir,
                            std::string("TWINS_TEST_KILL=") + hook + " ");
    EXPECT_EQ(o.code, 128 + SIGKILL) << "not killed: " << o.err;
    bool found = false;
    for (const auto& e : fs::directory_iterator(dir / "killed.jsonl.ckpt"))
      found = found || e.path().extension() == ".ckpt";
    EXPECT_TRUE(found) << "no checkpoint left by the kill";
  }
  const auto o = twin_run(kCharLm + every, dir);
  ASSERT_EQ(o.code, 0) << o.err;
  for (const char* resumed : {"group 'soap (init 42)': resumed at step 24"})
    EXPECT_NE(o.err.find(resumed), std::string::npos) << o.err;
  EXPECT_EQ(file_records(dir / "killed.jsonl"), straight);
  EXPECT_FALSE(fs::exists(dir / "killed.jsonl.ckpt"))
      << "the checkpoints outlived their groups";
  fs::remove_all(dir);
}

// A handler something else puts in place of the stop signals' while they
// live (a Python rule's signal.signal(SIGTERM, SIG_IGN)) is put back, so
// that SIGTERM still asks for a stop.
TEST(StopSignals, AReplacedHandlerIsPutBack) {
  twins::StopSignals guard(true);
  ::signal(SIGTERM, SIG_IGN);
  EXPECT_EQ(twins::restore_stop_handlers(), "SIGTERM");
  struct sigaction now = {};
  ::sigaction(SIGTERM, nullptr, &now);
  EXPECT_NE(now.sa_handler, SIG_IGN);
  EXPECT_EQ(twins::restore_stop_handlers(), "");
  ::raise(SIGTERM);
  EXPECT_EQ(twins::stop_requested(), SIGTERM);
  twins::clear_stop();
}

TEST(CheckpointBinary, SigtermSigintAndSighupCheckpointAndSayWhere) {
  const fs::path dir = fresh_dir("ckpt-signal");
  const std::string run =
      "--task charlm --dtype float64 --opt adam --steps 400 --depth 1 "
      "--d-model 16 --heads 2 --ctx 16 --batch 4 --threads 1 "
      "--checkpoint-every 1 ";
  ASSERT_EQ(twin_run(run + "--quiet --out straight.jsonl", dir).code, 0);
  const fs::path ckpt = dir / "sig.jsonl.ckpt";
  const int term = signalled_run(dir, run + "--out sig.jsonl", SIGTERM, [&] {
    std::error_code ec;
    return fs::exists(ckpt, ec) && !fs::is_empty(ckpt, ec);
  });
  const std::string err = slurp(dir / "err.txt");
  EXPECT_EQ(term, 75) << err;
  EXPECT_NE(err.find("SIGTERM: group 'adam (init 42)' stopped at step "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("rerun the same command to resume"), std::string::npos)
      << err;
  // Resumed, then interrupted from the terminal.
  const int interrupted =
      signalled_run(dir, run + "--out sig.jsonl", SIGINT, [&] {
        return slurp(dir / "err.txt").find("resumed at step") !=
               std::string::npos;
      });
  EXPECT_EQ(interrupted, 130) << slurp(dir / "err.txt");
  // Resumed again, then its terminal closed: SIGHUP checkpoints as SIGTERM.
  // (The last run's log says "resumed at step" too: gone before this one.)
  fs::remove(dir / "err.txt");
  const int hung_up = signalled_run(dir, run + "--out sig.jsonl", SIGHUP, [&] {
    return slurp(dir / "err.txt").find("resumed at step") != std::string::npos;
  });
  const std::string hup_err = slurp(dir / "err.txt");
  EXPECT_EQ(hung_up, 75) << hup_err;
  EXPECT_NE(hup_err.find("SIGHUP: group 'adam (init 42)' stopped at step "),
            std::string::npos)
      << hup_err;
  const auto o = twin_run(run + "--out sig.jsonl", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(file_records(dir / "sig.jsonl"),
            file_records(dir / "straight.jsonl"));
  EXPECT_FALSE(fs::exists(ckpt));
  fs::remove_all(dir);
}

TEST(CheckpointBinary, BadCheckpointFlagsAreRefused) {
  const fs::path dir = fresh_dir("ckpt-flags");
  const std::pair<const char*, const char*> cases[] = {
      {"--checkpoint-minutes -1", "--checkpoint-minutes: -1 is negative"},
      {"--checkpoint-minutes x", "--checkpoint-minutes: 'x' is not a number"},
      {"--checkpoint-every 1.5", "--checkpoint-every: 1.5 is not a whole"},
      {"--checkpoint-every -2", "--checkpoint-every: -2 is not a whole"}};
  for (const auto& [bad, says] : cases) {
    const auto o = twin_run(std::string("--steps 2 ") + bad, dir);
    EXPECT_NE(o.code, 0) << bad;
    EXPECT_EQ(testing_helpers::count_lines(o.err), 1) << o.err;
    EXPECT_NE(o.err.find(says), std::string::npos) << o.err;
  }
  fs::remove_all(dir);
}

}  // namespace
