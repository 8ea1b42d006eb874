#include "twins/stop.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdint>

namespace twins {

namespace {

std::atomic<int> stop_signal{0};

// The signals whose handler StopSignals installed (a bit per signal
// number), while it lives.
std::atomic<uint64_t> installed_mask{0};

}  // namespace

int stop_requested() noexcept {
  return stop_signal.load();
}

void request_stop(int signal) noexcept {
  int none = 0;
  stop_signal.compare_exchange_strong(none, signal);
}

void clear_stop() noexcept {
  stop_signal = 0;
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return fmt::format("signal {}", signal);
  }
}

namespace {

// A stop request; a second SIGTERM, SIGINT or SIGHUP then ends the
// process.
extern "C" void on_stop_signal(int signal) {
  request_stop(signal);
  if (signal != SIGUSR1)
    ::signal(signal, SIG_DFL);
}

}  // namespace

StopSignals::StopSignals(bool install) : installed_(install) {
  if (!installed_)
    return;
  clear_stop();
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;  // other threads' reads and writes go on
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < kSignals.size(); ++i) {
    ::sigaction(kSignals[i], nullptr, &previous_[i]);
    // An ignored SIGHUP stays ignored: `nohup twin-run ...` asked for it.
    if (kSignals[i] == SIGHUP && previous_[i].sa_handler == SIG_IGN)
      continue;
    ::sigaction(kSignals[i], &action, nullptr);
    installed_mask |= uint64_t(1) << kSignals[i];
  }
}

std::string restore_stop_handlers() {
  // After a stop request the handler has put the default back itself (a
  // second signal ends the process): nothing to restore then.
  if (stop_requested() != 0)
    return "";
  std::string replaced;
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  const uint64_t mask = installed_mask.load();
  for (int signal : StopSignals::signals()) {
    if ((mask & (uint64_t(1) << signal)) == 0)
      continue;
    struct sigaction now = {};
    ::sigaction(signal, nullptr, &now);
    if (now.sa_handler == on_stop_signal)
      continue;
    ::sigaction(signal, &action, nullptr);
    if (replaced.empty())
      replaced = signal_name(signal);
  }
  return replaced;
}

StopSignals::~StopSignals() {
  if (!installed_)
    return;
  installed_mask = 0;
  for (size_t i = 0; i < kSignals.size(); ++i)
    ::sigaction(kSignals[i], &previous_[i], nullptr);
}

}  // namespace twins
