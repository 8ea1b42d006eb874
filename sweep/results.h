// The results file: JSON lines, one record per pair (docs/output-format.md).
// Written by a JsonlSink (each record one line in one write(2), fsync'd, so
// a crash can only leave a truncated last line), read back by read_results,
// guarded by a FileLock so that two processes never run into one file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "twins/result.h"

namespace sweep {

class JsonlSink {
 public:
  // Nothing is created until the first append: a run that fails before its
  // first pair ends leaves no file behind. A file already at `path` (the
  // run's lock creates it) is the one appended to: were it removed or
  // replaced while the run goes on (by a Python rule), append refuses to
  // write into a new file, which would hold this run's records alone.
  explicit JsonlSink(std::string path);
  ~JsonlSink();
  JsonlSink(const JsonlSink&) = delete;
  JsonlSink& operator=(const JsonlSink&) = delete;

  // Writes record.dump() + '\n' in one write(2) and fsyncs; throws naming
  // the file. On a short write (ENOSPC, EFBIG) the file is truncated back
  // to its previous length: it holds whole lines only. Creates the parent
  // directory when missing.
  void append(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  // Throws when `path_` (or the open `fd`, when given) is no longer the
  // file this sink writes.
  void check_same_file(int fd = -1) const;
  std::string path_;
  int fd_ = -1;
  bool existed_ = false;  // a file was at path_ when constructed: dev_, ino_
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

// One record of a results file.
struct StoredRecord {
  std::string key;           // as written
  twins::PairResult result;  // the record read back
  nlohmann::json json;       // the record as written
  int64_t line = 0;          // 1-based line number in its file
  std::string file;          // the file it came from
};

struct ResultsFile {
  std::string path;
  std::vector<StoredRecord> records;  // file order, duplicates kept
  bool truncated_tail = false;        // a last line without '\n' was ignored
  bool missing_newline = false;       // the last record (kept) lacks '\n'
  uint64_t whole_bytes = 0;           // bytes up to and with the last '\n'
};

// Reads `path`. Throws "results file 'p' does not exist" (unless
// missing_ok, then returns an empty file) and "results file 'p', line N:
// ..." for a line that is not a record, except a truncated last line after
// at least one record, which is ignored (its pair counts as not recorded);
// a last line without '\n' that is a whole record is kept. A file whose
// only content is such a line is not a results file and is refused, and
// so is one with two records of a key and different numbers.
// Marks `path` as an input (twins::protect_input).
ResultsFile read_results(const std::string& path, bool missing_ok = false);

// Cuts a truncated last line off the file (the crash's half record), or
// adds the newline a whole last record lacks, so that appending starts on a
// fresh line. No-op when the file is whole.
void drop_truncated_tail(const ResultsFile& file);

// Throws naming both lines unless `again`, a record of the key of `first`,
// has the same numbers (all fields but the run's timing and table).
void check_same_numbers(const StoredRecord& first, const StoredRecord& again);

// The records of several files in order, each key once: a later record of
// a key already seen is dropped and counted in *duplicates; one with other
// numbers than the first throws (check_same_numbers).
std::vector<StoredRecord> merge_records(const std::vector<ResultsFile>& files,
                                        int* duplicates = nullptr);

// The records of `files` merged, a note on `log` for a truncated last line
// or repeated keys; throws when a file is missing or malformed, when they
// hold no record at all, or (unless `allow_mixed_env`, then a warning)
// when they were written under different numeric environments
// (check_one_environment, before repeated keys are compared).
std::vector<StoredRecord> read_records(const std::vector<std::string>& files,
                                       bool allow_mixed_env = false,
                                       std::FILE* log = stderr);

// One numeric environment (twins/environment.h) in `records`: the first
// record whose environment differs from `here` (or, when `here` is null,
// from that of the first record that has one) throws one line naming its
// file, its line and the difference ("blas_core Sandybridge vs Haswell");
// with `allow` (--allow-mixed-env) that line is a warning on `log`
// instead. A record without the field (written before it existed) is of an
// unknown environment and matches any. `advice` ends the error ("resume
// into a new --out").
void check_one_environment(const std::vector<StoredRecord>& records,
                           const twins::NumericEnv* here, bool allow,
                           const char* advice, std::FILE* log = stderr);

// An exclusive, non-blocking flock on a results file for the lifetime of
// the object; creates the file (empty) and its directory when missing.
// Throws "results file 'p' is in use by another twin-run process" when
// another process holds it.
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// The summaries of `stem` (<stem>.md and .csv, report::write_outputs),
// checked as outputs that replace: neither the results file `results` nor
// a device, a directory or a file of another kind. Nothing for an empty
// stem.
void check_summaries(const std::string& stem, const std::string& results);

}  // namespace sweep
