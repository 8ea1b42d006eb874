// File helpers every layer that writes shares: whole-file reads and writes
// (the writes such that a crash cannot leave them half done), a path's
// stem, and shell quoting for the few commands the tool runs (gnuplot, the
// eager-PyTorch reference). Every operation is checked and its error names
// the file.
#pragma once

#include <functional>
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
// directory when missing. Replaces only a regular file: a directory, a
// device, a pipe or socket, or a symbolic link at `path` is refused
// (check_output_file), so that a rename never puts a file in place of
// /dev/null or of what a link points to. Throws naming the file.
// `before_rename`, when given, is called once the temporary file is whole
// and synced, just before the rename (the crash tests' hook).
void write_text_atomically(const std::string& path, const std::string& text,
                           const std::function<void()>& before_rename = {});

// How an output file is written: replaced whole (write_text_atomically) or
// appended to (a results file).
enum class OutputKind { kReplace, kAppend };

// Throws, naming `what` and `path`, unless `path` can be written as `kind`
// says: absent, or a regular file (for kAppend also a symbolic link to one:
// appending writes through it and replaces nothing); and the nearest
// existing directory above it is a directory this process may write in.
// What every output is checked with before a command does any work.
void check_output_file(const std::string& path, const std::string& what,
                       OutputKind kind = OutputKind::kReplace);

// How a summary twin-run writes beside a results file (report::to_markdown,
// report::to_csv) is recognised, so that a later command replaces only its
// own: the Markdown's last section is headed kSummaryMarkdownLast, the
// CSV's first line is kSummaryCsvHeader.
constexpr char kSummaryMarkdownLast[] = "\n## All pairs\n";
constexpr char kSummaryCsvHeader[] =
    "section,row,column,n,measured_min,measured_max,paper_min,paper_max,"
    "paper\n";

// Marks `path` (when it exists) as an input of this process, `what` naming
// it ("results file"): from then on write_text_atomically and
// check_output_file (kReplace) refuse it, whatever name it is reached by,
// so that no summary, figure or script is ever written over a file the
// command reads. Thread-safe.
void protect_input(const std::string& path, const std::string& what);

// Throws, naming `what` and `dir`, unless `dir` is a directory this process
// may write in, or absent with a writable directory above it.
void check_output_directory(const std::string& dir, const std::string& what);

// Whether `a` and `b` name the same file: the same inode when both exist,
// else the same absolute path once the existing part of each is resolved
// (symbolic links, "." and ".."): "./r.jsonl" and "r.jsonl" are one file.
bool same_file(const std::string& first, const std::string& second);

// `path` absolute, its existing part resolved as same_file resolves it.
std::string resolved_path(const std::string& path);

// Creates `dir` and its parents when missing; throws naming it.
void make_directories(const std::string& dir);

// `path` without its extension, directory kept: "runs/t3.jsonl" ->
// "runs/t3".
std::string path_stem(const std::string& path);

// Where the summaries and figures of results file `results` go: its path
// without ".jsonl", or the whole path when it ends otherwise, so that
// <stem>.md, <stem>.csv and <stem>.svg can never be the results file
// itself ("r.md" -> "r.md", whose summary is "r.md.md").
std::string summary_stem(const std::string& results);

// `s` in single quotes for /bin/sh, any single quote escaped: safe for any
// path a user may pass.
std::string shell_quoted(const std::string& text);

// A path that does not exist yet: <dir>/<stem>-YYYYmmdd-HHMMSS[-N]<ext>.
std::string fresh_path(const std::string& dir, const std::string& stem,
                       const std::string& ext);

}  // namespace twins
