// Nothing a user types destroys a result: outputs never replace an input, a
// device, a directory or a link; a foreign file is never taken for a
// truncated results file; appends leave whole lines only; a char-LM key
// sees its corpus's content; every bad value is refused before any work.
// Each case runs the twin-run binary (or the library) and checks the files
// byte for byte afterwards.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "binary_helpers.h"
#include "data/sha256.h"
#include "sweep/results.h"
#include "twins/io.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using namespace testing_helpers;  // tests/binary_helpers.h



// `args` in `dir` fails with one line on stderr mentioning `mention`.
void expect_refused(const std::string& args, const std::string& mention,
                    const fs::path& dir) {
  const Outcome o = twin_run(args, dir);
  EXPECT_NE(o.code, 0) << args;
  EXPECT_EQ(count_lines(o.err), 1) << args << "\n" << o.err;
  EXPECT_NE(o.err.find(mention), std::string::npos) << args << " -> " << o.err;
}

// The files under `dir` but the helper's own stdout/stderr captures.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name != "stdout.txt" && name != "stderr.txt")
      out.push_back(e.path().lexically_relative(dir).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

// ===========================================================================
// Outputs never clobber results or inputs

// A results file named like a summary (.md, .csv) or a figure would be
// overwritten by its own summary at the end of the run: refused before any
// step, and a file already there is left as it was.
TEST(Outputs, AResultsFileNamedLikeASummaryIsRefusedBeforeAnyWork) {
  const fs::path dir = fresh_dir("summary-name");
  spit(dir / "r.md", "my notes\n");
  expect_refused("table table3 --steps 1 --shard 1/4 --quiet --out r.md",
                 "r.md", dir);
  expect_refused("merge --opt sgd --steps 2 --quiet --out r.csv", "r.csv", dir);
  expect_refused(kPair + " --out fig.svg", "fig.svg", dir);
  EXPECT_EQ(slurp(dir / "r.md"), "my notes\n");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"r.md"});
  fs::remove_all(dir);
}

// Aggregating or plotting a results file whose name ends like an output
// writes beside it under a name derived from its whole name, never over it;
// naming an input as the output is refused.
TEST(Outputs, AggregateAndPlotNeverWriteOverTheirInputs) {
  const fs::path dir = fresh_dir("inputs");
  ASSERT_EQ(twin_run(kPair + " --out a.jsonl", dir).code, 0);
  const std::string records = slurp(dir / "a.jsonl");
  for (const char* name : {"res.md", "res.csv", "in.svg"})
    spit(dir / name, records);

  Outcome o = twin_run("table --aggregate res.md", dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(slurp(dir / "res.md"), records);
  EXPECT_TRUE(fs::exists(dir / "res.md.md"));
  EXPECT_TRUE(fs::exists(dir / "res.md.csv"));
  o = twin_run("table --aggregate res.csv", dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(slurp(dir / "res.csv"), records);

  twin_run("plot in.svg", dir);  // with or without gnuplot
  EXPECT_EQ(slurp(dir / "in.svg"), records);
  expect_refused("plot in.svg -o in.svg", "input", dir);
  EXPECT_EQ(slurp(dir / "in.svg"), records);
  // The same file by another name is the same input.
  expect_refused("plot in.svg -o ./in.svg", "input", dir);
  EXPECT_EQ(slurp(dir / "in.svg"), records);
  fs::remove_all(dir);
}

// A name with a newline ($'new\nline.svg') would cut the one-line error
// that names it and break the gnuplot script that reads it: refused before
// anything is written, shown escaped; no .dat, .gp or log left behind.
TEST(Outputs, ANameWithANewlineIsRefusedBeforeAnythingIsWritten) {
  const fs::path dir = fresh_dir("newline");
  ASSERT_EQ(twin_run(kPair + " --out a.jsonl", dir).code, 0);
  const std::vector<std::string> before = files_in(dir);
  expect_refused("plot a.jsonl -o 'out/new\nline.svg'",
                 "Cannot write plot file 'out/new\\nline", dir);
  expect_refused(kPair + " --out 'new\nline.jsonl'",
                 "'new\\nline.jsonl': the name holds a control character",
                 dir);
  expect_refused(kPair + " --out a2.jsonl --save-models 'm\tdir'",
                 "'m\\tdir'", dir);
  EXPECT_EQ(files_in(dir), before);
  fs::remove_all(dir);
}

// The atomic save renames over its target: only a regular file (or a new
// path) may be there. A directory, a pipe, a symbolic link and a device are
// refused and left as they were.
TEST(Outputs, SavesReplaceOnlyRegularFiles) {
  const fs::path dir = fresh_dir("saves");
  fs::create_directories(dir / "d");
  const std::string fifo = (dir / "p").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  spit(dir / "target.txt", "keep me\n");
  fs::create_symlink(dir / "target.txt", dir / "link.md");

  std::string e = error_of([&] {
    twins::write_text_atomically((dir / "d").string(), "x");
  });
  EXPECT_NE(e.find("a directory"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_directory(dir / "d"));
  e = error_of([&] { twins::write_text_atomically(fifo, "x"); });
  EXPECT_NE(e.find("a pipe"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_fifo(fifo));
  e = error_of([&] {
    twins::write_text_atomically((dir / "link.md").string(), "x");
  });
  EXPECT_NE(e.find("symbolic link"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_symlink(dir / "link.md"));
  EXPECT_EQ(slurp(dir / "target.txt"), "keep me\n");
  // Checked, never written: the test must not be able to replace it.
  e = error_of([] { twins::check_output_file("/dev/null", "--out"); });
  EXPECT_NE(e.find("a device"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  // No temporary left behind by the refusals.
  EXPECT_EQ(files_in(dir),
            (std::vector<std::string>{"d", "link.md", "p", "target.txt"}));
  fs::remove_all(dir);
}

// A file marked as an input is refused as a save target under any name.
TEST(Outputs, AnInputIsNeverReplacedWhateverItIsCalled) {
  const fs::path dir = fresh_dir("protect");
  const std::string path = (dir / "in.jsonl").string();
  spit(path, "data\n");
  twins::protect_input(path, "results file");
  fs::create_hard_link(path, dir / "alias.md");
  for (const std::string& name :
       {path, (dir / "." / "in.jsonl").string(), (dir / "alias.md").string()}) {
    const std::string e =
        error_of([&] { twins::write_text_atomically(name, "x"); });
    EXPECT_NE(e.find("an input of this command"), std::string::npos)
        << name << ": " << e;
  }
  EXPECT_EQ(slurp(path), "data\n");
  fs::remove_all(dir);
}

// bench checks its --out before it benchmarks anything.
TEST(Outputs, BenchChecksItsOutBeforeRunning) {
  const fs::path dir = fresh_dir("bench-out");
  fs::create_directories(dir / "out.json");
  const Outcome o =
      twin_run("bench --quick --rows mod47-f32 --out out.json", dir);
  EXPECT_NE(o.code, 0);
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("a directory"), std::string::npos) << o.err;
  EXPECT_EQ(o.out, "");  // no benchmark table: nothing ran
  EXPECT_TRUE(fs::is_directory(dir / "out.json"));
  fs::remove_all(dir);
}

// bench writes one JSON object: never over results (by their .jsonl name or
// their content), a summary or any other file; over its own file, yes.
TEST(Outputs, BenchNeverReplacesAnotherKindOfFile) {
  const fs::path dir = fresh_dir("bench-kind");
  const std::string bench = "bench --quick --rows mod47-f32 --repeats 1 ";
  const std::string record = "{\"key\":\"x\",\"schema\":9}\n";
  spit(dir / "r.json", record);
  spit(dir / "notes.json", "hello\n");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"r.jsonl", "names a results file"},
      {"r.json", "is not a twin-run benchmark file"},
      {"notes.json", "is not a twin-run benchmark file"}};
  for (const auto& [out, message] : refused) {
    const Outcome o = twin_run(bench + "--out " + out, dir);
    EXPECT_NE(o.code, 0) << out;
    EXPECT_EQ(count_lines(o.err), 1) << o.err;
    EXPECT_NE(o.err.find(message), std::string::npos) << o.err;
    EXPECT_EQ(o.out, "") << out;  // refused before anything ran
  }
  EXPECT_FALSE(fs::exists(dir / "r.jsonl"));
  EXPECT_EQ(slurp(dir / "r.json"), record);
  EXPECT_EQ(slurp(dir / "notes.json"), "hello\n");
  // Its own file is replaced by a rerun.
  ASSERT_EQ(twin_run(bench + "--out b.json", dir).code, 0);
  const Outcome again = twin_run(bench + "--out b.json", dir);
  EXPECT_EQ(again.code, 0) << again.err;
  fs::remove_all(dir);
}

// One results file per table: a second table, or a run that is not a
// table, is refused before it writes anything into the first's file, its
// summaries or its lock; and a table is never aggregated from none of its
// records.
// A summary, figure, script or data file that is there is replaced only
// when twin-run wrote it (docs/output-format.md): a user's t.md, t.csv,
// fig2.gp or u.svg beside the results is refused, never replaced, and a
// run stops before its first step.
TEST(Outputs, AUsersFileBesideTheResultsIsNeverReplaced) {
  const fs::path dir = fresh_dir("users-files");
  const std::string mine = "my own notes\n";
  for (const char* name : {"t.md", "t.csv"}) {
    spit(dir / name, mine);
    expect_refused("table table3 --steps 1 --quiet --out t.jsonl",
                   std::string("Cannot write summary '") + name +
                       "': a file of that name is there and twin-run did "
                       "not write it",
                   dir);
    EXPECT_EQ(slurp(dir / name), mine);
    EXPECT_FALSE(fs::exists(dir / "t.jsonl"));
    fs::remove(dir / name);
  }
  // twin-run's own summaries are replaced.
  ASSERT_EQ(twin_run("table table3 --steps 1 --quiet --out t.jsonl", dir).code,
            0);
  ASSERT_EQ(twin_run("table table3 --aggregate t.jsonl", dir).code, 0);
  // A figure's script of the user's, and a figure with no script of
  // twin-run's beside it.
  ASSERT_EQ(twin_run(kPair + " --out seed.jsonl", dir).code, 0);
  spit(dir / "fig2.gp", mine);
  expect_refused("plot seed.jsonl -o fig2.svg",
                 "Cannot write plot file 'fig2.gp': a file of that name", dir);
  EXPECT_EQ(slurp(dir / "fig2.gp"), mine);
  spit(dir / "t.svg", mine);
  expect_refused("table table3 --aggregate t.jsonl --plot",
                 "Cannot write plot file 't.svg'", dir);
  EXPECT_EQ(slurp(dir / "t.svg"), mine);
  // Its own plot files are replaced: drawn twice.
  ASSERT_EQ(twin_run("plot seed.jsonl -o own.svg", dir).code, 0);
  EXPECT_EQ(twin_run("plot seed.jsonl -o own.svg", dir).code, 0);
  fs::remove_all(dir);
}

TEST(Outputs, ATableNeverAppendsToAnotherTablesFile) {
  const fs::path dir = fresh_dir("two-tables");
  ASSERT_EQ(twin_run("table table3 --steps 2 --quiet --out t3.jsonl", dir).code,
            0);
  const std::vector<std::string> before = files_in(dir);
  const std::string records = slurp(dir / "t3.jsonl");
  const std::string summary = slurp(dir / "t3.md");
  expect_refused("table zoo --steps 2 --quiet --out t3.jsonl",
                 "holds records of table table3", dir);
  expect_refused(kPair + " --out t3.jsonl", "holds records of table table3",
                 dir);
  EXPECT_EQ(files_in(dir), before);
  EXPECT_EQ(slurp(dir / "t3.jsonl"), records);
  EXPECT_EQ(slurp(dir / "t3.md"), summary);
  // ... and a table into a file of plain runs.
  ASSERT_EQ(twin_run(kPair + " --out plain.jsonl", dir).code, 0);
  expect_refused("table table3 --steps 2 --quiet --out plain.jsonl",
                 "holds records of runs that are not a table", dir);
  // ... and the same table at another setting (its summary would be
  // replaced by one of mixed records, which --aggregate then refuses).
  expect_refused("table table3 --steps 3 --quiet --out t3.jsonl",
                 "holds table table3 at another setting (table3-steps2, line "
                 "1) and this run is table3-steps3",
                 dir);
  EXPECT_EQ(slurp(dir / "t3.jsonl"), records);
  EXPECT_EQ(slurp(dir / "t3.md"), summary);
  // The same table resumes into its own file.
  EXPECT_EQ(twin_run("table table3 --steps 2 --quiet --out t3.jsonl", dir).code,
            0);
  // Aggregating a table from records none of which is its pair (lion is
  // not among Table 3's rules) would write an empty table: refused; its own
  // records aggregate.
  ASSERT_EQ(twin_run("--opt lion --steps 1 --quiet --out lion.jsonl", dir).code,
            0);
  const std::vector<std::string> files = files_in(dir);
  expect_refused("table table3 --aggregate lion.jsonl",
                 "no record of lion.jsonl is a pair of table table3", dir);
  EXPECT_EQ(files_in(dir), files);
  EXPECT_EQ(twin_run("table table3 --aggregate t3.jsonl", dir).code, 0);
  fs::remove_all(dir);
}

// ===========================================================================
// Reading and appending results files

// A user's one-line note, or binary bytes, without a final newline is not a
// results file with a truncated last line: refused, not cut.
TEST(Results, AForeignFileWithoutANewlineIsNeverCut) {
  const fs::path dir = fresh_dir("foreign");
  const std::string note = "remember to buy milk";
  const std::string image("\x89PNG\r\x1a\x00\x00\x00\rIHDR", 14);  // its 14 bytes
  spit(dir / "notes.txt", note);
  spit(dir / "image.png.jsonl", image);
  expect_refused(kPair + " --out notes.txt", "not a twin-run results file",
                 dir);
  expect_refused(kPair + " --out image.png.jsonl",
                 "not a twin-run results file", dir);
  EXPECT_EQ(slurp(dir / "notes.txt"), note);
  EXPECT_EQ(slurp(dir / "image.png.jsonl"), image);
  fs::remove_all(dir);
}

// A whole record whose newline was lost (an editor) is kept, not rerun; the
// next record starts a line of its own.
TEST(Results, AWholeLastRecordWithoutItsNewlineIsKept) {
  const fs::path dir = fresh_dir("no-newline");
  ASSERT_EQ(twin_run(kPair + " --twin gauge,identity --out r.jsonl", dir).code,
            0);
  std::string text = slurp(dir / "r.jsonl");
  ASSERT_EQ(count_lines(text), 2);
  text.pop_back();
  spit(dir / "r.jsonl", text);
  const Outcome o =
      twin_run(kPair + " --twin gauge,identity,noise --out r.jsonl", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("1 run now"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("2 already recorded"), std::string::npos) << o.out;
  const std::string after = slurp(dir / "r.jsonl");
  EXPECT_EQ(after.substr(0, text.size() + 1), text + "\n");
  EXPECT_EQ(sweep::read_results((dir / "r.jsonl").string()).records.size(), 3u);
  fs::remove_all(dir);
}

// After the records, a note without its newline — a comment, or a whole
// JSON object that is no record — is the user's: refused, never cut (only
// the start of a record, what a crash mid-write leaves, is cut).
TEST(Results, AUsersNoteAfterTheRecordsIsNeverCut) {
  const fs::path dir = fresh_dir("note-after");
  ASSERT_EQ(twin_run(kPair + " --out r.jsonl", dir).code, 0);
  const std::string records = slurp(dir / "r.jsonl");
  for (const std::string note : {"# my note", "{\"my\": \"note\"}"}) {
    spit(dir / "r.jsonl", records + note);
    expect_refused(kPair + " --twin gauge,identity --out r.jsonl",
                   "neither a record nor the start of one", dir);
    EXPECT_EQ(slurp(dir / "r.jsonl"), records + note) << note;
  }
  // The start of a record is cut, and the run goes on.
  spit(dir / "r.jsonl", records + "{\"key\": \"abc");
  const Outcome o = twin_run(kPair + " --twin gauge,identity --out r.jsonl", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string after = slurp(dir / "r.jsonl");
  EXPECT_EQ(after.substr(0, records.size()), records);
  EXPECT_EQ(sweep::read_results((dir / "r.jsonl").string()).records.size(), 2u);
  fs::remove_all(dir);
}

// A short write (here: the file-size limit, as a full disk would) leaves
// the file as it was, not with half a record; the error says so.
TEST(Results, AnAppendIsWholeOrNothingOnAShortWrite) {
  const fs::path dir = fresh_dir("short-write");
  const std::string path = (dir / "r.jsonl").string();
  const json rec = {{"key", "k"}, {"pad", std::string(500, 'x')}};
  sweep::JsonlSink sink(path);
  sink.append(rec);
  const auto before = fs::file_size(path);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* previous = ::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = before + 100;  // room for a fifth of the next line
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string e = error_of([&] { sink.append(rec); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, previous);
  EXPECT_NE(e.find("the file is as it was"), std::string::npos) << e;
  EXPECT_EQ(fs::file_size(path), before);
  EXPECT_EQ(slurp(path), rec.dump() + "\n");
  fs::remove_all(dir);
}

// Two records of one key must be bitwise the same; another number is an
// error naming the line, an exact repeat is not.
TEST(Results, ARepeatedKeyWithOtherNumbersIsRefused) {
  const fs::path dir = fresh_dir("repeat");
  ASSERT_EQ(twin_run(kPair + " --out r.jsonl", dir).code, 0);
  const std::string line = slurp(dir / "r.jsonl");
  json other = json::parse(line);
  other["val_loss"][0] = other["val_loss"][0].get<double>() + 1;
  spit(dir / "same.jsonl", line + line);
  spit(dir / "other.jsonl", line + other.dump() + "\n");
  EXPECT_EQ(twin_run(kPair + " --out same.jsonl", dir).code, 0);
  expect_refused(kPair + " --out other.jsonl", "line 2", dir);
  expect_refused("table --aggregate other.jsonl", "other numbers", dir);
  expect_refused("table --aggregate r.jsonl other.jsonl", "other numbers", dir);
  fs::remove_all(dir);
}

// An aggregate puts each figure in one cell: records of two settings (of no
// table, or of one table at two step counts) are refused, not mixed; plain
// records get a note that their layout is inferred.
TEST(Results, AnAggregateNeverMixesTwoSettings) {
  const fs::path dir = fresh_dir("settings");
  ASSERT_EQ(twin_run("--opt sgd --steps 1 --quiet --out a.jsonl", dir).code, 0);
  ASSERT_EQ(twin_run("--opt sgd --steps 2 --quiet --out b.jsonl", dir).code, 0);
  expect_refused("table --aggregate a.jsonl b.jsonl", "another setting", dir);
  const Outcome o = twin_run("table --aggregate a.jsonl", dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("name no table"), std::string::npos) << o.out;
  for (const char* steps : {"1", "2"}) {
    ASSERT_EQ(twin_run(std::string("table table3 --quiet --steps ") + steps +
                           " --out t" + steps + ".jsonl",
                       dir)
                  .code,
              0);
  }
  expect_refused("table --aggregate t1.jsonl t2.jsonl",
                 "table3 at two settings", dir);
  fs::remove_all(dir);
}

// ===========================================================================
// The char-LM key sees its corpus's content

// FIPS 180-2, Appendix B.1 and B.2 (one- and two-block messages), and the
// digest of the empty string (as `sha256sum /dev/null` prints it).
TEST(Corpus, Sha256MatchesThePublishedExamples) {
  EXPECT_EQ(data::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(data::sha256_hex(
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(data::sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Corpus, TheCharlmKeyFollowsTheTextNotThePath) {
  const fs::path dir = fresh_dir("corpus");
  std::string text;
  for (int i = 0; i < 60; ++i)
    text += "To be, or not to be: that is the question.\n";
  spit(dir / "c.txt", text);
  const std::string lm =
      "--task charlm --opt sgd --steps 1 --depth 1 --d-model 8 --heads 2 "
      "--mlp 16 --ctx 8 --batch 2 --quiet --out r.jsonl ";
  Outcome o = twin_run(lm + "--data c.txt", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  const json rec = json::parse(slurp(dir / "r.jsonl"));
  EXPECT_EQ(rec["corpus_sha256"], data::sha256_hex(text));
  EXPECT_NE(rec["key"].get<std::string>().find(data::sha256_hex(text)),
            std::string::npos);
  // The same file by another name: the same pair, already recorded.
  o = twin_run(lm + "--data ./c.txt", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("1 already recorded"), std::string::npos) << o.out;
  // Another text under the same name: refused, the file untouched.
  const std::string before = slurp(dir / "r.jsonl");
  spit(dir / "c.txt", text + "Whether 'tis nobler in the mind to suffer\n");
  expect_refused(lm + "--data c.txt", "another text of the corpus", dir);
  EXPECT_EQ(slurp(dir / "r.jsonl"), before);
  fs::remove_all(dir);
}

// ===========================================================================
// --save-models

// Refused at once: the run below would train for minutes (the time limit
// turns a late failure into a failed test) before its first save.
TEST(SaveModels, ABadTargetIsRefusedBeforeTheFirstStep) {
  const fs::path dir = fresh_dir("save-target");
  spit(dir / "models", "a file\n");
  const Outcome o = twin_run(
      "--opt sgd --steps 1000000 --quiet --out r.jsonl --save-models models",
      dir, "timeout 60 ");
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(count_lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("--save-models 'models': it is a file"),
            std::string::npos)
      << o.err;
  EXPECT_FALSE(fs::exists(dir / "r.jsonl"));
  EXPECT_EQ(slurp(dir / "models"), "a file\n");
  fs::remove_all(dir);
}

// Resuming with --save-models saves the pairs it runs and says that the
// pairs already recorded are not saved.
TEST(SaveModels, AResumeSaysWhichPairsItSaves) {
  const fs::path dir = fresh_dir("save-resume");
  ASSERT_EQ(twin_run(kPair + " --out r.jsonl", dir).code, 0);
  const Outcome o = twin_run(
      kPair + " --twin gauge,identity --out r.jsonl --save-models m", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("1 pair(s) already recorded"), std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("not saved"), std::string::npos) << o.err;
  size_t saved = 0;
  for (const auto& e : fs::directory_iterator(dir / "m"))
    saved += fs::is_directory(e.path());
  EXPECT_EQ(saved, 1u);
  fs::remove_all(dir);
}

// ===========================================================================
// Values refused before any work

struct Bad {
  std::string args;
  std::string mention;
};

void PrintTo(const Bad& b, std::ostream* os) {
  *os << b.args;
}

class Refused : public ::testing::TestWithParam<Bad> {};

// One line naming the value, a non-zero exit, and no file at all.
TEST_P(Refused, BeforeAnyFileIsWritten) {
  const fs::path dir = fresh_dir("refused");
  expect_refused(GetParam().args, GetParam().mention, dir);
  EXPECT_EQ(files_in(dir), std::vector<std::string>{}) << GetParam().args;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    EmptyValues, Refused,
    ::testing::Values(
        Bad{"--opt '' --steps 1", "--opt: empty value"},
        Bad{"--opt sgd --twin '' --steps 1", "--twin: empty value"},
        Bad{"--opt sgd --twin-seed '' --steps 1", "--twin-seed: empty value"},
        Bad{"--opt sgd --dtype '' --steps 1", "--dtype: empty value"},
        Bad{"--opt sgd --steps 1 --out ''", "--out: empty value"},
        Bad{"--opt sgd --steps 1 --out=", "--out: empty value"},
        Bad{"--task charlm --data '' --steps 1", "--data: empty value"},
        Bad{"merge --opt sgd --merge-at '' --steps 2",
            "--merge-at: empty value"},
        Bad{"verdict --opt sgd --p '' --steps 1", "--p: empty value"},
        Bad{"verdict --opt adam-p --p 0.3,,0.5 --steps 1",
            "--p: empty element in '0.3,,0.5'"},
        Bad{"bench --quick --rows ''", "--rows: empty value"}));

INSTANTIATE_TEST_SUITE_P(
    OutOfRange, Refused,
    ::testing::Values(
        Bad{"--opt sgd --lr 1e39 --steps 1",
            "--lr 1e+39 is out of range for float32"},
        // A rate from the rule's name is not called --lr.
        Bad{"--opt 'torch:Adam{\"lr\": 1e39}' --steps 1",
            "the default learning rate 1e+39 of 'torch:Adam{\"lr\":1e+39}' "
            "is out of range for float32"},
        Bad{"--opt sgd --twin noise --noise-scale 1e300 --steps 1",
            "--noise-scale 1e+300 is out of range for float32"},
        Bad{"--opt sgd --twin noise --noise-scale 1e300 --dtype float64 "
            "--steps 1",
            "--noise-scale 1e+300 is out of range for float64"},
        Bad{"--opt sgd --data-seed -1 --steps 1", "'-1' is not a seed"},
        Bad{"verdict --opt sgd --init-seed -1 --steps 1",
            "'-1' is not a seed"},
        Bad{"--opt sgd --init-seed 18446744073709551616 --steps 1",
            "from 0 to 18446744073709551615"},
        Bad{"--opt sgd --twin noise --noise-scale 1e400 --steps 1",
            "'1e400' is out of range"},
        Bad{"--opt sgd --lr 1e-401 --steps 1", "'1e-401' is out of range"},
        Bad{"--opt sgd --device cuda:abc --steps 1", "malformed device index"},
        Bad{"--opt sgd --device cuda:-1 --steps 1", "malformed device index"},
        Bad{"--opt sgd --device cuda: --steps 1", "malformed device index"},
        Bad{"--opt sgd --task mod047 --steps 1", "mod047"}));

INSTANTIATE_TEST_SUITE_P(
    FlagsThatDoNotApply, Refused,
    ::testing::Values(
        Bad{"merge --models m --opt lion --steps 7",
            "--opt: does not apply with --models"},
        Bad{"--task mod47 --data x --steps 1", "--data applies to --task "
                                                "charlm only"},
        Bad{"--opt sgd --ctx 9 --steps 1", "--ctx applies to --task charlm"},
        Bad{"--twin gauge --steps 1", "--twin gauge without --opt"},
        Bad{"--opt sgd --twin identity --twin-seed 7 --steps 1",
            "--twin-seed applies to the twins drawn from a seed"},
        Bad{"--opt sgd --twin gauge --noise-scale 1e-3 --steps 1",
            "--noise-scale applies to --twin noise; --twin gauge has no "
            "noise twin"},
        Bad{"bench --quick --rows mod47-f32,mod47-f32",
            "'mod47-f32' appears twice"},
        Bad{"table table3 --steps 1 --shard 8/8", "would be empty"}));

// Corpora that never end, and a path the records could not hold: refused
// before step 0 (a path in another encoding used to train every step and
// then fail the record's write).
INSTANTIATE_TEST_SUITE_P(
    Corpora, Refused,
    ::testing::Values(
        Bad{"--task charlm --data /dev/zero --steps 1",
            "'/dev/zero': it is a device or a socket, not a text file"},
        Bad{"--task charlm --data 'c\xff.txt' --steps 1",
            "--data 'c\xef\xbf\xbd.txt' is not UTF-8 text"}));

// A corpus larger than the memory can hold is refused by the memory check,
// which counts it (kCorpusBytesPerByte of its file), before it is read: a
// sparse file of 1 TB would otherwise be read until the kernel's
// out-of-memory killer ends the run.
TEST(Corpus, OneTheMemoryCannotHoldIsRefusedBeforeItIsRead) {
  const fs::path dir = fresh_dir("big-corpus");
  { std::ofstream(dir / "big.txt"); }
  fs::resize_file(dir / "big.txt", uintmax_t(1000) * 1000 * 1000 * 1000);
  expect_refused("--task charlm --data big.txt --steps 1",
                 "Not enough memory", dir);
  expect_refused("--task charlm --data big.txt --steps 1",
                 "a corpus of 1.0 TB", dir);
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"big.txt"});
  fs::remove_all(dir);
}

// The largest seed is a seed: accepted and recorded as given.
TEST(Values, TheLargestSeedIsAccepted) {
  const fs::path dir = fresh_dir("big-seed");
  const Outcome o = twin_run(
      kPair + " --init-seed 18446744073709551615 --out r.jsonl", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  const json rec = json::parse(slurp(dir / "r.jsonl"));
  EXPECT_EQ(rec["init_seed"].get<uint64_t>(), 18446744073709551615ull);
  fs::remove_all(dir);
}

}  // namespace

// ---------------------------------------------------------------------------
// Overflow is divergence, not nondeterminism: Lion at lr 1e30 keeps its
// losses finite while its weights leave the float range (every QK drift
// non-finite from step 1). Its pairs are recorded as diverged at step 1,
// and the verdict is "undetermined (diverged)" naming each twin, for Lion
// and for Adam (whose loss turns non-finite at step 3).
TEST(Overflow, HugeLearningRatesAreDivergedNotNondeterministic) {
  const fs::path dir = fresh_dir("overflow");
  const Outcome o = twin_run(
      "verdict --opt lion,adam --lr 1e30 --steps 3 --out v.jsonl --quiet", dir);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out.find("nondeterministic"), std::string::npos) << o.out;
  for (const char* opt : {"lion", "adam"}) {
    const size_t at = o.out.find(std::string(opt) + " ");
    ASSERT_NE(at, std::string::npos) << o.out;
    const std::string line = o.out.substr(at, o.out.find('\n', at) - at);
    EXPECT_NE(line.find("undetermined (diverged)"), std::string::npos) << line;
    EXPECT_NE(line.find("identity diverged at step"), std::string::npos)
        << line;
  }
  std::ifstream in(dir / "v.jsonl");
  int lion = 0;
  for (std::string line; std::getline(in, line);) {
    const json r = json::parse(line);
    EXPECT_EQ(r["status"], "diverged") << r["key"];
    if (r["opt"] == "lion") {
      ++lion;
      EXPECT_EQ(r["diverged_step"], 1) << r["key"];
      EXPECT_EQ(r["curve"].size(), 1u) << "the curve ends before step 1";
    }
  }
  EXPECT_EQ(lion, 5);  // the verdict's five twins
  fs::remove_all(dir);
}
