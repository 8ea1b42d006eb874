// Stop requests: SIGTERM, SIGUSR1, SIGINT and SIGHUP (handlers installed by
// StopSignals) set a process-wide flag instead of ending the process; a
// group that keeps a checkpoint (twins/checkpoint.h) polls it between
// steps, writes its state and throws Stopped. The front ends (app/main.cpp,
// the Python module) install the handlers and map Stopped to an exit code.
#pragma once

#include <signal.h>

#include <array>
#include <stdexcept>
#include <string>

namespace twins {

// The signal a stop was requested by, 0 when none.
int stop_requested() noexcept;
// Records a stop request; async-signal-safe (a signal handler calls it).
void request_stop(int signal) noexcept;
// Forgets a request (tests, and a process that runs again after a stop).
void clear_stop() noexcept;
// "SIGTERM", "SIGUSR1", "SIGINT", "SIGHUP", or "signal N".
std::string signal_name(int signal);

// While it lives (and `install` is true): SIGTERM, SIGUSR1, SIGINT and
// SIGHUP (a closed terminal or ssh session) request a stop instead of
// ending the process, so that every group with a checkpoint writes its
// state and stops at its next step; a second SIGTERM, SIGINT or SIGHUP ends
// the process at once, as without them. A SIGHUP already ignored (nohup)
// stays ignored. Clears an earlier request first; restores the previous
// handlers.
class StopSignals {
 public:
  explicit StopSignals(bool install);
  static const std::array<int, 4>& signals() { return kSignals; }
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr std::array<int, 4> kSignals = {SIGTERM, SIGUSR1, SIGINT,
                                                  SIGHUP};
  bool installed_;
  std::array<struct sigaction, 4> previous_{};
};

// Puts back every handler a living StopSignals installed that something
// else replaced since (a Python rule's signal.signal(SIGTERM, SIG_IGN), or
// a handler of its own), so that a stop still checkpoints; returns the
// first such signal's name, "" when none was replaced, none is installed,
// or a stop was requested (the handler then gave the default back
// itself). The bridge calls it after every call into a rule.
std::string restore_stop_handlers();

// Thrown by a group that stopped on request after writing its state.
class Stopped : public std::runtime_error {
 public:
  Stopped(int signal, const std::string& what)
      : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

}  // namespace twins
