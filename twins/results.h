// Reading a JSONL results file back (README "Output format"): records ->
// PairResults, the keys already recorded (resume), and the one kind of damage
// a crash can leave, a truncated last line.
//
// The sink writes each record as one line in one write(2) and fsyncs it, so
// a file can only be damaged at its end: a last line without its '\n'. That
// line is ignored (its pair counts as not recorded and runs again); any
// other line that is not a record is an error naming the file and the line.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "twins/pair.h"

namespace twins {

// One record of a results file.
struct StoredRecord {
  std::string key;      // as written (the spec's key at the time)
  PairResult result;    // the record read back
  nlohmann::json json;  // the record as written
  int64_t line = 0;     // 1-based line number in its file
};

struct ResultsFile {
  std::string path;
  std::vector<StoredRecord> records;  // file order, duplicates kept
  bool truncated_tail = false;        // a last line without '\n' was ignored
  uint64_t whole_bytes = 0;           // bytes up to and with the last '\n'
};

// A record back into a PairResult. Throws naming the first missing or
// mistyped field. null numbers (non-finite when written) become NaN.
PairResult from_json(const nlohmann::json& record);

// Reads `path`. Throws "results file 'p' does not exist" (unless
// missing_ok, then returns an empty file) and "results file 'p', line N:
// ..." for a line that is not a record, except a truncated last line.
ResultsFile read_results(const std::string& path, bool missing_ok = false);

// Cuts a truncated last line off the file (the crash's half record), so
// that appending starts on a fresh line. No-op when the file is whole.
void drop_truncated_tail(const ResultsFile& file);

// The records of several files in order, each key once: a later record of
// a key already seen is dropped and counted in *duplicates.
std::vector<StoredRecord> merge_records(const std::vector<ResultsFile>& files,
                                        int* duplicates = nullptr);

// A record without the fields that measure the run rather than the pair
// (wall_s, threads): what "the same record whatever --jobs is" compares.
nlohmann::json without_timing(nlohmann::json record);

// Writes `text` to a temporary file beside `path`, then renames it over
// `path`: a reader sees the old file or the whole new one, never half.
// Throws naming the file.
void write_text_atomically(const std::string& path, const std::string& text);

}  // namespace twins
