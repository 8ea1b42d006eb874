// The output contract: one JSON object per pair (README "Output format").
// Later fields may be added; these are never renamed.
#pragma once

#include <nlohmann/json.hpp>

#include "twins/pair.h"

namespace twins {

// Non-finite numbers (a diverged pair) are written as null.
nlohmann::json to_json(const PairResult& r);

}  // namespace twins
