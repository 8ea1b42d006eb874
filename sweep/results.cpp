#include "sweep/results.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>

#include "twins/io.h"
#include "twins/record.h"

namespace sweep {

namespace fs = std::filesystem;
using nlohmann::json;

JsonlSink::JsonlSink(std::string path) : path_(std::move(path)) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    existed_ = true;
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
}

void JsonlSink::check_same_file(int fd) const {
  struct stat st {};
  const bool same = (fd >= 0 ? ::fstat(fd, &st) : ::stat(path_.c_str(), &st)) == 0 &&
                    st.st_dev == dev_ && st.st_ino == ino_;
  TORCH_CHECK(same, "results file '", path_,
              "' was removed or replaced while this run went on (by a "
              "Python rule?): its records are not written to a new file, "
              "which would hold this run's alone; rerun the command");
}

JsonlSink::~JsonlSink() {
  if (fd_ >= 0)
    ::close(fd_);
}

void JsonlSink::append(const json& record) {
  if (fd_ < 0) {
    if (existed_) {
      // Opened, then compared: what is written to is what was compared.
      const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
      if (fd < 0) {
        const int error = errno;
        check_same_file();  // gone: says so
        TORCH_CHECK(false, "Cannot open results file '", path_,
                    "': ", std::strerror(error));
      }
      try {
        check_same_file(fd);
      } catch (...) {
        ::close(fd);
        throw;
      }
      fd_ = fd;
    } else {
      twins::make_directories(fs::path(path_).parent_path().string());
      fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
                   0644);
    }
    TORCH_CHECK(fd_ >= 0, "Cannot open results file '", path_,
                "': ", std::strerror(errno));
    struct stat st {};
    if (!existed_ && ::fstat(fd_, &st) == 0) {
      existed_ = true;
      dev_ = st.st_dev;
      ino_ = st.st_ino;
    }
  }
  check_same_file();
  const std::string line = record.dump() + "\n";
  // Whole lines or nothing: the line and its newline in one write(2), and
  // on a short write (a full disk) the file cut back to where it was, so
  // that no reader ever sees half a record.
  struct stat st {};
  TORCH_CHECK(::fstat(fd_, &st) == 0, "Cannot write results file '", path_,
              "': ", std::strerror(errno));
  ssize_t n = -1;
  do {
    n = ::write(fd_, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(line.size())) {
    const int err = n < 0 ? errno : ENOSPC;
    const bool restored = ::ftruncate(fd_, st.st_size) == 0;
    TORCH_CHECK(false, "Cannot write results file '", path_, "': ",
                std::strerror(err),
                restored ? " (the record was not written; the file is as "
                           "it was)"
                         : " (and cutting the half record off failed: "
                           "the next run repairs it)");
  }
  TORCH_CHECK(::fsync(fd_) == 0, "Cannot sync results file '", path_,
              "': ", std::strerror(errno));
}

namespace {

// Line `line_no` of results file `path` as a record. When it is not one:
// throws naming the file and line, or for a `partial` line (the last, with
// no newline) returns nothing.
std::optional<StoredRecord> parse_record(const std::string& line,
                                         int64_t line_no,
                                         const std::string& path,
                                         bool partial) {
  StoredRecord rec;
  rec.line = line_no;
  try {
    rec.json = json::parse(line);
    TORCH_CHECK(rec.json.is_object() && rec.json.contains("key") &&
                    rec.json["key"].is_string(),
                "record has no 'key' field");
    rec.key = rec.json["key"].get<std::string>();
    rec.result = twins::from_json(rec.json);
    rec.file = path;
  } catch (const json::exception& e) {
    if (partial)
      return std::nullopt;
    TORCH_CHECK(false, "results file '", path, "', line ", line_no,
                ": not a JSON record (", e.what(), ")");
  } catch (const c10::Error& e) {
    if (partial)
      return std::nullopt;
    TORCH_CHECK(false, "results file '", path, "', line ", line_no,
                ": not a twin-run record (", e.what_without_backtrace(), ")");
  }
  return rec;
}

}  // namespace

ResultsFile read_results(const std::string& path, bool missing_ok) {
  ResultsFile out;
  out.path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    TORCH_CHECK(errno == ENOENT, "Cannot read results file '", path,
                "': ", std::strerror(errno));
    TORCH_CHECK(missing_ok, "results file '", path, "' does not exist");
    return out;
  }
  TORCH_CHECK(S_ISREG(st.st_mode), "results file '", path,
              "' is not a regular file");
  twins::protect_input(path, "results file");
  const std::string content = twins::read_file(path, "results file");

  size_t start = 0;
  int64_t line_no = 0;
  while (start < content.size()) {
    ++line_no;
    const size_t end = content.find('\n', start);
    const bool whole = end != std::string::npos;
    const std::string line =
        content.substr(start, (whole ? end : content.size()) - start);
    start = whole ? end + 1 : content.size();
    if (whole)
      out.whole_bytes = start;
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      continue;
    }
    if (!whole) {
      // The sink writes '\n' with the record in one write(2): a line
      // without it is what a crash mid-write leaves, or a complete record
      // whose newline an editor dropped (kept: it parses).
      std::optional<StoredRecord> rec = parse_record(line, line_no, path, true);
      if (rec) {
        out.records.push_back(std::move(*rec));
        out.missing_newline = true;
        break;
      }
      // Only in a file of this tool: a user's note or an image (no earlier
      // record) is not ours to cut.
      TORCH_CHECK(!out.records.empty(), "results file '", path, "', line ",
                  line_no,
                  ": not a JSON record, and no line before it is one: this "
                  "is not a twin-run results file (nothing was changed); "
                  "choose another --out");
      // Only what a crash mid-write leaves is cut: the start of a record,
      // an unfinished JSON object. A note ("# my note") or a whole object
      // that is no record is the user's.
      TORCH_CHECK(!line.empty() && line.front() == '{' &&
                      !nlohmann::json::accept(line),
                  "results file '", path, "', line ", line_no,
                  ": the last line, without its newline, is neither a "
                  "record nor the start of one (nothing was changed); a "
                  "results file holds records only");
      out.truncated_tail = true;
      break;
    }
    out.records.push_back(*parse_record(line, line_no, path, false));
  }
  merge_records({out});  // a repeated key must repeat its numbers
  return out;
}

void drop_truncated_tail(const ResultsFile& file) {
  if (file.missing_newline) {
    // The last record is whole: give it its newline, so that the next
    // record starts a line of its own.
    const int fd = ::open(file.path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    TORCH_CHECK(fd >= 0, "Cannot repair results file '", file.path,
                "': ", std::strerror(errno));
    try {
      twins::write_all(fd, "\n", file.path, "results file");
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    return;
  }
  if (!file.truncated_tail) {
    return;
  }
  TORCH_CHECK(
      ::truncate(file.path.c_str(), static_cast<off_t>(file.whole_bytes)) == 0,
      "Cannot repair results file '", file.path, "': ", std::strerror(errno));
}

namespace {

// A record's measurement: what two records of one key must agree on
// bitwise (docs/output-format.md), the fields of scheduling, the table it
// was run for and the LibTorch version left out.
json measurement(const StoredRecord& r) {
  json j = twins::without_timing(r.json);
  j.erase("table");
  j.erase("torch_version");
  j.erase("numeric_env");  // the CPU's name differs across portable runs
  return j;
}

}  // namespace

void check_same_numbers(const StoredRecord& first, const StoredRecord& again) {
  TORCH_CHECK(measurement(first) == measurement(again), "results file '",
              again.file, "', line ", again.line,
              ": a record of the same key as '", first.file, "', line ",
              first.line,
              " with other numbers; records of one key must be bitwise the "
              "same (another machine or build? see docs/output-format.md)");
}

std::vector<StoredRecord> merge_records(const std::vector<ResultsFile>& files,
                                        int* duplicates) {
  std::vector<StoredRecord> out;
  std::map<std::string, size_t> seen;  // key -> its record in out
  int dups = 0;
  for (const auto& f : files) {
    for (const auto& r : f.records) {
      const auto [it, fresh] = seen.emplace(r.key, out.size());
      if (fresh) {
        out.push_back(r);
      } else {
        check_same_numbers(out[it->second], r);
        ++dups;
      }
    }
  }
  if (duplicates) {
    *duplicates = dups;
  }
  return out;
}

void check_one_environment(const std::vector<StoredRecord>& records,
                           const twins::NumericEnv* here, bool allow,
                           const char* advice, std::FILE* log) {
  const StoredRecord* first = nullptr;  // the reference when `here` is null
  for (const auto& r : records) {
    const twins::NumericEnv& env = r.result.numeric_env;
    if (!env.known())
      continue;
    if (!here && !first) {
      first = &r;
      continue;
    }
    const std::string diff = twins::environment_difference(
        env, here ? *here : first->result.numeric_env);
    if (diff.empty())
      continue;
    const std::string than =
        here ? "this run"
             : fmt::format("'{}', line {}", first->file, first->line);
    const std::string what = fmt::format(
        "results file '{}', line {}: written under another numeric "
        "environment than {} ({}{}); its float bits need not match "
        "(docs/output-format.md)",
        r.file, r.line, than, diff, here ? ": file vs this run" : "");
    TORCH_CHECK(allow, what, "; ", advice,
                ", or pass --allow-mixed-env to mix them anyway");
    fmt::print(log, "twin-run: warning: {}; mixed as --allow-mixed-env asks\n",
               what);
    return;  // one line is enough
  }
}

std::vector<StoredRecord> read_records(const std::vector<std::string>& files,
                                       bool allow_mixed_env, std::FILE* log) {
  std::vector<ResultsFile> read;
  std::vector<StoredRecord> all;
  for (const auto& path : files) {
    read.push_back(read_results(path));
    all.insert(all.end(), read.back().records.begin(),
               read.back().records.end());
    if (read.back().truncated_tail) {
      fmt::print(log,
                 "twin-run: note: {}: ignoring a truncated last line (a "
                 "record interrupted mid-write)\n",
                 path);
    }
  }
  // Before repeated keys: records of two machines differ for that reason.
  check_one_environment(all, nullptr, allow_mixed_env,
                        "aggregate them separately", log);
  int duplicates = 0;
  std::vector<StoredRecord> records = merge_records(read, &duplicates);
  if (duplicates > 0) {
    fmt::print(log,
               "twin-run: note: {} record(s) repeat a key already read; "
               "the first of each is used\n",
               duplicates);
  }
  TORCH_CHECK(!records.empty(), "results file(s) '",
              fmt::format("{}", fmt::join(files, "', '")), "' hold no records");
  return records;
}

FileLock::FileLock(const std::string& path) {
  twins::make_directories(fs::path(path).parent_path().string());
  fd_ = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  TORCH_CHECK(fd_ >= 0, "Cannot open results file '", path,
              "': ", std::strerror(errno));
  twins::protect_input(path, "the results file");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    TORCH_CHECK(err != EWOULDBLOCK, "results file '", path,
                "' is in use by another twin-run process; wait for it or "
                "choose another --out");
    TORCH_CHECK(false, "Cannot lock results file '", path,
                "': ", std::strerror(err));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0)
    ::close(fd_);  // releases the lock
}

void check_summaries(const std::string& stem, const std::string& results) {
  if (stem.empty())
    return;
  for (const char* ext : {".md", ".csv"}) {
    const std::string path = stem + ext;
    TORCH_CHECK(!twins::same_file(path, results), "Cannot write summary '",
                path, "': it is the results file '", results, "'");
    twins::check_output_file(path, "summary");
    std::error_code ec;
    if (!fs::exists(path, ec))
      continue;
    // One that is there is replaced only if twin-run wrote it.
    const std::string text = twins::read_file(path, "summary");
    const bool own = ext[1] == 'm'
                         ? text.find(twins::kSummaryMarkdownLast) !=
                               std::string::npos
                         : text.rfind(twins::kSummaryCsvHeader, 0) == 0;
    TORCH_CHECK(own, "Cannot write summary '", path, "': a file of that name "
                "is there and twin-run did not write it (nothing was changed): "
                "move it, or choose another --out");
  }
}

}  // namespace sweep
