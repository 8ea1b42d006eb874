// Groups and shards: how a job list's pairs are grouped (those that share
// copy 1 train it once, twins::run_group) and how a table is cut into
// shards for several machines or SLURM array tasks (docs/clusters.md).
#pragma once

#include <string>
#include <vector>

#include "twins/spec.h"

namespace sweep {

// The pairs of `pairs` grouped by reference_key(), in the order of each
// group's first pair; pairs keep their order within a group. With
// share = false every pair is a group of its own. A group larger than
// max_twins is split into consecutive groups of at most max_twins.
std::vector<std::vector<twins::PairSpec>> group_pairs(
    const std::vector<twins::PairSpec>& pairs, bool share = true,
    int max_twins = 1 << 20);

// Shard I of N, 1 <= I <= N (as `--shard I/N`, e.g. a SLURM array index).
struct Shard {
  int index = 1;
  int count = 1;
};

// Parses "I/N"; throws "Invalid --shard: '3/2' (expected I/N with
// 1 <= I <= N, e.g. 1/4)".
Shard parse_shard(const std::string& text);

// Shard I of N is a set of groups: the groups (group_pairs(pairs, share))
// at positions I-1, I-1+N, I-1+2N, ..., flattened. No copy 1 is trained on
// two machines, and the shards are disjoint and together cover the job list
// exactly once — provided every shard is run with the same `share`.
std::vector<twins::PairSpec> shard_of(const std::vector<twins::PairSpec>& pairs,
                                      const Shard& shard, bool share = true);

}  // namespace sweep
