// The char-LM task (docs/protocol.md §4) and its twins: one seeded batch stream
// for both copies, corpus errors, and the protocol's drift bounds on a tiny
// model.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "data/charlm.h"
#include "optim/registry.h"
#include "twins/defaults.h"
#include "twins/pair.h"

namespace fs = std::filesystem;

namespace {

// 2 layers, d 32, 4 heads, ctx 16, batch 4, float64 on the shipped corpus.
twins::PairSpec tiny_lm(const std::string& opt, twins::TwinKind kind,
                        int64_t steps) {
  twins::PairSpec s;
  s.task = "charlm";
  s.opt = opt;
  s.twin = kind;
  s.steps = steps;
  s.lr = twins::default_lr(opt, "charlm");
  s.dtype = torch::kDouble;
  s.protocol = twins::Protocol::kTwins;  // protocol §2a
  s.depth = 2;
  s.d_model = 32;
  s.heads = 4;
  s.mlp = 128;
  s.ctx = 16;
  s.batch = 4;
  return s;
}

TEST(Corpus, ShippedTinyShakespeareHas65Characters) {
  const std::string path = data::default_corpus_path();
  EXPECT_EQ(fs::file_size(path), 1115394u);
  auto c = data::Corpus::load(path);
  EXPECT_EQ(c.vocab.size(), 65u);
  EXPECT_EQ(c.codepoints.size(), 1115394u);  // ASCII
  EXPECT_TRUE(std::is_sorted(c.vocab.begin(), c.vocab.end()));
}

TEST(CharLM, BatchStreamIsAPureFunctionOfSeedAndStep) {
  auto c = data::Corpus::load(data::default_corpus_path());
  data::CharLM a(c, 16, 4, 10, 42, torch::kCPU),
      b(c, 16, 4, 10, 42, torch::kCPU);
  data::CharLM other(c, 16, 4, 10, 7, torch::kCPU);
  // Same seed: the same batches, in whatever order they are asked for.
  auto a5 = a.train_batch(5);
  b.train_batch(3);
  EXPECT_TRUE(torch::equal(a5.x, b.train_batch(5).x));
  EXPECT_TRUE(torch::equal(a5.y, b.train_batch(5).y));
  EXPECT_TRUE(torch::equal(a.validation().x, b.validation().x));
  EXPECT_FALSE(torch::equal(a5.x, other.train_batch(5).x));
  // Targets are the inputs shifted by one character.
  EXPECT_TRUE(torch::equal(a5.x.narrow(1, 1, 15), a5.y.narrow(1, 0, 15)));
  EXPECT_EQ(a5.x.sizes(), (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(a.validation().x.sizes(), (std::vector<int64_t>{64, 16}));
  // Offsets within [0, len(train) - ctx - 1).
  const int64_t n_train = int64_t(c.codepoints.size()) * 9 / 10;
  EXPECT_GE(a.train_offsets().min().item<int64_t>(), 0);
  EXPECT_LT(a.train_offsets().max().item<int64_t>(), n_train - 16 - 1);
}

TEST(CharLM, TrainingOffsetsAreDrawnBeforeValidationWindows) {
  // Training offsets come first from the generator: a longer run shares the
  // first steps' batches with a shorter one, but not its validation windows.
  auto c = data::Corpus::load(data::default_corpus_path());
  data::CharLM short_run(c, 16, 4, 5, 42, torch::kCPU);
  data::CharLM long_run(c, 16, 4, 50, 42, torch::kCPU);
  EXPECT_TRUE(torch::equal(short_run.train_offsets(),
                           long_run.train_offsets().narrow(0, 0, 5)));
  EXPECT_FALSE(torch::equal(short_run.validation().x, long_run.validation().x));
}

TEST(CharLMTwins, IdentityTwinIsExactlyZero) {
  // Exact zero under a minibatch stream also proves both copies were fed
  // the same batches.
  auto r = twins::run_pair(tiny_lm("adam", twins::TwinKind::kIdentity, 5));
  ASSERT_EQ(r.status, twins::PairStatus::kOk);
  for (const auto& c : r.curve)
    EXPECT_EQ(c.logit_drift, 0.0) << c.step;
  EXPECT_EQ(r.val_loss[0], r.val_loss[1]);
}

TEST(CharLMTwins, EquivariantGaugeTwinsStayBelow1e12After3Steps) {
  for (const char* opt : {"sgd", "scalar-adam", "muon"}) {
    auto r = twins::run_pair(tiny_lm(opt, twins::TwinKind::kGauge, 3));
    ASSERT_EQ(r.status, twins::PairStatus::kOk) << opt;
    EXPECT_LE(r.curve.back().logit_drift, 1e-12) << opt;
  }
}

TEST(CharLMTwins, AdamGaugeTwinSplitsAbove1e5) {
  auto r = twins::run_pair(tiny_lm("adam", twins::TwinKind::kGauge, 3));
  EXPECT_GE(r.curve[1].logit_drift, 1e-5);
  EXPECT_GE(r.curve.back().logit_drift, 1e-5);
}

TEST(ModFloat64, EquivariantGaugeTwinsAtStep1Below1e13) {
  for (const char* opt : {"sgd", "scalar-adam", "muon"}) {
    twins::PairSpec s;  // mod47, 2L d64 4 heads
    s.opt = opt;
    s.steps = 1;
    s.dtype = torch::kDouble;
    s.protocol = twins::Protocol::kTwins;  // protocol §2a
    s.lr = twins::default_lr(opt, "mod47");
    auto r = twins::run_pair(s);
    EXPECT_LE(r.curve.back().logit_drift, 1e-13) << opt;
  }
}

// Corpus errors name the file and the problem in one line.
std::string load_error(const std::string& path, int64_t ctx = 16) {
  try {
    auto c = data::Corpus::load(path);
    data::CharLM t(c, ctx, 4, 3, 42, torch::kCPU);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(Corpus, ErrorsNameTheFileAndTheProblem) {
  const fs::path dir = fs::temp_directory_path() / "twins-corpus-test";
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  };
  const std::string missing = (dir / "missing.txt").string();
  EXPECT_NE(load_error(missing).find("'" + missing + "': no such file"),
            std::string::npos);
  const std::string empty = write("empty.txt", "");
  EXPECT_NE(load_error(empty).find("'" + empty + "' is empty"),
            std::string::npos);
  const std::string tiny = write("tiny.txt", std::string(100, 'a'));
  const std::string msg = load_error(tiny, 16);
  EXPECT_NE(msg.find("has 100 characters"), std::string::npos) << msg;
  EXPECT_NE(msg.find("context 16"), std::string::npos) << msg;
  const std::string binary = write("bin.txt", std::string("ab\xff\xfe", 4));
  EXPECT_NE(load_error(binary).find("not UTF-8"), std::string::npos);
  EXPECT_NE(load_error(dir.string()).find("directory"), std::string::npos);
  // Long enough: 10 * (ctx + 2) characters.
  EXPECT_EQ(load_error(write("ok.txt", std::string(180, 'b') + "c"), 16), "");
  fs::remove_all(dir);
}

// `--data <(zcat corpus.gz)`: a pipe gives its text once; every later load
// of the same pipe in the process is that text (it read as empty before).
// A FIFO nobody writes to, or whose writer stops writing without closing
// it, is an error after the wait (it blocked forever before).
TEST(Corpus, APipeIsReadOnceAndKeptAndNeverWaitedForForever) {
  const fs::path dir = fs::temp_directory_path() / "twins-corpus-pipe";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path fifo = dir / "corpus";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string text = "to be or not to be\n";
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << text; });
  const auto first = data::Corpus::load(fifo.string());
  writer.join();
  // No writer now: the pipe is not read again (a read would wait).
  const auto t0 = std::chrono::steady_clock::now();
  const auto second = data::Corpus::load(fifo.string(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_EQ(first.codepoints.size(), text.size());
  EXPECT_EQ(second.codepoints, first.codepoints);
  EXPECT_EQ(second.sha256, first.sha256);

  auto load_error = [](const fs::path& p) {
    try {
      data::Corpus::load(p.string(), 1);
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("loaded");
  };
  // Never opened for writing: refused after the wait, naming it.
  const fs::path silent = dir / "silent";
  ASSERT_EQ(::mkfifo(silent.c_str(), 0600), 0);
  std::string msg = load_error(silent);
  EXPECT_NE(msg.find("'" + silent.string() + "': it is a named pipe that "
                     "gave nothing in 1 s"),
            std::string::npos) << msg;
  // A writer that writes, then holds the pipe open and writes no more.
  const fs::path stalled = dir / "stalled";
  ASSERT_EQ(::mkfifo(stalled.c_str(), 0600), 0);
  std::atomic<bool> done{false};
  std::thread holder([&] {
    const int fd = ::open(stalled.c_str(), O_WRONLY);
    if (fd < 0)
      return;
    (void)!::write(fd, "abc", 3);
    while (!done)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::close(fd);
  });
  msg = load_error(stalled);
  done = true;
  holder.join();
  EXPECT_NE(msg.find("gave nothing more in 1 s"), std::string::npos) << msg;
  // An anonymous pipe (`<(python prep.py)`) has its writer: it is waited
  // for past the named pipe's limit.
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    (void)!::write(ends[1], text.data(), text.size());
    ::close(ends[1]);
  });
  msg = load_error("/proc/self/fd/" + std::to_string(ends[0]));
  producer.join();
  ::close(ends[0]);
  EXPECT_EQ(msg, "loaded");
  fs::remove_all(dir);
}

TEST(Corpus, Utf8TextGivesCodePointVocabulary) {
  const fs::path p = fs::temp_directory_path() / "twins-utf8.txt";
  std::ofstream(p, std::ios::binary) << "h\xc3\xa9h\xe2\x82\xac";  // h é h €
  auto c = data::Corpus::load(p.string());
  EXPECT_EQ(c.codepoints, (std::vector<int32_t>{'h', 0xE9, 'h', 0x20AC}));
  EXPECT_EQ(c.vocab, (std::vector<int32_t>{'h', 0xE9, 0x20AC}));
  fs::remove(p);
}

}  // namespace
