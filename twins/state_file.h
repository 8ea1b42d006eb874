// A group's state file (docs/output-format.md, "Checkpoints"): a magic
// line with the framing's version, a digest line, one header line of JSON
// (the group's key, the pairs it holds, the step, the partial curves, and
// the size and SHA-256 of what follows), then a LibTorch archive with every
// live model's weights, every optimizer's state and every loss read so far.
// It is written atomically (twins/io.h), so a reader sees the previous file
// or the whole new one; a file that fails any check is "damaged" and
// refused with one line naming it. What goes into the header and the
// archive is the checkpoint unit's (twins/checkpoint.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "twins/spec.h"

namespace twins {

// The version of what a state file holds (in the group's key, so in the
// file's name): a file of another is not found.
constexpr int kStateFormat = 1;

// The version of the file's framing, its first line (format 1 of the
// content has had two: 1 digested the archive alone, 2 the header too); a
// file of another is refused, naming its first line.
constexpr int kFileLayout = 2;

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

// Reads `path` up to its header: the framing checked and the header parsed,
// its archive neither read nor digested (what a check before any group
// trains needs). Throws as read_state_file does.
StateFile read_state_header(const std::string& path);

}  // namespace twins
