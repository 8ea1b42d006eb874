// What a sweep will cost before it runs: wall time from the model's
// matrix-multiply FLOPs (model/flops.h) at this machine's measured rate, and
// memory from the shapes, so that a run that cannot fit is refused with
// the figures rather than ended by the kernel's out-of-memory killer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/charlm.h"
#include "sweep/shards.h"
#include "sweep/tables.h"
#include "twins/spec.h"

namespace sweep {

// Seconds to train and evaluate `models` models of `spec`'s shape (one
// reference plus its twins) for spec.steps steps on one thread of this
// machine. Rough (about +-50 %); CUDA devices are not modelled (NaN).
double estimate_seconds(const twins::PairSpec& spec, int models = 2);

// Bytes a group of `models` models of `spec` needs with `threads` of them
// training at once: every model's parameters, gradients and optimizer
// state (taken as two buffers per parameter, Adam's), the activations of
// each training step running, one evaluation's logits and working set, and
// a char-LM group's corpus (each group loads its own).
struct MemoryEstimate {
  double per_model = 0;     // parameters, gradients, optimizer state
  double per_training = 0;  // activations of one model's training step
  double evaluation = 0;    // validation forward pass and kept logits
  // The corpus as the task holds it: kCorpusBytesPerByte of its file's
  // size (0 for mod<p>, and for a pipe, whose size is not known before it
  // is read).
  double corpus = 0;
  double total(int models, int threads) const;
};
MemoryEstimate estimate_memory(const twins::PairSpec& spec);

using data::kCorpusBytesPerByte;  // data/charlm.h

// The memory this process may use, in bytes: the machine's physical memory,
// or less where a cgroup caps it (a SLURM job's --mem, a container's
// limit); 0 when unknown. `capped`, when given, says whether a cgroup's
// limit is the smaller.
double machine_memory_bytes(bool* capped = nullptr);

// The smallest memory limit set on this process's cgroups or their
// ancestors, given `self_cgroup` (the text of /proc/self/cgroup) and the
// cgroup file systems' `root` (/sys/fs/cgroup): cgroup v2's memory.max
// ("0::<path>") and v1's memory.limit_in_bytes ("<n>:memory:<path>",
// under root/memory). 0 when none is set ("max", or v1's page-rounded
// 2^63).
double cgroup_memory_limit_bytes(const std::string& self_cgroup,
                                 const std::string& root);

// Throws a one-line error naming the estimate and the machine's memory when
// the largest group of `groups` (each a list of pairs sharing copy 1), run
// `jobs` at a time with `threads` models each, cannot fit in this machine's
// memory. CUDA groups are not checked (their memory is the GPU's).
void check_memory(const std::vector<std::vector<twins::PairSpec>>& groups,
                  int jobs, int threads);
// The same against `budget` bytes (0: unknown, nothing checked); `capped`:
// the budget is a cgroup's limit, and the error says so.
void check_memory(const std::vector<std::vector<twins::PairSpec>>& groups,
                  int jobs, int threads, double budget, bool capped);

// The most twins one group of `spec` may hold so that `jobs` such groups
// with `threads` models training each fit in `budget` bytes; at least 1.
int max_twins_per_group(const twins::PairSpec& spec, int jobs, int threads,
                        double budget);

// What a table costs, from the estimates above, group by group (a group:
// the pairs that share copy 1 when `share`, else one pair).
struct TableCost {
  size_t pairs = 0;
  size_t models = 0;      // distinct models: each group's twins + copy 1
  size_t tasks = 0;       // groups: the most array tasks (shards) it can use
  double total_s = 0;     // every group, one after the other, one thread
  double longest_s = 0;   // the longest group on one thread (--threads 1)
  int most_models = 0;    // the largest group's models: the --threads at
                          // which every group trains all its models at once
  double longest_at_most_s = 0;  // the longest group at --threads most_models
  double memory_at_most = 0;     // bytes of the largest group's estimate at
                                 // --threads most_models
};
TableCost table_cost(const Table& table, bool share);

}  // namespace sweep
