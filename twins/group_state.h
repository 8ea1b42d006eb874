// A group's state file — what the flags and docs call a checkpoint
// (docs/output-format.md, "Checkpoints"): everything a group of pairs
// (twins/pair.h) needs to go on from the step it was written at and end
// with records bitwise equal to a run straight through. Not to be confused
// with the measurement checkpoints of a curve (docs/protocol.md §6): a
// state file may be written at any step.
//
// The file is one header line of JSON (the group's key, the pairs it holds,
// the step, the partial curves, and the size and SHA-256 of what follows)
// after a magic line, then a LibTorch archive with every live model's
// weights, every optimizer's state and every loss read so far. It is
// written atomically (twins/io.h), so a reader sees the previous file or
// the whole new one; a file that fails any check is "damaged" and refused
// with one line naming it.
//
// Stop requests: SIGTERM, SIGUSR1 and SIGINT (sweep/engine.h installs the
// handlers) set a process-wide flag; a group that keeps a state file polls
// it between steps, writes its state and throws Stopped.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "twins/spec.h"

namespace twins {

// When a group writes its state file. Off unless a period is set.
struct StatePolicy {
  int64_t every_steps = 0;   // at most this many steps apart (0: no bound)
  double every_seconds = 0;  // at most this long apart (0: no bound)
  // A state file that cannot be used (damaged, another configuration,
  // pairs this group does not hold) is removed and its group starts at
  // step 0 with a note; otherwise it is a one-line error.
  bool restart = false;
  bool enabled() const { return every_steps > 0 || every_seconds > 0; }
};

// The version of the state file's layout; a file of another is refused.
constexpr int kStateFormat = 1;

// What must match for a state file to be resumed by a group: the
// reference's key with the corpus's content, the record schema and the
// file format (the twins' own keys are listed in the file beside it).
std::string group_state_key(const PairSpec& reference);

// The two parts of a state file.
struct StateFile {
  nlohmann::json header;
  std::string payload;  // the LibTorch archive
};

// Writes `header` (payload_bytes and payload_sha256 added) and `payload`
// to `path` atomically. The environment variable TWINS_TEST_KILL, a crash
// test's hook, names a write and a moment, "rename:K" or "written:K": the
// process SIGKILLs itself just before the K-th write's rename, or just
// after it (K counts this process's writes from 1).
void write_state_file(const std::string& path, nlohmann::json header,
                      const std::string& payload);

// Reads `path` whole and checks its magic line, header, size and digest.
// Throws "checkpoint 'path' is damaged: <why>" on any failure.
StateFile read_state_file(const std::string& path);

// The signal a stop was requested by, 0 when none.
int stop_requested() noexcept;
// Records a stop request; async-signal-safe (a signal handler calls it).
void request_stop(int signal) noexcept;
// Forgets a request (tests, and a process that runs again after a stop).
void clear_stop() noexcept;
// "SIGTERM", "SIGUSR1", "SIGINT", or "signal N".
std::string signal_name(int signal);

// Thrown by a group that stopped on request after writing its state.
class Stopped : public std::runtime_error {
 public:
  Stopped(int signal, const std::string& what)
      : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

}  // namespace twins
