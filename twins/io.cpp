#include "twins/io.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

namespace twins {

namespace fs = std::filesystem;

namespace {

std::string describe(const std::string& what, const std::string& path) {
  return what.empty() ? "'" + path + "'" : what + " '" + path + "'";
}

// What a file that is not a regular one is, in words.
const char* file_kind(const struct stat& st) {
  if (S_ISREG(st.st_mode))
    return "a file";
  if (S_ISDIR(st.st_mode))
    return "a directory";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
    return "a device";
  if (S_ISFIFO(st.st_mode))
    return "a pipe";
  if (S_ISSOCK(st.st_mode))
    return "a socket";
  return "not a regular file";
}

// An input of this process: the words that name it, and the path it was
// marked by.
struct Input {
  std::string name;
  std::string path;
};

// The inputs of this process (protect_input), by device and inode.
struct Inputs {
  std::mutex mutex;
  std::map<std::pair<dev_t, ino_t>, Input> names;
};

Inputs& inputs() {
  static Inputs in;
  return in;
}

// The name protect_input gave the file `st` describes; empty when it is
// not an input.
std::string input_name(const struct stat& st) {
  Inputs& in = inputs();
  std::lock_guard<std::mutex> lock(in.mutex);
  const auto it = in.names.find({st.st_dev, st.st_ino});
  if (it == in.names.end())
    return "";
  // An input removed since (an empty results file the run had created)
  // frees its inode for a new file, which is no input: a process that runs
  // several commands (`import twins`) would refuse it.
  struct stat now {};
  if (::stat(it->second.path.c_str(), &now) != 0 ||
      now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
    in.names.erase(it);
    return "";
  }
  return it->second.name;
}

// Throws unless `path` is absent or (following a link only for kAppend) a
// regular file, and for kReplace not an input of this process; returns
// whether it exists.
bool check_existing(const std::string& path, const std::string& what,
                    OutputKind kind) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    // ENOTDIR: a folder on the way is a file, which the check of the
    // directory then names.
    TORCH_CHECK(errno == ENOENT || errno == ENOTDIR, "Cannot write ",
                describe(what, path), ": ", std::strerror(errno));
    return false;
  }
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const std::string target = fs::read_symlink(path, ec).string();
    // A rename over a link replaces the link, not what it names: the
    // user's file elsewhere would silently stay as it was.
    TORCH_CHECK(kind == OutputKind::kAppend, "Cannot write ",
                describe(what, path), ": it is a symbolic link (to '", target,
                "'), which a save would replace; name the file itself");
    TORCH_CHECK(::stat(path.c_str(), &st) == 0, "Cannot write ",
                describe(what, path), ": it is a symbolic link to '", target,
                "', which does not exist");
  }
  TORCH_CHECK(S_ISREG(st.st_mode), "Cannot write ", describe(what, path),
              ": it is ", file_kind(st), ", not a regular file");
  if (kind == OutputKind::kReplace) {
    const std::string input = input_name(st);
    TORCH_CHECK(input.empty(), "Cannot write ", describe(what, path),
                ": it is ", input,
                ", an input of this command; choose another output name");
  }
  TORCH_CHECK(::access(path.c_str(), W_OK) == 0, "Cannot write ",
              describe(what, path), ": ", std::strerror(errno));
  return true;
}

// The nearest existing directory at or above `dir` ("." for a relative
// path whose first component is missing); throws when what exists there is
// not a directory.
fs::path existing_ancestor(fs::path dir, const std::string& what,
                           const std::string& path) {
  if (dir.empty())
    dir = ".";
  while (true) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0) {
      TORCH_CHECK(S_ISDIR(st.st_mode), "Cannot write ", describe(what, path),
                  ": '", dir.string(), "' is ", file_kind(st),
                  ", not a directory");
      return dir;
    }
    TORCH_CHECK(errno == ENOENT, "Cannot write ", describe(what, path), ": '",
                dir.string(), "': ", std::strerror(errno));
    dir = dir.has_parent_path() && dir.parent_path() != dir
              ? dir.parent_path()
              : fs::path(".");
  }
}

void check_directory_writable(const fs::path& dir, const std::string& what,
                              const std::string& path) {
  const fs::path at = existing_ancestor(dir, what, path);
  TORCH_CHECK(::access(at.c_str(), W_OK | X_OK) == 0, "Cannot write ",
              describe(what, path), ": directory '", at.string(), "': ",
              std::strerror(errno));
}

}  // namespace

void protect_input(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return;  // nothing there to overwrite
  Inputs& in = inputs();
  std::lock_guard<std::mutex> lock(in.mutex);
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  in.names[std::make_pair(st.st_dev, st.st_ino)] = {
      describe(what, path), ec ? path : absolute.string()};
}

namespace {

// A name with a control character (a newline from $'…', a tab) is refused
// before anything is written: it would cut the one-line error that names
// it, and the gnuplot script that reads it.
void check_plain_name(const std::string& path, const std::string& what) {
  const bool plain = std::none_of(path.begin(), path.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
  if (plain)
    return;
  std::string shown;
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n')
      shown += "\\n";
    else if (c == '\t')
      shown += "\\t";
    else if (u < 0x20 || u == 0x7f)
      shown += fmt::format("\\x{:02x}", u);
    else
      shown += c;
  }
  TORCH_CHECK(false, "Cannot write ", describe(what, shown),
              ": the name holds a control character (shown escaped); "
              "choose a name without one");
}

}  // namespace

void check_output_file(const std::string& path, const std::string& what,
                       OutputKind kind) {
  TORCH_CHECK(!path.empty(), what.empty() ? "output" : what,
              ": empty file name");
  check_plain_name(path, what);
  const bool exists = check_existing(path, what, kind);
  // Appending to a file that is there needs only the file; creating or
  // replacing one needs its directory.
  if (!exists || kind == OutputKind::kReplace)
    check_directory_writable(fs::path(path).parent_path(), what, path);
}

void check_output_directory(const std::string& dir, const std::string& what) {
  TORCH_CHECK(!dir.empty(), what, ": empty directory name");
  check_plain_name(dir, what);
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    TORCH_CHECK(S_ISDIR(st.st_mode), "Cannot write ", describe(what, dir),
                ": it is ", file_kind(st), ", not a directory");
  }
  check_directory_writable(fs::path(dir), what, dir);
}

std::string resolved_path(const std::string& path) {
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  const fs::path resolved = fs::weakly_canonical(ec ? fs::path(path) : abs, ec);
  return (ec ? abs : resolved).lexically_normal().string();
}

bool same_file(const std::string& first, const std::string& second) {
  struct stat sa {}, sb {};
  const bool ea = ::stat(first.c_str(), &sa) == 0;
  const bool eb = ::stat(second.c_str(), &sb) == 0;
  if (ea && eb)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea != eb)
    return false;
  return resolved_path(first) == resolved_path(second);
}

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

void write_text_atomically(const std::string& path, const std::string& text,
                           const std::function<void()>& before_rename) {
  const fs::path target(path);
  const fs::path dir =
      target.has_parent_path() ? target.parent_path() : fs::path(".");
  make_directories(dir.string());
  check_existing(path, "", OutputKind::kReplace);
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
  try {
    // Again just before the rename: the path may have changed meanwhile.
    check_existing(path, "", OutputKind::kReplace);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (closed && before_rename)
    before_rename();
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

std::string summary_stem(const std::string& results) {
  return fs::path(results).extension() == ".jsonl" ? path_stem(results)
                                                   : results;
}

std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
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
