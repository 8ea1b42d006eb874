#include "twins/group_state.h"

#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "data/sha256.h"
#include "twins/io.h"

namespace twins {

namespace {

constexpr const char* kMagic = "twins-checkpoint";

// The crash tests' hook (see write_state_file): the moment and the write.
struct KillHook {
  std::string moment;  // "rename" or "written"; empty: no hook
  long write = 0;
};

KillHook kill_hook() {
  const char* v = std::getenv("TWINS_TEST_KILL");
  if (!v || !*v)
    return {};
  const std::string s = v;
  const size_t colon = s.find(':');
  KillHook h;
  if (colon != std::string::npos) {
    h.moment = s.substr(0, colon);
    h.write = std::strtol(s.c_str() + colon + 1, nullptr, 10);
  }
  TORCH_CHECK((h.moment == "rename" || h.moment == "written") && h.write > 0,
              "Invalid TWINS_TEST_KILL: '", s,
              "' (expected rename:K or written:K, K >= 1)");
  return h;
}

std::atomic<long> writes{0};
std::atomic<int> stop_signal{0};

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
  const long k = ++writes;
  header["payload_bytes"] = payload.size();
  header["payload_sha256"] = data::sha256_hex(payload);
  std::string text = fmt::format("{} {}\n", kMagic, kStateFormat);
  text += header.dump();
  text += '\n';
  text += payload;
  write_text_atomically(path, text, [&] {
    if (hook.moment == "rename" && hook.write == k)
      kill_self();
  });
  if (hook.moment == "written" && hook.write == k)
    kill_self();
}

StateFile read_state_file(const std::string& path) {
  const std::string text = read_file(path, "checkpoint");
  auto damaged = [&](const std::string& why) {
    TORCH_CHECK(false, "checkpoint '", path, "' is damaged: ", why,
                " (rerun with --checkpoint-restart to start its group "
                "afresh)");
  };
  const std::string magic = fmt::format("{} {}\n", kMagic, kStateFormat);
  if (text.compare(0, std::strlen(kMagic), kMagic) != 0)
    damaged("not a twins checkpoint");
  if (text.compare(0, magic.size(), magic) != 0)
    damaged(fmt::format("another layout than format {}", kStateFormat));
  const size_t eol = text.find('\n', magic.size());
  if (eol == std::string::npos)
    damaged("truncated in its header");
  StateFile f;
  try {
    f.header = nlohmann::json::parse(text.substr(magic.size(),
                                                 eol - magic.size()));
  } catch (const nlohmann::json::exception&) {
    damaged("its header is not JSON");
  }
  f.payload = text.substr(eol + 1);
  const auto bytes = f.header.find("payload_bytes");
  const auto digest = f.header.find("payload_sha256");
  if (bytes == f.header.end() || !bytes->is_number_unsigned() ||
      digest == f.header.end() || !digest->is_string())
    damaged("its header has no payload size and digest");
  if (bytes->get<uint64_t>() != f.payload.size())
    damaged(fmt::format("{} bytes of data where {} were written",
                        f.payload.size(), bytes->get<uint64_t>()));
  if (data::sha256_hex(f.payload) != digest->get<std::string>())
    damaged("its data does not match its SHA-256");
  return f;
}

int stop_requested() noexcept {
  return stop_signal.load();
}

void request_stop(int signal) noexcept {
  int none = 0;
  stop_signal.compare_exchange_strong(none, signal);
}

void clear_stop() noexcept {
  stop_signal = 0;
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    default:
      return fmt::format("signal {}", signal);
  }
}

}  // namespace twins
