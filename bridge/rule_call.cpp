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
#include <vector>

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
  bool interrupting = false;  // a helper thread waits for the GIL for it
  bool interrupted = false;   // StopRequested raised in it
};

namespace {

// The calls in progress and the watchdog that watches them. Lock order:
// the GIL before `mutex` (a RuleCall's destructor holds the GIL), and
// nothing that may release the GIL (Python code) while holding `mutex`.
struct Watchdog {
  std::mutex mutex;
  std::condition_variable wake;
  std::list<RuleCall::Entry> calls;
  // Of bridge/isolation.py, kept for the process's life: StopRequested,
  // and _in_rule_code / _interrupted, which say where it may be raised.
  PyObject* stop_requested = nullptr;
  PyObject* in_rule_code = nullptr;
  PyObject* interrupted = nullptr;
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
        // Not waiting for the GIL here: a rule that holds it in native
        // code would keep this check from ever running.
        if (waited >= 2 * grace && embedded_interpreter())
          end_process(c, signal, waited);
        if (waited >= grace && !c.interrupted && !c.interrupting) {
          c.interrupting = true;
          to_interrupt = true;
        }
      }
      if (to_interrupt)
        std::thread([this] { interrupt(); }).detach();
    }
  }

  // Raises StopRequested in every call marked `interrupting` whose thread
  // runs the rule's own code now (not twins' code that puts the process's
  // state back: bridge/isolation.py RuleCode); the others are tried again
  // at the next tick. With the GIL held and only C API calls, which do not
  // release it, no call can end meanwhile.
  void interrupt() {
    const PyGILState_STATE gil = PyGILState_Ensure();
    std::vector<RuleCall::Entry*> todo;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (RuleCall::Entry& c : calls) {
        if (c.interrupting)
          todo.push_back(&c);
      }
    }
    for (RuleCall::Entry* c : todo) {
      PyObject* key = PyLong_FromUnsignedLong(c->thread);
      const bool inside = key && PyDict_Contains(in_rule_code, key) == 1;
      if (inside && PySet_Add(interrupted, key) == 0)
        PyThreadState_SetAsyncExc(c->thread, stop_requested);
      Py_XDECREF(key);
      PyErr_Clear();
      std::lock_guard<std::mutex> lock(mutex);
      c->interrupted = inside;
      c->interrupting = false;
    }
    PyGILState_Release(gil);
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
  if (!w.stop_requested) {
    // Under the GIL, which every RuleCall holds: set once.
    py::object isolation = isolation_module();
    w.in_rule_code = py::object(isolation.attr("_in_rule_code")).release().ptr();
    w.interrupted = py::object(isolation.attr("_interrupted")).release().ptr();
    w.stop_requested =
        py::object(isolation.attr("StopRequested")).release().ptr();
  }
  std::lock_guard<std::mutex> lock(w.mutex);
  w.calls.push_back(Entry{std::move(rule), what, step,
                          PyThread_get_thread_ident(), Clock::now()});
  entry_ = &w.calls.back();
  if (!w.started) {
    w.started = true;
    std::thread([&w] { w.run(); }).detach();
  }
}

RuleCall::~RuleCall() {
  // A StopRequested raised but not delivered was withdrawn when the rule's
  // code returned (isolation.RuleCode).
  Watchdog& w = Watchdog::get();
  std::lock_guard<std::mutex> lock(w.mutex);
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
