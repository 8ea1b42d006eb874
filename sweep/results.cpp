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
#include <set>

#include "twins/io.h"
#include "twins/record.h"

namespace sweep {

namespace fs = std::filesystem;
using nlohmann::json;

JsonlSink::~JsonlSink() {
  if (fd_ >= 0)
    ::close(fd_);
}

void JsonlSink::append(const json& record) {
  if (fd_ < 0) {
    twins::make_directories(fs::path(path_).parent_path().string());
    fd_ =
        ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    TORCH_CHECK(fd_ >= 0, "Cannot open results file '", path_,
                "': ", std::strerror(errno));
  }
  twins::write_all(fd_, record.dump() + "\n", path_, "results file");
  TORCH_CHECK(::fsync(fd_) == 0, "Cannot sync results file '", path_,
              "': ", std::strerror(errno));
}

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
  const std::string content = twins::read_file(path, "results file");

  size_t start = 0;
  int64_t line_no = 0;
  while (start < content.size()) {
    ++line_no;
    const size_t end = content.find('\n', start);
    const bool whole = end != std::string::npos;
    const std::string line =
        content.substr(start, (whole ? end : content.size()) - start);
    if (!whole) {
      // The sink writes '\n' with the record in one write(2): a line
      // without it is what a crash mid-write leaves.
      out.truncated_tail = true;
      break;
    }
    out.whole_bytes = end + 1;
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      continue;
    }
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
      TORCH_CHECK(false, "results file '", path, "', line ", line_no,
                  ": not a JSON record (", e.what(), ")");
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "results file '", path, "', line ", line_no,
                  ": not a twin-run record (", e.what_without_backtrace(), ")");
    }
    out.records.push_back(std::move(rec));
  }
  return out;
}

void drop_truncated_tail(const ResultsFile& file) {
  if (!file.truncated_tail) {
    return;
  }
  TORCH_CHECK(
      ::truncate(file.path.c_str(), static_cast<off_t>(file.whole_bytes)) == 0,
      "Cannot repair results file '", file.path, "': ", std::strerror(errno));
}

std::vector<StoredRecord> merge_records(const std::vector<ResultsFile>& files,
                                        int* duplicates) {
  std::vector<StoredRecord> out;
  std::set<std::string> seen;
  int dups = 0;
  for (const auto& f : files) {
    for (const auto& r : f.records) {
      if (seen.insert(r.key).second) {
        out.push_back(r);
      } else {
        ++dups;
      }
    }
  }
  if (duplicates) {
    *duplicates = dups;
  }
  return out;
}

std::vector<StoredRecord> read_records(const std::vector<std::string>& files,
                                       std::FILE* log) {
  std::vector<ResultsFile> read;
  for (const auto& path : files) {
    read.push_back(read_results(path));
    if (read.back().truncated_tail) {
      fmt::print(log,
                 "twin-run: note: {}: ignoring a truncated last line (a "
                 "record interrupted mid-write)\n",
                 path);
    }
  }
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

}  // namespace sweep
