// File helpers every layer that writes shares: whole-file writes that a
// crash cannot leave half done, and shell quoting for the few commands the
// tool runs (gnuplot, the eager-PyTorch reference).
#pragma once

#include <string>

namespace twins {

// Writes `text` to a temporary file beside `path`, fsyncs it, renames it
// over `path` and fsyncs the directory: a reader sees the old file or the
// whole new one, never half, even after a power cut. Creates the parent
// directory when missing. Throws naming the file.
void write_text_atomically(const std::string& path, const std::string& text);

// Creates `dir` and its parents when missing; throws naming it.
void make_directories(const std::string& dir);

// `s` in single quotes for /bin/sh, any single quote escaped: safe for any
// path a user may pass.
std::string shell_quoted(const std::string& s);

// A path that does not exist yet: <dir>/<stem>-YYYYmmdd-HHMMSS[-N]<ext>.
std::string fresh_path(const std::string& dir, const std::string& stem,
                       const std::string& ext);

}  // namespace twins
