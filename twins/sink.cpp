#include "twins/sink.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <c10/util/Exception.h>
#include <fmt/format.h>

namespace twins {

namespace fs = std::filesystem;

JsonlSink::~JsonlSink() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonlSink::append(const nlohmann::json& record) {
  if (fd_ < 0) {
    const fs::path parent = fs::path(path_).parent_path();
    std::error_code ec;
    if (!parent.empty()) fs::create_directories(parent, ec);
    TORCH_CHECK(!ec, "Cannot create directory '", parent.string(),
                "': ", ec.message());
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
                 0644);
    TORCH_CHECK(fd_ >= 0, "Cannot open results file '", path_,
                "': ", std::strerror(errno));
  }
  const std::string line = record.dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    TORCH_CHECK(n > 0, "Cannot write results file '", path_,
                "': ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  TORCH_CHECK(::fsync(fd_) == 0, "Cannot sync results file '", path_,
              "': ", std::strerror(errno));
}

std::string fresh_results_path(const std::string& dir,
                               const std::string& stem) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  for (int n = 1;; ++n) {
    std::string name = n == 1 ? fmt::format("{}-{}.jsonl", stem, stamp)
                              : fmt::format("{}-{}-{}.jsonl", stem, stamp, n);
    fs::path p = fs::path(dir) / name;
    if (!fs::exists(p)) return p.string();
  }
}

}  // namespace twins
