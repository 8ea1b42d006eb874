// JSONL results file: one whole line per pair, appended, flushed and
// fsync'd, so a crash leaves at most a truncated last line.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace twins {

class JsonlSink {
 public:
  // Nothing is created until the first append: a run that fails before its
  // first pair ends leaves no file behind.
  explicit JsonlSink(std::string path) : path_(std::move(path)) {}
  ~JsonlSink();
  JsonlSink(const JsonlSink&) = delete;
  JsonlSink& operator=(const JsonlSink&) = delete;

  // Writes record.dump() + '\n' in one write(2); throws naming the file.
  void append(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// A path that does not exist yet: runs/<stem>-YYYYmmdd-HHMMSS[-N].jsonl.
std::string fresh_results_path(const std::string& dir,
                               const std::string& stem);

}  // namespace twins
