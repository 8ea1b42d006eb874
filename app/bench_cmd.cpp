#include "app/bench_cmd.h"

#include <fmt/format.h>

#include <cstdio>

#include "app/flags.h"
#include "twins/io.h"

namespace app {

CLI::App* setup_bench(CLI::App& app, BenchFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Speed of a twin pair: seconds per pair-step, model GFLOP/s, the "
      "matrix-multiply roof of the same shapes, and optionally eager "
      "PyTorch side by side");
  add_names(*cmd, "--rows", flags.options.rows,
            "Rows, comma-separated: mod47-f32 (copies concurrent), "
            "mod47-torchadam (the same with torch.optim.Adam stepped "
            "in Python; with Python support), mod47-f32-seq1, mod47-f32-seq2 "
            "(copies one after the other on "
            "1 / 2 threads), mod47-f64, charlm-f32, charlm-f64, and with "
            "-fma (mod47-f32-fma, mod47-torchadam-fma, mod47-f64-fma, "
            "charlm-f32-fma, charlm-f64-fma) the same pairs on twins' "
            "FMA-chain kernels (--matmul fma-chain; where the CPU has AVX2 "
            "or AVX-512) [default: all]");
  cmd->add_flag("--kernels", flags.kernels,
                "Instead of the rows: every product shape of the mod47 "
                "model's step alone on one thread, in the step's operand "
                "layout (a weight's gradient reads dY transposed), float32 "
                "and float64, LibTorch's BLAS against twins' FMA-chain "
                "kernels, in "
                "GFLOP/s and % of one core's FMA peak; the kernels' products "
                "inside the step (a clock around each call while a pair "
                "trains on one thread), in GFLOP/s and % of the peak; and "
                "the MLP's product with SiLU as a pass of its own against "
                "SiLU in the kernels' stores, in ms");
  cmd->add_flag("--vs-pytorch", flags.options.vs_pytorch,
                "Also time bench/eager_pytorch.py at three thread settings "
                "(LibTorch/OpenBLAS 1/1, 1/cores, cores/cores; median of 5 "
                "runs each) and print the speedup over the best");
  cmd->add_option("--python", flags.options.python,
                  "Python with torch for --vs-pytorch")
      ->capture_default_str();
  cmd->add_option("--repeats", flags.options.repeats,
                  "Timed segments per row (the median is reported)")
      ->capture_default_str()
      ->check(whole_number(1, 1000));
  cmd->add_flag("--quick", flags.options.quick,
                "A few steps per row: checks that the benchmark runs; the "
                "figures are not meaningful");
  cmd->add_option("--device", flags.options.device,
                  "Where the rows run: cpu, cuda or cuda:N (the eager "
                  "columns are CPU only)")
      ->capture_default_str();
  cmd->add_option("--out", flags.out,
                  "JSON results [default: runs/bench-<date>-<time>.json]");
  return cmd;
}

namespace {

void print_line(const std::string& s) {
  std::fprintf(stderr, "%s\n", s.c_str());
}

}  // namespace

int run_bench(const BenchFlags& flags) {
  const std::string path = flags.out.empty()
                               ? twins::fresh_path("runs", "bench", ".json")
                               : flags.out;
  // Before the benchmark runs, not after: a bad --out costs nothing.
  bench::check_bench_output(path);
  if (flags.kernels) {
    // The table times the CPU kernels alone: nothing of a row applies.
    TORCH_CHECK(flags.options.rows.empty() && !flags.options.vs_pytorch &&
                    flags.options.device == "cpu",
                "--kernels times each product shape on the CPU alone; it "
                "takes no --rows, --vs-pytorch or --device");
    const int repeats = flags.options.quick ? 1 : flags.options.repeats;
    nlohmann::json j;
    std::string tables;
    for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
      const auto figures = bench::kernel_figures("mod47", dtype, repeats);
      const std::string name = twins::dtype_name(dtype);
      tables += bench::format_kernel_table(figures, "mod47 " + name);
      j[name] = bench::kernels_to_json(figures);
      const auto in_step = bench::step_products("mod47", dtype, repeats);
      tables += bench::format_step_products(in_step) + "\n";
      j["in_step"][name] = bench::step_products_to_json(in_step);
      const auto silu = bench::silu_figures("mod47", dtype, repeats);
      tables += bench::format_silu_table(silu) + "\n";
      j["silu"][name] = bench::silu_to_json(silu);
    }
    const bench::BenchMachine machine = bench::bench_machine();
    fmt::print("{}\n{}", machine.line(), tables);
    bench::write_bench_file(path, machine, {}, flags.options.quick, j);
    fmt::print("benchmark written to {}\n", path);
    return 0;
  }
  const auto rows = bench::run_bench(flags.options, print_line);
  const bench::BenchMachine machine = bench::bench_machine();
  fmt::print("{}\n{}", machine.line(), bench::format_bench_table(rows));
  bench::write_bench_file(path, machine, rows, flags.options.quick);
  fmt::print("benchmark written to {}\n", path);
  return 0;
}

}  // namespace app
