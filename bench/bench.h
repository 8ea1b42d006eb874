// The benchmark (`twin-run bench`): seconds per pair-step of the paper's
// pairs, model FLOP/s from the analytic matrix-multiply count
// (model/flops.h), the matrix-multiply roof of the same shapes measured in
// the same run at the same thread settings, and optionally the eager-PyTorch
// reference (bench/eager_pytorch.py) side by side.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gemm.h"
#include "twins/spec.h"

namespace bench {

// How the two copies of a pair use the CPU.
struct ThreadConfig {
  bool concurrent = false;   // copies on two threads
  int threads = 1;           // LibTorch intra-op = OpenBLAS threads per copy
  std::string name() const;  // "2 copies x 1 thread" / "sequential, 2 threads"
};

struct BenchRow {
  std::string name;      // e.g. "mod47 float32"
  twins::PairSpec spec;  // the pair timed (steps = warm-up + timed)
  ThreadConfig threads;
  model::Matmul matmul = model::Matmul::kBlas;  // the model's products
  double s_per_pair_step = 0;      // median over timed segments
  double flops_per_pair_step = 0;  // both copies, analytic
  double model_gflops = 0;         // flops_per_pair_step / s_per_pair_step
  double roof_gflops = 0;          // the step's products replayed back to back
  // Minor page faults per pair-step over the timed segments: what the
  // allocator settings (twins::keep_freed_memory) keep near zero on CPU.
  double faults_per_pair_step = 0;
  // Eager PyTorch at each thread setting of eager_settings(spec.device)
  // (bench/eager_pytorch.py on the row's device); empty when not measured.
  std::vector<double> eager_s;
  // Best eager / ours; 0 when not measured.
  double speedup_vs_best_eager() const;
};

// A thread setting of the eager reference: LibTorch intra-op threads
// (torch.set_num_threads) and OpenBLAS threads (OPENBLAS_NUM_THREADS; a
// Python user who only calls torch.set_num_threads(1) gets OpenBLAS at
// every core).
struct EagerSetting {
  int torch_threads = 1;
  int openblas_threads = 1;
  std::string name() const;  // "1/2": torch / OpenBLAS
};
// {1, 1}, {1, cores}, {cores, cores} (cores = 2 on this machine).
std::vector<EagerSetting> eager_settings();
// The settings timed for rows on `device`: eager_settings() on "cpu", only
// {1, 1} on a GPU (where the CPU threads only launch kernels).
std::vector<EagerSetting> eager_settings(const std::string& device);

struct BenchOptions {
  std::vector<std::string> rows;  // names from bench_row_names(); empty: all
  bool vs_pytorch = false;        // also time bench/eager_pytorch.py
  std::string python = "/usr/bin/python3";  // with Debian's python3-torch
  int repeats = 7;                          // timed segments per row (median)
  bool quick = false;          // fewer steps: a smoke test, not figures
  std::string device = "cpu";  // cpu, cuda or cuda:N: where the rows run
};

// "mod47-f32", "mod47-f32-seq1", "mod47-f32-seq2", "mod47-f64",
// "charlm-f32", "charlm-f64".
std::vector<std::string> bench_row_names();

// Runs the rows; `log` gets a line per row as it finishes (may be null).
std::vector<BenchRow> run_bench(const BenchOptions& options,
                                void (*log)(const std::string&) = nullptr);

std::string format_bench_table(const std::vector<BenchRow>& rows);
nlohmann::json bench_to_json(const std::vector<BenchRow>& rows);

// The machine a benchmark ran on, as its file records it.
struct BenchMachine {
  std::string date;  // local time, "2026-01-31 14:05"
  std::string cpu;   // /proc/cpuinfo's model name, or "unknown"
  unsigned cores = 0;
  // "<cpu> (<cores> cores), LibTorch <version>, <date>"
  std::string line() const;
};
BenchMachine bench_machine();

// The benchmark's file (docs/performance.md): the machine, LibTorch's
// version, whether --quick, the rows and (from --kernels) the per-shape
// kernel figures, written atomically; throws naming the file.
void write_bench_file(const std::string& path, const BenchMachine& machine,
                      const std::vector<BenchRow>& rows, bool quick,
                      const nlohmann::json& kernels = nullptr);

// Throws, naming `path`, unless the benchmark's file may be written there:
// check_output_file's checks, and a name that is not a results file's
// (.jsonl) and no existing file that is not a benchmark file (one JSON
// object with its "rows" and "torch_version"), so that a bench never
// replaces results, a summary or any other file (docs/output-format.md).
void check_bench_output(const std::string& path);

// The roof: GFLOP/s of one model step's matrix products (shapes from
// model::training_step_matmuls) replayed back to back in `dtype`, by one or
// two threads at the given settings.
double matmul_roof_gflops(const twins::PairSpec& spec,
                          const ThreadConfig& threads, int repeats,
                          model::Matmul matmul = model::Matmul::kBlas);

// Median seconds per pair-step of the eager-PyTorch reference, or -1 with a
// reason in `why` when it could not run (no python3-torch, no script).
// One process run per call; run_bench takes the median of several.
double eager_seconds_per_pair_step(const BenchOptions& options,
                                   const twins::PairSpec& spec,
                                   const EagerSetting& setting,
                                   std::string* why);

// Where bench/eager_pytorch.py is: next to the executable's tree or in the
// source tree; empty if neither has it.
std::string eager_script_path();

// One product shape of a model step, timed alone on one thread: LibTorch's
// mm (the BLAS) against twins' FMA-chain kernels (model/gemm.h), and the
// latter as a fraction of one core's FMA peak (model::fma_peak_gflops).
struct KernelFigure {
  int64_t m = 0, k = 0, n = 0;  // (m x k)(k x n)
  bool a_transposed = false;    // A read transposed, as the step reads it
  int count = 1;                // products of this shape in the step
  double share_of_step = 0;     // of the step's matmul FLOPs (all shapes)
  double blas_gflops = 0, chain_gflops = 0, fma_peak_gflops = 0;
};
// Every distinct linear-map product of one training step of `task`'s
// default model in `dtype` (attention's batched products aside), each the
// median of `repeats` timed runs. `twin-run bench --kernels`. Throws when
// this CPU has no kernels.
std::vector<KernelFigure> kernel_figures(const std::string& task,
                                         torch::Dtype dtype, int repeats);
std::string format_kernel_table(const std::vector<KernelFigure>& figures,
                                const std::string& title);
nlohmann::json kernels_to_json(const std::vector<KernelFigure>& figures);

// The kernels' products as a training step runs them: one pair of
// `task`'s default model in `dtype` trained on the kernels, one copy after
// the other on one thread, with model's kernel clock on for `repeats`
// segments of steps (after a warm-up). Per copy-step: the products' FLOPs
// and seconds as the clock saw them, the step's wall seconds, and the
// products' rate. Medians over the segments. Throws when this CPU has no
// kernels.
struct StepProducts {
  double flops_per_step = 0;   // the kernels' FLOPs, one copy-step
  double calls_per_step = 0;   // kernel calls, one copy-step
  double product_seconds = 0;  // in the kernels, one copy-step
  double step_seconds = 0;     // wall, one copy-step
  double gflops = 0, fma_peak_gflops = 0;
};
StepProducts step_products(const std::string& task, torch::Dtype dtype,
                           int repeats);
std::string format_step_products(const StepProducts& figure);
nlohmann::json step_products_to_json(const StepProducts& figure);

// The MLP's SiLU beside its product, per call in ms on one thread: the
// forward h = x W1^T then SiLU(h), and the backward's dY W2 then SiLU'(h)
// times it; by the BLAS and LibTorch's silu / silu_backward, by the
// kernels and the same LibTorch passes, and by the kernels with SiLU in
// their stores (model::chain_mm_silu / chain_mm_silu_grad).
struct SiluFigure {
  std::string pass;             // "forward", "backward"
  int64_t m = 0, k = 0, n = 0;  // the product's (m x k)(k x n)
  double blas_ms = 0, chain_ms = 0, fused_ms = 0;
};
// For each row count of the step's MLP (the first block's token rows, the
// last block's), the medians of `repeats` runs. Throws when this CPU has
// no kernels.
std::vector<SiluFigure> silu_figures(const std::string& task,
                                     torch::Dtype dtype, int repeats);
std::string format_silu_table(const std::vector<SiluFigure>& figures);
nlohmann::json silu_to_json(const std::vector<SiluFigure>& figures);

}  // namespace bench
