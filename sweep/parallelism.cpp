#include "sweep/parallelism.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

namespace sweep {

int slurm_cpus() {
  const char* value = std::getenv("SLURM_CPUS_PER_TASK");
  if (!value)
    return 0;
  const std::string text = value;
  const bool digits = !text.empty() && text.size() <= 9 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  const long cpus = digits ? std::strtol(value, nullptr, 10) : 0;
  TORCH_CHECK(cpus >= 1, "SLURM_CPUS_PER_TASK='", text,
              "' is not a positive whole number (the CPUs of this SLURM "
              "task, from which --jobs / --threads default when not given)");
  return static_cast<int>(cpus);
}

Parallelism resolve_parallelism(int jobs, bool jobs_given, int threads,
                                bool threads_given, size_t groups) {
  Parallelism parallelism;
  parallelism.jobs = jobs;
  parallelism.threads = threads;
  // Both given: the environment is not read (nor judged).
  const int cpus = jobs_given && threads_given ? 0 : slurm_cpus();
  std::string jobs_why, threads_why;
  if (cpus > 0 && !jobs_given) {
    // Never more groups at once than there are, nor more threads in all
    // than CPUs.
    const int per_job = threads_given ? std::max(1, threads) : 1;
    const size_t most = static_cast<size_t>(std::max(1, cpus / per_job));
    parallelism.jobs =
        static_cast<int>(std::max<size_t>(1, std::min(groups, most)));
    jobs_why = threads_given
                   ? fmt::format(" = min({} group(s), {} CPUs / --threads {})",
                                 groups, cpus, per_job)
                   : fmt::format(" = min({} group(s), {} CPUs)", groups, cpus);
  }
  if (cpus > 0 && !threads_given) {
    parallelism.threads = std::max(1, cpus / parallelism.jobs);
    threads_why = fmt::format(" = {} CPUs / {} job(s)", cpus, parallelism.jobs);
  }
  parallelism.from_slurm = !jobs_why.empty() || !threads_why.empty();
  parallelism.said =
      fmt::format("--jobs {}{}, --threads {}{}", parallelism.jobs, jobs_why,
                  parallelism.threads, threads_why);
  if (parallelism.from_slurm)
    parallelism.said += fmt::format(" (SLURM_CPUS_PER_TASK={})", cpus);
  return parallelism;
}

}  // namespace sweep
