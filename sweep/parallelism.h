// How many groups train at once (--jobs) and how many models of a group
// (--threads) where they were not asked for: under SLURM, from the CPUs
// of the task (docs/clusters.md).
#pragma once

#include <cstddef>
#include <string>

namespace sweep {

// --jobs and --threads of a command whose job list forms `groups` groups
// of pairs (its shard's, for a table shard), and the words that say where
// they came from. Given values stay. Under SLURM (SLURM_CPUS_PER_TASK =
// C, the CPUs of this task) a value not given fills the task: jobs =
// min(groups, C / threads given, or C), threads = max(1, C / jobs), so a
// shard of one group trains all its models at once on C threads. Outside
// SLURM the values asked for stay. Records do not depend on either value.
// Throws a one-line error naming SLURM_CPUS_PER_TASK when it is set to
// anything but a positive whole number and a value is to be derived.
struct Parallelism {
  int jobs = 1;
  int threads = 1;
  bool from_slurm = false;  // a value came from SLURM_CPUS_PER_TASK
  // "--jobs 1, --threads 8 = 8 CPUs / 1 job (SLURM_CPUS_PER_TASK=8)"
  std::string said;
};
Parallelism resolve_parallelism(int jobs, bool jobs_given, int threads,
                                bool threads_given, size_t groups);

// The CPUs SLURM gave this task: SLURM_CPUS_PER_TASK, which it sets when
// the job asks for --cpus-per-task; 0 when unset. Anything else than a
// positive whole number is refused: the defaults it sets would be guesses.
int slurm_cpus();

}  // namespace sweep
