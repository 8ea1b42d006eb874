#include "app/bench_cmd.h"

#include <fmt/format.h>

#include <cstdio>

#include "app/flags.h"
#include "twins/io.h"

namespace app {

CLI::App* setup_bench(CLI::App& app, BenchFlags& f) {
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Speed of a twin pair: seconds per pair-step, model GFLOP/s, the "
      "matrix-multiply roof of the same shapes, and optionally eager "
      "PyTorch side by side");
  add_names(*cmd, "--rows", f.options.rows,
            "Rows, comma-separated: mod47-f32 (copies concurrent), "
            "mod47-torchadam (the same with torch.optim.Adam stepped "
            "in Python; with Python support), mod47-f32-seq1, mod47-f32-seq2 (copies one after the other on "
            "1 / 2 threads), mod47-f64, charlm-f32, charlm-f64 [default: "
            "all]");
  cmd->add_flag("--vs-pytorch", f.options.vs_pytorch,
                "Also time bench/eager_pytorch.py at three thread settings "
                "(LibTorch/OpenBLAS 1/1, 1/cores, cores/cores; median of 5 "
                "runs each) and print the speedup over the best");
  cmd->add_option("--python", f.options.python,
                  "Python with torch for --vs-pytorch")
      ->capture_default_str();
  cmd->add_option("--repeats", f.options.repeats,
                  "Timed segments per row (the median is reported)")
      ->capture_default_str()
      ->check(whole_number(1, 1000));
  cmd->add_flag("--quick", f.options.quick,
                "A few steps per row: checks that the benchmark runs; the "
                "figures are not meaningful");
  cmd->add_option("--device", f.options.device,
                  "Where the rows run: cpu, cuda or cuda:N (the eager "
                  "columns are CPU only)")
      ->capture_default_str();
  cmd->add_option("--out", f.out,
                  "JSON results [default: runs/bench-<date>-<time>.json]");
  return cmd;
}

namespace {

void print_line(const std::string& s) {
  std::fprintf(stderr, "%s\n", s.c_str());
}

}  // namespace

int run_bench(const BenchFlags& f) {
  const std::string path =
      f.out.empty() ? twins::fresh_path("runs", "bench", ".json") : f.out;
  // Before the benchmark runs, not after: a bad --out costs nothing.
  twins::check_output_file(path, "--out");
  const auto rows = bench::run_bench(f.options, print_line);
  const bench::BenchMachine machine = bench::bench_machine();
  fmt::print("{}\n{}", machine.line(), bench::format_bench_table(rows));
  bench::write_bench_file(path, machine, rows, f.options.quick);
  fmt::print("benchmark written to {}\n", path);
  return 0;
}

}  // namespace app
