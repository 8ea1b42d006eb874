#include "twins/state_file.h"

#include <fmt/format.h>
#include <signal.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "data/sha256.h"
#include "twins/io.h"
#include "twins/record.h"

namespace twins {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMagic = "twins-checkpoint";

// The crash tests' hook (see write_state_file): the moment and the write.
struct KillHook {
  std::string moment;  // "rename" or "written"; empty: no hook
  long write = 0;
};

KillHook kill_hook() {
  const char* value = std::getenv("TWINS_TEST_KILL");
  if (!value || !*value)
    return {};
  const std::string text = value;
  const size_t colon = text.find(':');
  KillHook hook;
  if (colon != std::string::npos) {
    hook.moment = text.substr(0, colon);
    hook.write = std::strtol(text.c_str() + colon + 1, nullptr, 10);
  }
  TORCH_CHECK(
      (hook.moment == "rename" || hook.moment == "written") && hook.write > 0,
      "Invalid TWINS_TEST_KILL: '", text,
      "' (expected rename:K or written:K, K >= 1)");
  return hook;
}

std::atomic<long> writes{0};

[[noreturn]] void kill_self() {
  ::raise(SIGKILL);
  std::abort();  // not reached
}

}  // namespace

std::string group_state_key(const PairSpec& reference) {
  return fmt::format("{}|sha256={}|schema={}|format={}",
                     reference.reference_key(), reference.corpus_sha256,
                     kRecordSchema, kStateFormat);
}

void write_state_file(const std::string& path, nlohmann::json header,
                      const std::string& payload) {
  const KillHook hook = kill_hook();
  const long write = ++writes;
  header["payload_bytes"] = payload.size();
  // The digest covers the header and the archive: an edited partial curve
  // or pair index is refused like a flipped bit of a tensor. Written in
  // place of the placeholder once the body is there (one copy of the
  // archive, not two).
  std::string text = fmt::format("{} {}\nsha256 {}\n", kMagic, kFileLayout,
                                 std::string(64, '0'));
  const size_t body_at = text.size();
  text += header.dump();
  text += '\n';
  text += payload;
  const std::string digest =
      data::sha256_hex(std::string_view(text).substr(body_at));
  text.replace(body_at - 65, 64, digest);
  write_text_atomically(path, text, [&] {
    if (hook.moment == "rename" && hook.write == write)
      kill_self();
  });
  if (hook.moment == "written" && hook.write == write)
    kill_self();
}

namespace {

// The first `lines` lines of `path` (a checkpoint's magic, digest and
// header lines), without reading its archive.
std::string read_lines(const std::string& path, int lines) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.good(), "Cannot read checkpoint '", path, "': ",
              std::strerror(errno));
  std::string text, line;
  for (int i = 0; i < lines && std::getline(in, line); ++i)
    text += line + (in.eof() ? "" : "\n");
  return text;
}

// A state file read and checked: whole (`whole`: its size and digest
// checked, its archive kept) or up to its header (the framing checked, the
// header parsed; what check_before_start needs before any group trains).
StateFile read_state(const std::string& path, bool whole) {
  auto damaged = [&](const std::string& why) {
    TORCH_CHECK(false, "checkpoint '", path, "' is damaged: ", why,
                " (rerun with --checkpoint-restart to start its group "
                "afresh)");
  };
  // A pipe would block the read (a SLURM task then hangs until its time
  // limit), a directory fail it with words that do not say why.
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!ec && !fs::is_regular_file(status))
    damaged(fs::is_fifo(status)        ? "it is a pipe, not a file"
            : fs::is_directory(status) ? "it is a directory, not a file"
                                       : "it is not a regular file");
  const std::string text =
      whole ? read_file(path, "checkpoint") : read_lines(path, 3);
  const std::string magic = fmt::format("{} {}\n", kMagic, kFileLayout);
  if (text.compare(0, std::strlen(kMagic), kMagic) != 0)
    damaged("not a twins checkpoint");
  if (text.compare(0, magic.size(), magic) != 0)
    damaged(fmt::format("its first line '{}' is not this twins' layout {}",
                        text.substr(0, std::min(text.find('\n'), size_t(40))),
                        kFileLayout));
  constexpr char kDigest[] = "sha256 ";
  const size_t digest_at = magic.size() + std::strlen(kDigest);
  const size_t body_at = digest_at + 64 + 1;
  if (text.size() < body_at || text[body_at - 1] != '\n' ||
      text.compare(magic.size(), std::strlen(kDigest), kDigest) != 0)
    damaged("truncated or without its digest line");
  const size_t eol = text.find('\n', body_at);
  if (eol == std::string::npos)
    damaged("truncated in its header");
  StateFile file;
  try {
    file.header =
        nlohmann::json::parse(text.substr(body_at, eol - body_at));
  } catch (const nlohmann::json::exception&) {
    damaged("its header is not JSON");
  }
  if (!whole)
    return file;
  file.payload = text.substr(eol + 1);
  const auto bytes = file.header.find("payload_bytes");
  if (bytes != file.header.end() && bytes->is_number_unsigned() &&
      bytes->get<uint64_t>() != file.payload.size())
    damaged(fmt::format("{} bytes of data where {} were written",
                        file.payload.size(), bytes->get<uint64_t>()));
  if (data::sha256_hex(std::string_view(text).substr(body_at)) !=
      text.substr(digest_at, 64))
    damaged("its header or data do not match its SHA-256");
  return file;
}

}  // namespace

StateFile read_state_file(const std::string& path) {
  return read_state(path, /*whole=*/true);
}

StateFile read_state_header(const std::string& path) {
  return read_state(path, /*whole=*/false);
}

}  // namespace twins
