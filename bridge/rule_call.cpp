#include "bridge/rule_call.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <thread>

#include "bridge/python.h"
#include "twins/stop.h"

namespace bridge {

using Clock = std::chrono::steady_clock;

struct RuleCall::Entry {
  std::string rule;
  const char* what;
  int64_t step;
  unsigned long thread;  // PyThread_get_thread_ident()
  Clock::time_point start;
  bool interrupted = false;
};

namespace {

// The calls in progress and the watchdog that watches them. Lock order:
// the GIL before `mutex` (a RuleCall's destructor holds the GIL).
struct Watchdog {
  std::mutex mutex;
  std::condition_variable wake;
  std::list<RuleCall::Entry> calls;
  PyObject* stop_requested = nullptr;  // isolation.StopRequested, kept
  bool started = false;

  static Watchdog& get() {
    static Watchdog* w = new Watchdog;  // lives to the process's end
    return *w;
  }

  void run() {
    const double grace = stop_grace_s();
    Clock::time_point stop_seen{};
    int seen_signal = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait_for(lock, std::chrono::milliseconds(50));
      const int signal = twins::stop_requested();
      if (signal != seen_signal) {
        seen_signal = signal;
        stop_seen = Clock::now();
      }
      if (signal == 0 || calls.empty())
        continue;
      const auto now = Clock::now();
      bool to_interrupt = false;
      for (RuleCall::Entry& c : calls) {
        const double waited = std::chrono::duration<double>(
                                  now - std::max(c.start, stop_seen))
                                  .count();
        if (waited >= 2 * grace && embedded_interpreter())
          end_process(c, signal, waited);
        if (waited >= grace && !c.interrupted)
          to_interrupt = true;
      }
      if (!to_interrupt)
        continue;
      lock.unlock();
      // The GIL first, then the list again: the call may have returned.
      PyGILState_STATE gil = PyGILState_Ensure();
      lock.lock();
      for (RuleCall::Entry& c : calls) {
        const double waited = std::chrono::duration<double>(
                                  Clock::now() - std::max(c.start, stop_seen))
                                  .count();
        if (waited >= grace && !c.interrupted) {
          PyThreadState_SetAsyncExc(c.thread, stop_requested);
          c.interrupted = true;
        }
      }
      lock.unlock();
      PyGILState_Release(gil);
    }
  }

  [[noreturn]] static void end_process(const RuleCall::Entry& c, int signal,
                                       double waited) {
    const std::string line = fmt::format(
        "twin-run: {} has not returned from {} at step {} {:g} s after the "
        "stop signal ({}), not even when interrupted: ended without saving "
        "its group's step (its last checkpoint stands; rerun the same "
        "command to resume from it)\n",
        c.rule, c.what, c.step, std::floor(waited), twins::signal_name(signal));
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    ::_exit(signal == SIGINT ? 130 : 75);
  }
};

}  // namespace

double stop_grace_s() {
  static const double grace = [] {
    const char* env = std::getenv("TWINS_STOP_GRACE_S");
    if (!env || !*env)
      return 10.0;
    char* end = nullptr;
    const double g = std::strtod(env, &end);
    TORCH_CHECK(end && *end == '\0' && g > 0 && g < 1e6,
                "Invalid TWINS_STOP_GRACE_S: '", env,
                "' (seconds, a positive number)");
    return g;
  }();
  return grace;
}

RuleCall::RuleCall(std::string rule, const char* what, int64_t step) {
  Watchdog& w = Watchdog::get();
  stop_grace_s();  // a bad value is an error here, not in the watchdog
  PyObject* type = nullptr;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    type = w.stop_requested;
  }
  if (!type) {
    type = py::object(isolation_module().attr("StopRequested")).release().ptr();
  }
  std::lock_guard<std::mutex> lock(w.mutex);
  if (!w.stop_requested)
    w.stop_requested = type;
  else if (w.stop_requested != type)
    Py_DECREF(type);
  w.calls.push_back(Entry{std::move(rule), what, step,
                          PyThread_get_thread_ident(), Clock::now()});
  entry_ = &w.calls.back();
  if (!w.started) {
    w.started = true;
    std::thread([&w] { w.run(); }).detach();
  }
}

RuleCall::~RuleCall() {
  Watchdog& w = Watchdog::get();
  std::lock_guard<std::mutex> lock(w.mutex);
  if (entry_->interrupted)
    PyThreadState_SetAsyncExc(entry_->thread, nullptr);  // not yet raised
  for (auto it = w.calls.begin(); it != w.calls.end(); ++it) {
    if (&*it == entry_) {
      w.calls.erase(it);
      break;
    }
  }
}

bool RuleCall::interrupted() const {
  std::lock_guard<std::mutex> lock(Watchdog::get().mutex);
  return entry_->interrupted;
}

void RuleCall::throw_stopped() const {
  const int signal = twins::stop_requested();
  throw twins::Stopped(
      signal, fmt::format("{}: {} at step {} was interrupted {:g} s after "
                          "the stop signal ({}); its group resumes from its "
                          "last checkpoint",
                          entry_->rule, entry_->what, entry_->step,
                          stop_grace_s(), twins::signal_name(signal)));
}

}  // namespace bridge
