#include "twins/environment.h"

#include <ATen/Version.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <torch/version.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "model/gemm.h"

namespace twins {

namespace {

// Set across the portable mode's re-exec: a second re-exec would loop.
constexpr const char* kReexecGuard = "TWINS_PORTABLE_REEXEC";

template <class Fn>
Fn symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

// The value after `label` on its line of LibTorch's build summary
// (at::show_config(), the text torch.__config__.show() prints), or empty.
std::string config_value(const std::string& config, const std::string& label,
                         const char* ends = "\n") {
  const size_t at = config.find(label);
  if (at == std::string::npos)
    return "";
  const size_t from = at + label.size();
  return config.substr(from, config.find_first_of(ends, from) - from);
}

// ATen's CPU capability, as ATEN_CPU_CAPABILITY names it. Read from the
// build summary: at::native::get_cpu_capability() is not exported by
// LibTorch's shared library (1.13 nor 2.x), the summary's "CPU capability
// usage" line is its value in both ("NO AVX" in 1.13 and "DEFAULT" later
// for the default kernels).
std::string cpu_capability(const std::string& config) {
  std::string v = config_value(config, "CPU capability usage: ");
  if (v.empty())
    return kUnknownEnvironment;
  if (v == "NO AVX" || v == "DEFAULT")
    return "default";
  for (char& c : v)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v;
}

// The BLAS library and the core type it chose. OpenBLAS (a DYNAMIC_ARCH
// build picks its kernels for the CPU when it loads, or as
// OPENBLAS_CORETYPE says) is asked at run time, so that a LibTorch on
// another BLAS still links; its configuration string names the core too,
// which is cut out here so that a difference names blas_core alone.
// OpenBLAS's configuration string and the core it chose, where the BLAS
// is OpenBLAS (its functions are found in this process); false otherwise.
bool openblas_choice(std::string* config, std::string* core) {
  using Text = char* (*)();
  auto get_config = symbol<Text>("openblas_get_config");
  auto get_core = symbol<Text>("openblas_get_corename");
  if (!get_config || !get_core)
    return false;
  *config = get_config();
  *core = get_core();
  return true;
}

void blas_of(const std::string& config, NumericEnv* env) {
  std::string blas, core;
  if (openblas_choice(&blas, &core)) {
    const size_t at = core.empty() ? std::string::npos
                                   : blas.find(" " + core);
    if (at != std::string::npos)
      blas.erase(at, core.size() + 1);
    env->blas = blas;
    env->blas_core = core;
    return;
  }
  // Intel MKL (the PyPI wheels link it into libtorch_cpu) says its
  // version; its kernel choice is not asked here.
  using MklVersion = void (*)(char*, int);
  if (auto mkl = symbol<MklVersion>("MKL_Get_Version_String")) {
    char buffer[256] = {};
    mkl(buffer, sizeof(buffer) - 1);
    env->blas = buffer;
    return;
  }
  const std::string info = config_value(config, "BLAS_INFO=", ",\n");
  if (!info.empty())
    env->blas = "BLAS_INFO=" + info;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        const size_t from = line.find_first_not_of(" \t", colon + 1);
        return from == std::string::npos ? "" : line.substr(from);
      }
    }
  }
  return "";
}

// The GPU's name from the CUDA driver (libcuda, loaded by a CUDA LibTorch),
// so that a CPU build needs no CUDA headers; empty when it is not loaded.
std::string gpu_name(const std::string& device) {
  void* cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!cuda)
    return "";
  using Init = int (*)(unsigned);
  using Get = int (*)(int*, int);
  using Name = int (*)(char*, int, int);
  auto init = reinterpret_cast<Init>(dlsym(cuda, "cuInit"));
  auto get = reinterpret_cast<Get>(dlsym(cuda, "cuDeviceGet"));
  auto name = reinterpret_cast<Name>(dlsym(cuda, "cuDeviceGetName"));
  const size_t colon = device.find(':');
  const int ordinal =
      colon == std::string::npos ? 0 : std::atoi(device.c_str() + colon + 1);
  char buffer[256] = {};
  int handle = 0;
  const bool ok = init && get && name && init(0) == 0 &&
                  get(&handle, ordinal) == 0 &&
                  name(buffer, sizeof(buffer) - 1, handle) == 0;
  dlclose(cuda);  // RTLD_NOLOAD took a reference of its own
  return ok ? buffer : "";
}

NumericEnv compute(const std::string& device) {
  NumericEnv env;
  const std::string config = at::show_config();
  env.torch = TORCH_VERSION;
  blas_of(config, &env);
  env.cpu_capability = cpu_capability(config);
  const bool cuda = device.rfind("cuda", 0) == 0;
  const std::string name = cuda ? gpu_name(device) : cpu_model();
  env.device = (cuda ? "cuda" : "cpu") + (name.empty() ? "" : ": " + name);
  return env;
}

std::string env_text(const nlohmann::json& object, const char* name) {
  if (!object.contains(name))
    return kUnknownEnvironment;
  TORCH_CHECK(object[name].is_string(), "field 'numeric_env.", name,
              "' is not a string");
  return object[name].get<std::string>();
}

bool equals(const char* var, const char* want) {
  const char* v = std::getenv(var);
  return v && std::strcmp(v, want) == 0;
}

}  // namespace

bool NumericEnv::known() const {
  return !(*this == NumericEnv{});
}

bool NumericEnv::operator==(const NumericEnv& other) const {
  return torch == other.torch && blas == other.blas &&
         blas_core == other.blas_core &&
         cpu_capability == other.cpu_capability && device == other.device &&
         matmul == other.matmul;
}

const NumericEnv& numeric_env(const std::string& device) {
  static std::mutex mutex;
  static std::map<std::string, NumericEnv> computed;
  std::lock_guard<std::mutex> lock(mutex);
  const bool cuda = device.rfind("cuda", 0) == 0;
  const std::string matmul =
      cuda ? "blas" : model::matmul_name(model::matmul());
  const std::string key = device + "|" + matmul;
  auto it = computed.find(key);
  if (it == computed.end()) {
    NumericEnv env = compute(device);
    env.matmul = matmul;
    it = computed.emplace(key, env).first;
  }
  return it->second;
}

nlohmann::json to_json(const NumericEnv& env) {
  return {{"torch", env.torch},
          {"blas", env.blas},
          {"blas_core", env.blas_core},
          {"cpu_capability", env.cpu_capability},
          {"device", env.device},
          {"matmul", env.matmul}};
}

NumericEnv numeric_env_from_json(const nlohmann::json& object) {
  TORCH_CHECK(object.is_object(), "field 'numeric_env' is not an object");
  NumericEnv env;
  env.torch = env_text(object, "torch");
  env.blas = env_text(object, "blas");
  env.blas_core = env_text(object, "blas_core");
  env.cpu_capability = env_text(object, "cpu_capability");
  env.device = env_text(object, "device");
  env.matmul = object.contains("matmul") ? env_text(object, "matmul") : "blas";
  return env;
}

std::string environment_difference(const NumericEnv& first,
                                   const NumericEnv& second) {
  if (!first.known() || !second.known())
    return "";
  const bool gpus =
      first.device.rfind("cuda", 0) == 0 && second.device.rfind("cuda", 0) == 0;
  const std::pair<const char*, const std::string NumericEnv::*> parts[] = {
      {"torch", &NumericEnv::torch},
      {"blas", &NumericEnv::blas},
      {"blas_core", &NumericEnv::blas_core},
      {"cpu_capability", &NumericEnv::cpu_capability},
      {"device", &NumericEnv::device},
      {"matmul", &NumericEnv::matmul}};
  std::string out;
  for (const auto& [name, part] : parts) {
    if (part == &NumericEnv::device && !gpus)
      continue;
    if (first.*part != second.*part) {
      out += (out.empty() ? "" : ", ") + std::string(name) + " " + first.*part +
             " vs " + second.*part;
    }
  }
  return out;
}

bool portable_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0)
      break;
    if (std::strcmp(argv[i], "--portable-kernels") == 0)
      return true;
  }
  const char* value = std::getenv("TWINS_PORTABLE");
  const std::string text = value ? value : "";
  if (text != "" && text != "0" && text != "1") {
    throw std::runtime_error("TWINS_PORTABLE='" + text +
                             "': expected 1 (pin the kernels, as "
                             "--portable-kernels) or 0 (do not)");
  }
  return text == "1";
}

void enter_portable_mode(char** argv) {
  if (equals("OPENBLAS_CORETYPE", kPortableBlasCore) &&
      equals("ATEN_CPU_CAPABILITY", kPortableCpuCapability)) {
    ::unsetenv(kReexecGuard);  // pinned: not passed on to children
    return;
  }
  if (std::getenv(kReexecGuard)) {
    throw std::runtime_error(
        "--portable-kernels: the re-executed twin-run did not get "
        "OPENBLAS_CORETYPE=Haswell and ATEN_CPU_CAPABILITY=avx2; not "
        "re-executing again");
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    throw std::runtime_error(
        "--portable-kernels pins AVX2 kernels (OpenBLAS Haswell, ATen avx2) "
        "and this CPU has no AVX2/FMA; run without it, on machines of one "
        "kind");
  }
#else
  throw std::runtime_error(
      "--portable-kernels pins x86 AVX2 kernels; this is not an x86 CPU");
#endif
  std::string changed;
  for (const auto& [var, want] :
       {std::pair<const char*, const char*>{"OPENBLAS_CORETYPE",
                                            kPortableBlasCore},
        {"ATEN_CPU_CAPABILITY", kPortableCpuCapability}}) {
    const char* was = std::getenv(var);
    if (was && std::strcmp(was, want) != 0) {
      changed += std::string(changed.empty() ? "" : ", ") + var + " " + was +
                 " -> " + want;
    }
    ::setenv(var, want, 1);
  }
  if (!changed.empty()) {
    std::fprintf(stderr, "twin-run: note: --portable-kernels: %s\n",
                 changed.c_str());
  }
  ::setenv(kReexecGuard, "1", 1);
  ::execv("/proc/self/exe", argv);
  throw std::runtime_error(std::string("--portable-kernels: cannot re-execute "
                                       "/proc/self/exe: ") +
                           std::strerror(errno));
}

CpuVectors cpu_vectors() {
  CpuVectors cpu;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  cpu.avx2_fma =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = cpu.avx2_fma && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
#endif
  return cpu;
}

std::string core_for_unknown_cpu(const std::string& blas_config,
                                 const std::string& chosen_core,
                                 const CpuVectors& cpu) {
  const bool dynamic = blas_config.rfind("OpenBLAS", 0) == 0 &&
                       blas_config.find("DYNAMIC_ARCH") != std::string::npos;
  if (!dynamic || chosen_core != "Prescott" || !cpu.avx2_fma)
    return "";
  return cpu.avx512 ? "SkylakeX" : "Haswell";
}

void enter_known_blas_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE"))
    return;  // the caller's choice, or this re-exec's
  std::string config, chosen;
  if (!openblas_choice(&config, &chosen))
    return;
  const std::string core = core_for_unknown_cpu(config, chosen, cpu_vectors());
  if (core.empty())
    return;
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  const int error = errno;
  ::unsetenv("OPENBLAS_CORETYPE");  // not re-executed: not passed on either
  std::fprintf(stderr,
               "twin-run: note: cannot re-execute /proc/self/exe with "
               "OPENBLAS_CORETYPE=%s (%s): running on OpenBLAS's Prescott "
               "kernels, which it chose for this CPU\n",
               core.c_str(), std::strerror(error));
}

}  // namespace twins
