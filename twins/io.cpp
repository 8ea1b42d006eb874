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

std::string describe(const std::string& what, const std::string& path) {
  return what.empty() ? "'" + path + "'" : what + " '" + path + "'";
}

}  // namespace

std::string read_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "Cannot read ", describe(what, path), ": ",
              std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      TORCH_CHECK(n == 0, "Cannot read ", describe(what, path), ": ",
                  std::strerror(err));
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

void write_all(int fd, const std::string& text, const std::string& path,
               const std::string& what) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    TORCH_CHECK(n > 0, "Cannot write ", describe(what, path), ": ",
                std::strerror(n < 0 ? errno : EIO));
    done += static_cast<size_t>(n);
  }
}

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
  try {
    write_all(fd, text, path, "");
    TORCH_CHECK(::fsync(fd) == 0, "Cannot write '", path,
                "': ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    std::remove(tmp.c_str());
    throw;
  }
  const bool closed = ::close(fd) == 0;
  const int err = errno;
  if (!closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = closed ? errno : err;
    std::remove(tmp.c_str());
    TORCH_CHECK(false, "Cannot write '", path, "': ", std::strerror(e));
  }
  // The rename is durable once the directory entry is on disk. A file
  // system that cannot sync a directory (EINVAL) has nothing more to do.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TORCH_CHECK(dfd >= 0, "Cannot sync directory '", dir.string(),
              "': ", std::strerror(errno));
  const bool synced = ::fsync(dfd) == 0 || errno == EINVAL;
  const int derr = errno;
  ::close(dfd);
  TORCH_CHECK(synced, "Cannot sync directory '", dir.string(),
              "': ", std::strerror(derr));
}

std::string path_stem(const std::string& path) {
  const fs::path p(path);
  return (p.parent_path() / p.stem()).string();
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
