// The record codec (docs/output-format.md): one JSON object per pair (its
// head-merging checkpoints included), and back. Later fields may be added; existing ones are never renamed. The
// schema version (kRecordSchema) changes when a field's meaning does.
#pragma once

#include <nlohmann/json.hpp>

#include "twins/result.h"

namespace twins {

// Non-finite numbers (a diverged pair) are written as null.
nlohmann::json to_json(const PairResult& result);

// The fields of a spec alone, as a record writes them (a saved model's
// spec file uses the same).
nlohmann::json spec_to_json(const PairSpec& spec);
PairSpec spec_from_json(const nlohmann::json& object);

// A record back into a PairResult. Throws naming the first missing or
// mistyped field. null numbers (non-finite when written) become NaN.
// Records of schema 1 (no "schema" field) read back with empty hparams.
PairResult from_json(const nlohmann::json& record);

// The schema a record was written with: its "schema" field, 1 without.
int record_schema(const nlohmann::json& record);

// One head-merging checkpoint (twins/merge.h); non-finite numbers as null:
//   {"step": n, "lambda": [0, 0.1, ..., 1],
//    "naive":   {"val_loss": [11], "val_acc": [11], "barrier": B},
//    "aligned": {"val_loss": [11], "val_acc": [11], "barrier": B},
//    "residual_per_head": [depth x heads], "residual_mean", "residual_max",
//    "unaligned_residual_mean", "unaligned_residual_max",
//    "rotation_error_per_head": [depth x heads, or empty],
//    "rotation_error_mean", "rotation_error_max" (null unless a gauge twin),
//    "qk_drift_mean", "qk_drift_max"}
// The rotations themselves are not part of the record.
nlohmann::json to_json(const MergePoint& point);
// Back from the record (null -> NaN); throws naming the first missing or
// mistyped field.
MergePoint merge_point_from_json(const nlohmann::json& object);

// The commutation check (twins/metrics.h), written only where measured:
//   {"moved_at": step or null, "errors": [one per step from moved_at]}
nlohmann::json commutation_to_json(const Commutation& commutation);
// Back (measured); throws naming a missing or mistyped field.
Commutation commutation_from_json(const nlohmann::json& object);

// A record without the fields that measure the run rather than the pair
// (wall_s, threads, group_pairs): what "the same record however it was
// scheduled" compares.
nlohmann::json without_timing(nlohmann::json record);

}  // namespace twins
