#include "twins/io.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

namespace twins {

namespace fs = std::filesystem;

namespace {

// Writes all of `text` to `fd`; false on an error (errno set).
bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void make_directories(const std::string& dir) {
  if (dir.empty())
    return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  TORCH_CHECK(!ec, "Cannot create directory '", dir, "': ", ec.message());
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const fs::path target(path);
  const fs::path dir =
      target.has_parent_path() ? target.parent_path() : fs::path(".");
  make_directories(dir.string());
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TORCH_CHECK(fd >= 0, "Cannot write '", tmp, "': ", std::strerror(errno));
  const bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    std::remove(tmp.c_str());
    TORCH_CHECK(false, "Cannot write '", path, "': ", std::strerror(e));
  }
  // The rename is durable once the directory entry is on disk.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string fresh_path(const std::string& dir, const std::string& stem,
                       const std::string& ext) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  for (int n = 1;; ++n) {
    const std::string name =
        n == 1 ? fmt::format("{}-{}{}", stem, stamp, ext)
               : fmt::format("{}-{}-{}{}", stem, stamp, n, ext);
    const fs::path p = fs::path(dir) / name;
    if (!fs::exists(p))
      return p.string();
  }
}

}  // namespace twins
