#include "data/charlm.h"

#include "data/sha256.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "twins_paths.h"  // generated: TWINS_SOURCE_DATA_DIR

namespace data {

namespace fs = std::filesystem;

namespace {

// Decodes UTF-8; throws naming the file and byte offset of a bad sequence.
std::vector<int32_t> decode_utf8(const std::string& bytes,
                                 const std::string& path) {
  std::vector<int32_t> out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b0 = static_cast<unsigned char>(bytes[i]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3
                                             : (b0 >> 3) == 30   ? 4
                                                                 : 0;
    TORCH_CHECK(len > 0 && i + len <= bytes.size(), "Corpus '", path,
                "' is not UTF-8 text (bad byte at offset ", i, ")");
    int32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(bytes[i + k]);
      TORCH_CHECK((b >> 6) == 2, "Corpus '", path,
                  "' is not UTF-8 text (bad byte at offset ", i + k, ")");
      cp = (cp << 6) | (b & 0x3F);
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

torch::Tensor to_tensor(const std::vector<int32_t>& ids) {
  return torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()),
                       torch::kLong);
}

// The bytes of the pipe `path` to its end, and at most the memory a corpus
// of that size would take. A named pipe (mkfifo) waits at most
// `wait_seconds` for each write: one nobody opens for writing would block
// open() and read() forever. An anonymous pipe (`<(zcat corpus.gz)`) has
// its writer from the start, and ends when that process does: it is
// waited for as long as it takes (a producer may think before it writes).
std::string read_pipe(const std::string& path, int wait_seconds) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "Cannot read corpus '", path, "': ",
              std::strerror(errno));
  struct statfs fs_info {};
  const bool anonymous =
      ::fstatfs(fd, &fs_info) == 0 && fs_info.f_type == PIPEFS_MAGIC;
  const int timeout_ms = anonymous ? -1 : wait_seconds * 1000;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  const double cap = pages > 0 && page > 0
                         ? static_cast<double>(pages) * page / kCorpusBytesPerByte
                         : 1e18;
  std::string bytes;
  char buffer[1 << 16];
  std::string error;
  for (;;) {
    // Linux reports no hang-up on a FIFO that never had a writer: poll
    // waits for the first write, then for every next one or the end.
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, timeout_ms);
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready == 0) {
      error = fmt::format(
          "Cannot read corpus '{}': it is a named pipe that {} in {} s "
          "(nothing writes to it?)",
          path, bytes.empty() ? "gave nothing" : "gave nothing more",
          wait_seconds);
      break;
    }
    if (ready < 0) {
      error = fmt::format("Cannot read corpus '{}': {}", path,
                          std::strerror(errno));
      break;
    }
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0)
      break;  // the writer closed it: the end
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR)
        continue;
      error = fmt::format("Cannot read corpus '{}': {}", path,
                          std::strerror(errno));
      break;
    }
    bytes.append(buffer, static_cast<size_t>(n));
    if (static_cast<double>(bytes.size()) > cap) {
      error = fmt::format(
          "Cannot read corpus '{}': the pipe gave more than {:.3g} GB and "
          "has not ended; a corpus takes {:g} bytes of memory per byte, and "
          "this machine has {:.3g} GB",
          path, cap / 1e9, kCorpusBytesPerByte, cap * kCorpusBytesPerByte / 1e9);
      break;
    }
  }
  ::close(fd);
  TORCH_CHECK(error.empty(), error);
  return bytes;
}

}  // namespace

Corpus Corpus::load(const std::string& path, int pipe_wait_seconds) {
  std::error_code ec;
  TORCH_CHECK(fs::exists(path, ec), "Cannot read corpus '", path,
              "': no such file");
  TORCH_CHECK(!fs::is_directory(path, ec), "Cannot read corpus '", path,
              "': it is a directory");
  // A device (/dev/zero, /dev/urandom) or a socket never ends; a pipe
  // (below) ends when its writer closes it.
  TORCH_CHECK(!fs::is_character_file(path, ec) && !fs::is_block_file(path, ec) &&
                  !fs::is_socket(path, ec),
              "Cannot read corpus '", path,
              "': it is a device or a socket, not a text file (a pipe is "
              "read to its end)");
  // A pipe (`--data <(zcat corpus.gz)`) can be read once, and a run loads
  // its corpus several times (for the key's hash, then for each group):
  // what a pipe gave is kept for the rest of the process, under the pipe
  // itself (its device and inode), not its name.
  static std::mutex piped_mutex;
  static std::map<std::pair<dev_t, ino_t>, Corpus> piped;
  const bool regular = fs::is_regular_file(path, ec);
  std::unique_lock<std::mutex> lock(piped_mutex, std::defer_lock);
  std::pair<dev_t, ino_t> pipe_id{};
  std::string bytes;
  if (!regular) {
    struct stat st {};
    TORCH_CHECK(::stat(path.c_str(), &st) == 0, "Cannot read corpus '",
                path, "': ", std::strerror(errno));
    pipe_id = {st.st_dev, st.st_ino};
    lock.lock();
    const auto it = piped.find(pipe_id);
    if (it != piped.end())
      return it->second;
    bytes = read_pipe(path, pipe_wait_seconds);
  } else {
    std::ifstream f(path, std::ios::binary);
    TORCH_CHECK(f.good(), "Cannot read corpus '", path, "': ",
                std::strerror(errno));
    std::ostringstream ss;
    ss << f.rdbuf();
    TORCH_CHECK(!f.bad(), "Cannot read corpus '", path, "': read error");
    bytes = ss.str();
  }
  TORCH_CHECK(!bytes.empty(), "Corpus '", path, "' is empty");
  Corpus c;
  c.path = path;
  c.sha256 = sha256_hex(bytes);
  c.codepoints = decode_utf8(bytes, path);
  c.vocab = c.codepoints;
  std::sort(c.vocab.begin(), c.vocab.end());
  c.vocab.erase(std::unique(c.vocab.begin(), c.vocab.end()), c.vocab.end());
  if (!regular)
    piped[pipe_id] = c;
  return c;
}

std::string default_corpus_path() {
  const char* kName = "tinyshakespeare.txt";
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("TWINS_DATA_DIR")) dirs.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path() / "data");
    dirs.push_back(exe.parent_path().parent_path() / "data");
    dirs.push_back(exe.parent_path().parent_path().parent_path() / "data");
    // Installed by pip into an environment: <env>/bin/twin-run and
    // <env>/share/twins/.
    dirs.push_back(exe.parent_path().parent_path() / "share" / "twins");
  }
  dirs.emplace_back(TWINS_SOURCE_DATA_DIR);
  for (const auto& d : dirs) {
    if (fs::exists(d / kName, ec)) return (d / kName).string();
  }
  TORCH_CHECK(false, "Cannot find the shipped corpus ", kName,
              " (looked in $TWINS_DATA_DIR, next to the executable and in ",
              TWINS_SOURCE_DATA_DIR, "); pass --data PATH");
}

CharLM::CharLM(const Corpus& corpus, int64_t ctx, int64_t batch,
               int64_t steps, uint64_t data_seed, const torch::Device& device)
    : ctx_(ctx), batch_(batch), steps_(steps),
      vocab_size_(static_cast<int64_t>(corpus.vocab.size())) {
  TORCH_CHECK(ctx >= 1, "Invalid context length: ", ctx);
  TORCH_CHECK(batch >= 1, "Invalid batch size: ", batch);
  TORCH_CHECK(steps >= 1, "Invalid steps: ", steps);
  // Code point -> index in the sorted vocabulary.
  std::vector<int32_t> ids(corpus.codepoints.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(
        std::lower_bound(corpus.vocab.begin(), corpus.vocab.end(),
                         corpus.codepoints[i]) -
        corpus.vocab.begin());
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t n_train = n * 9 / 10;  // floor(0.9 n)
  const int64_t n_val = n - n_train;
  TORCH_CHECK(n_val >= ctx + 2, "Corpus '", corpus.path, "' has ", n,
              " characters: too short for context ", ctx,
              " (its 10% validation split needs at least ctx + 2 = ",
              ctx + 2, ")");
  torch::Tensor all = to_tensor(ids);
  torch::Tensor train = all.narrow(0, 0, n_train);
  torch::Tensor val = all.narrow(0, n_train, n_val);

  auto gen = at::detail::createCPUGenerator(data_seed);
  offsets_cpu_ = torch::randint(0, n_train - ctx - 1, {steps, batch}, gen,
                                torch::kLong);
  torch::Tensor val_offsets = torch::randint(
      0, n_val - ctx - 1, {kValidationWindows}, gen, torch::kLong);
  torch::Tensor window = torch::arange(ctx + 1, torch::kLong);
  torch::Tensor val_idx = val_offsets.unsqueeze(1) + window;  // (64, ctx+1)
  torch::Tensor val_chunks = val.index_select(0, val_idx.reshape({-1}))
                                 .view({kValidationWindows, ctx + 1});
  val_ = {val_chunks.narrow(1, 0, ctx).contiguous().to(device),
          val_chunks.narrow(1, 1, ctx).contiguous().to(device)};
  train_tokens_ = train.to(device);
  offsets_ = offsets_cpu_.to(device);
  window_ = window.to(device);
}

TaskShape CharLM::shape() const {
  TaskShape s;
  s.vocab_in = vocab_size_;
  s.vocab_out = vocab_size_;
  s.n_ctx = ctx_;
  s.causal = true;
  s.last_only = false;
  return s;
}

Batch CharLM::train_batch(int64_t step) const {
  TORCH_CHECK(step >= 1 && step <= steps_, "train_batch: step ", step,
              " outside 1..", steps_);
  torch::Tensor idx = offsets_[step - 1].unsqueeze(1) + window_;  // (B, T+1)
  torch::Tensor chunks =
      train_tokens_.index_select(0, idx.reshape({-1})).view({batch_, ctx_ + 1});
  return {chunks.narrow(1, 0, ctx_), chunks.narrow(1, 1, ctx_)};
}

}  // namespace data
