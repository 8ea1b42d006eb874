#include "sweep/shards.h"

#include <c10/util/Exception.h>

#include <map>

namespace sweep {

using twins::PairSpec;

std::vector<std::vector<PairSpec>> group_pairs(
    const std::vector<PairSpec>& pairs, bool share, int max_twins) {
  TORCH_CHECK(max_twins >= 1, "group_pairs: max_twins ", max_twins);
  std::vector<std::vector<PairSpec>> groups;
  std::map<std::string, size_t> open;  // reference key -> its last group
  for (const auto& pair : pairs) {
    const std::string reference = share ? pair.reference_key() : pair.key();
    auto it = open.find(reference);
    if (it == open.end() ||
        groups[it->second].size() >= static_cast<size_t>(max_twins)) {
      open[reference] = groups.size();
      groups.push_back({pair});
    } else {
      groups[it->second].push_back(pair);
    }
  }
  return groups;
}

Shard parse_shard(const std::string& text) {
  auto number = [](const std::string& digits, int* out) {
    if (digits.empty() || digits.size() > 6)
      return false;
    for (char c : digits) {
      if (c < '0' || c > '9')
        return false;
    }
    *out = std::stoi(digits);
    return true;
  };
  const size_t slash = text.find('/');
  Shard shard;
  const bool ok = slash != std::string::npos &&
                  number(text.substr(0, slash), &shard.index) &&
                  number(text.substr(slash + 1), &shard.count) &&
                  shard.count >= 1 && shard.index >= 1 &&
                  shard.index <= shard.count;
  TORCH_CHECK(ok, "Invalid --shard: '", text,
              "' (expected I/N with 1 <= I <= N, e.g. 1/4)");
  return shard;
}

std::vector<PairSpec> shard_of(const std::vector<PairSpec>& pairs,
                               const Shard& shard, bool share) {
  TORCH_CHECK(
      shard.count >= 1 && shard.index >= 1 && shard.index <= shard.count,
      "Invalid shard ", shard.index, "/", shard.count);
  const auto groups = group_pairs(pairs, share);
  std::vector<PairSpec> out;
  for (size_t i = static_cast<size_t>(shard.index - 1); i < groups.size();
       i += static_cast<size_t>(shard.count)) {
    out.insert(out.end(), groups[i].begin(), groups[i].end());
  }
  return out;
}
}  // namespace sweep
