// The record codec (docs/output-format.md): one JSON object per pair, and
// back. Later fields may be added; existing ones are never renamed. The
// schema version (kRecordSchema) changes when a field's meaning does.
#pragma once

#include <nlohmann/json.hpp>

#include "twins/result.h"

namespace twins {

// Non-finite numbers (a diverged pair) are written as null.
nlohmann::json to_json(const PairResult& r);

// The fields of a spec alone, as a record writes them (a saved model's
// spec file uses the same).
nlohmann::json spec_to_json(const PairSpec& spec);
PairSpec spec_from_json(const nlohmann::json& j);

// A record back into a PairResult. Throws naming the first missing or
// mistyped field. null numbers (non-finite when written) become NaN.
// Records of schema 1 (no "schema" field) read back with empty hparams.
PairResult from_json(const nlohmann::json& record);

// The schema a record was written with: its "schema" field, 1 without.
int record_schema(const nlohmann::json& record);

// A record without the fields that measure the run rather than the pair
// (wall_s, threads, group_pairs): what "the same record however it was
// scheduled" compares.
nlohmann::json without_timing(nlohmann::json record);

}  // namespace twins
