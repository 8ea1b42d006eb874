// Progress of a sweep on a stream, thread-safe: a line when a group starts,
// a line when each pair ends (with its step-1 and final drift), and, when
// not on a terminal, a line at each tenth of a group of 100 steps or more;
// on a terminal one rewritten status line with the step of every running
// group. Nothing at all when quiet.
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "twins/result.h"

namespace sweep {

class Progress {
 public:
  // `pairs`: pairs the sweep will run; `groups`: groups they form.
  Progress(size_t pairs, size_t groups, bool quiet, std::FILE* out = stderr);
  void begin(size_t slot, size_t group, const std::vector<twins::PairSpec>&);
  void step(size_t slot, int64_t t);
  void end(size_t slot, const twins::PairResult& result);
  void finish_group(size_t slot);

 private:
  struct Running {
    bool active = false;
    std::string label;
    size_t group = 0;
    int64_t step = 0, steps = 0;
  };
  void line(const std::string& text);  // a permanent line (mutex held)
  void status();                       // redraw the status line (held)

  std::mutex mutex_;
  size_t pairs_, groups_, done_ = 0;
  bool quiet_, tty_;
  std::FILE* out_;
  std::vector<Running> slots_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace sweep
