// The numeric environment of a record: what, beside the binary and the
// pair, decides its float bits — the LibTorch version, the BLAS library and
// the kernels it chose for this CPU (its core type), the vector kernels
// ATen chose (its CPU capability), and the device. Two records of one key
// are bitwise equal when their environments agree (docs/output-format.md,
// "What is reproducible across machines"); records of different ones are
// not mixed in one file or aggregate unless the user allows it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace twins {

// "unknown" where a part cannot be asked (another BLAS than OpenBLAS, a
// record written before the field existed).
inline constexpr const char* kUnknownEnvironment = "unknown";

struct NumericEnv {
  std::string torch = kUnknownEnvironment;           // "1.13.0"
  std::string blas = kUnknownEnvironment;            // library and build
  std::string blas_core = kUnknownEnvironment;       // OpenBLAS: "Haswell"
  std::string cpu_capability = kUnknownEnvironment;  // "default", "avx2", ...
  std::string device = kUnknownEnvironment;  // "cpu: <model>", "cuda: <GPU>"
  // The model's products on the CPU (model/gemm.h, --matmul): "blas" or
  // "fma-chain". A record written before the field existed used the BLAS:
  // read back as "blas". On CUDA always "blas" (cuBLAS).
  std::string matmul = "blas";

  // False for a record without the field: it matches any environment.
  bool known() const;
  bool operator==(const NumericEnv& other) const;
};

// This process's environment for pairs on `device` ("cpu", "cuda",
// "cuda:N") under the process's --matmul; computed once per device and
// process (the matmul part when asked).
const NumericEnv& numeric_env(const std::string& device);

nlohmann::json to_json(const NumericEnv& env);
// Back from a record's "numeric_env" object; throws naming a field that is
// not a string. A missing field stays "unknown".
NumericEnv numeric_env_from_json(const nlohmann::json& object);

// How `a` differs from `b` in what decides the bits, in words
// ("blas_core Haswell vs Sandybridge"), or empty when it does not (or
// either is unknown). The CPU's model name is not compared: on a CPU the
// kernels are those of blas_core and cpu_capability, which
// --portable-kernels pins; a GPU's name is compared between CUDA devices.
std::string environment_difference(const NumericEnv& first,
                                   const NumericEnv& second);

// --portable-kernels (or TWINS_PORTABLE=1): the kernels every AVX2 machine
// can run, pinned before OpenBLAS and ATen choose theirs.
inline constexpr const char* kPortableBlasCore = "Haswell";
inline constexpr const char* kPortableCpuCapability = "avx2";

// Whether argv asks for the portable mode (--portable-kernels before any
// "--", or TWINS_PORTABLE=1). TWINS_PORTABLE may be unset, empty, 0 or 1;
// any other value throws naming it (a typo must not silently leave the
// kernels unpinned).
bool portable_requested(int argc, char** argv);

// Pins the portable kernels: when OPENBLAS_CORETYPE and ATEN_CPU_CAPABILITY
// are not already kPortableBlasCore and kPortableCpuCapability, sets them
// and re-executes this binary (/proc/self/exe) with the same argv, since
// OpenBLAS reads its variable when it loads, before main. Returns only in
// the pinned process; throws a one-line std::runtime_error when the CPU has
// no AVX2/FMA or the re-exec fails (or did not pin, which would loop).
// Call first thing in main.
void enter_portable_mode(char** argv);

// The vector instructions of a CPU that decide which BLAS kernels can run.
struct CpuVectors {
  bool avx2_fma = false;  // AVX2 with FMA: OpenBLAS's Haswell kernels
  bool avx512 = false;    // AVX-512 F, CD, BW, DQ, VL: its SkylakeX kernels
};
// This CPU's (both false off x86).
CpuVectors cpu_vectors();

// The OpenBLAS core to name for a CPU its DYNAMIC_ARCH build does not
// know: such a build falls back to its Prescott kernels (SSE3), products
// several times slower than the CPU's own and other float bits than every
// AVX2 / AVX-512 machine's (OpenBLAS 0.3.21 on an Intel Xeon of family 6
// model 207). SkylakeX where the CPU has AVX-512, else Haswell where it has
// AVX2 with FMA; empty where the chosen core stands: another BLAS, a build
// for one core, another core than Prescott, or a CPU without AVX2.
std::string core_for_unknown_cpu(const std::string& blas_config,
                                 const std::string& chosen_core,
                                 const CpuVectors& cpu);

// Where OpenBLAS chose its Prescott fallback on a CPU it does not know
// (core_for_unknown_cpu) and OPENBLAS_CORETYPE is unset, sets it to the
// CPU's core and re-executes this binary with the same argv, as
// enter_portable_mode does; the records then name that core in
// numeric_env.blas_core. A caller's OPENBLAS_CORETYPE, whatever its value,
// is left as it is. Returns where nothing is to be done, or when the
// re-exec fails (the run goes on with the chosen core, after a one-line
// note on stderr). Call first thing in main, after enter_portable_mode;
// never from the Python module, whose process is the user's interpreter.
void enter_known_blas_core(char** argv);

}  // namespace twins
