// Helpers of the end-to-end tests that run the twin-run binary: a fresh
// scratch directory, a file's bytes, and one run with its exit code and
// output.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>

#include "twin_run_path.h"

namespace testing_helpers {

namespace fs = std::filesystem;

// An empty directory under the system temp dir, unique to this process.
inline fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() /
               ("twins-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Writes `text` as the whole of `p`.
inline void spit(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// The one-pair run end-to-end cases build on: fast, and a real record.
inline const std::string kPair = "--opt sgd --steps 1 --quiet";

struct Outcome {
  int code = -1;
  std::string out, err;
};

// Runs twin-run with `args` in `dir`; `env` is an optional "VAR=value "
// prefix for the command.
inline Outcome twin_run(const std::string& args, const fs::path& dir,
                        const std::string& env = "") {
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = "cd '" + dir.string() + "' && " + env + "'" +
                          TWIN_RUN_PATH + "' " + args + " >'" + out.string() +
                          "' 2>'" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  Outcome o;
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = slurp(out);
  o.err = slurp(err);
  return o;
}

// Starts twin-run in the background in `dir` (stdout to out.txt, stderr to
// err.txt; `env`, an optional "VAR=value " prefix), sends `signal` once
// `ready()` holds (polled every 10 ms, for at most a minute), and returns
// the exit status (-1 when a signal ended it).
inline int signalled_run(const fs::path& dir, const std::string& args,
                         int signal, const std::function<bool()>& ready,
                         const std::string& env = "") {
  const std::string cmd = "cd '" + dir.string() + "' && " + env + "exec '" +
                          TWIN_RUN_PATH + "' " + args + " >out.txt 2>err.txt";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 6000 && !ready(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::kill(pid, signal);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace testing_helpers
