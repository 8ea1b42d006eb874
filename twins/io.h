// File helpers every layer that writes shares: whole-file reads and writes
// (the writes such that a crash cannot leave them half done), a path's
// stem, and shell quoting for the few commands the tool runs (gnuplot, the
// eager-PyTorch reference). Every operation is checked and its error names
// the file.
#pragma once

#include <string>

namespace twins {

// The whole of `path`. Throws "Cannot read <what> 'path': <reason>".
std::string read_file(const std::string& path,
                      const std::string& what = "file");

// Writes all of `text` to `fd` (retrying short writes and EINTR). Throws
// "Cannot write <what> 'path': <reason>", `path` being the file behind fd.
void write_all(int fd, const std::string& text, const std::string& path,
               const std::string& what = "file");

// Writes `text` to a temporary file beside `path`, fsyncs it, renames it
// over `path` and fsyncs the directory: a reader sees the old file or the
// whole new one, never half, even after a power cut. Creates the parent
// directory when missing. Throws naming the file.
void write_text_atomically(const std::string& path, const std::string& text);

// Creates `dir` and its parents when missing; throws naming it.
void make_directories(const std::string& dir);

// `path` without its extension, directory kept: "runs/t3.jsonl" ->
// "runs/t3". Where a results file's summaries and figures go.
std::string path_stem(const std::string& path);

// `s` in single quotes for /bin/sh, any single quote escaped: safe for any
// path a user may pass.
std::string shell_quoted(const std::string& s);

// A path that does not exist yet: <dir>/<stem>-YYYYmmdd-HHMMSS[-N]<ext>.
std::string fresh_path(const std::string& dir, const std::string& stem,
                       const std::string& ext);

}  // namespace twins
