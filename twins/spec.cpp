#include "twins/spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace twins {

namespace {

constexpr TwinKind kTwinKinds[] = {TwinKind::kGauge,    TwinKind::kIdentity,
                                   TwinKind::kNoise,    TwinKind::kGaugeVo,
                                   TwinKind::kGaugeAll, TwinKind::kGaugeFull,
                                   TwinKind::kRoundTrip};

}  // namespace

const char* to_string(TwinKind kind) {
  switch (kind) {
    case TwinKind::kGauge:
      return "gauge";
    case TwinKind::kIdentity:
      return "identity";
    case TwinKind::kNoise:
      return "noise";
    case TwinKind::kGaugeVo:
      return "gauge-vo";
    case TwinKind::kGaugeAll:
      return "gauge-all";
    case TwinKind::kGaugeFull:
      return "gauge-full";
    case TwinKind::kRoundTrip:
      return "roundtrip";
  }
  return "?";
}

TwinKind parse_twin_kind(const std::string& name) {
  for (TwinKind kind : kTwinKinds) {
    if (name == to_string(kind))
      return kind;
  }
  TORCH_CHECK(false, "Unknown twin kind: '", name,
              "' (known: gauge, identity, noise, gauge-vo, gauge-all, "
              "gauge-full, roundtrip)");
}

bool acts_on_qk(TwinKind kind) {
  return kind == TwinKind::kGauge || kind == TwinKind::kGaugeAll ||
         kind == TwinKind::kGaugeFull;
}

bool acts_on_vo(TwinKind kind) {
  return kind == TwinKind::kGaugeVo || kind == TwinKind::kGaugeAll;
}

bool is_gauge(TwinKind kind) {
  return acts_on_qk(kind) || acts_on_vo(kind);
}

const char* to_string(Protocol protocol) {
  switch (protocol) {
    case Protocol::kPaperCpu:
      return "paper-cpu";
    case Protocol::kPaperGpu:
      return "paper-gpu";
    case Protocol::kTwins:
      return "twins";
  }
  return "?";
}

Protocol parse_protocol(const std::string& name) {
  for (Protocol p :
       {Protocol::kPaperCpu, Protocol::kPaperGpu, Protocol::kTwins}) {
    if (name == to_string(p))
      return p;
  }
  TORCH_CHECK(false, "Unknown protocol: '", name,
              "' (known: paper-cpu, paper-gpu, twins)");
}

torch::Dtype draw_dtype(Protocol protocol) {
  return protocol == Protocol::kPaperCpu ? torch::kFloat : torch::kDouble;
}

Protocol default_protocol(Protocol paper, torch::Dtype dtype) {
  return paper == Protocol::kPaperCpu && dtype == torch::kDouble
             ? Protocol::kTwins
             : paper;
}

model::Init model_init(Protocol protocol) {
  return protocol == Protocol::kPaperGpu ? model::Init::kByParameter
                                         : model::Init::kModuleDefault;
}

torch::Dtype parse_dtype(const std::string& name) {
  if (name == "float32")
    return torch::kFloat;
  if (name == "float64")
    return torch::kDouble;
  TORCH_CHECK(false, "Unknown dtype: '", name, "' (known: float32, float64)");
}

std::string dtype_name(torch::Dtype dtype) {
  TORCH_CHECK(dtype == torch::kFloat || dtype == torch::kDouble,
              "Unsupported dtype: ", dtype);
  return dtype == torch::kFloat ? "float32" : "float64";
}

namespace {

// The fields of copy 1 that follow the optimizer: shape, data, device.
std::string common_tail(const PairSpec& s) {
  std::string k = fmt::format(
      "|protocol={}|steps={}|lr={}|{}|{}|L{}-d{}-h{}-m{}|data={}",
      to_string(s.protocol), s.steps, s.lr, dtype_name(s.dtype), s.device,
      s.depth, s.d_model, s.heads, s.mlp, s.data_seed);
  // The attention beyond the paper's, only where given: every earlier key
  // stays as it was.
  if (s.kv_head_count() != s.heads)
    k += fmt::format("|kv={}", s.kv_head_count());
  if (s.rope)
    k += fmt::format("|rope={}", s.rope_base);
  if (s.stop_after > 0)
    k += fmt::format("|stop_after={}", s.stop_after);
  if (s.is_charlm()) {
    k += fmt::format("|ctx={}|batch={}|corpus={}", s.ctx, s.batch,
                     s.corpus.empty() ? "tinyshakespeare" : s.corpus);
  }
  return k;
}

std::string merge_text(const std::vector<int64_t>& steps) {
  return steps.empty() ? "" : fmt::format("|merge={}", fmt::join(steps, ","));
}

// The corpus by content (a char-LM pair bound by twins::bind_corpus):
// another text under the same name is another key.
std::string corpus_text(const PairSpec& s) {
  return s.corpus_sha256.empty() ? "" : "|sha256=" + s.corpus_sha256;
}

}  // namespace

std::string PairSpec::pair_id() const {
  return fmt::format(
             "{}|{}|{}|init={}|twin_seed={}|noise={}", task, opt,
             to_string(twin), init_seed,
             uses_twin_seed() ? fmt::format("{}", twin_seed) : "-",
             uses_noise_scale() ? fmt::format("{}", noise_scale) : "-") +
         common_tail(*this);
}

std::string PairSpec::key() const {
  return pair_id() + fmt::format("|hp={}", hparams_text(hparams)) +
         merge_text(merge_at) + corpus_text(*this) +
         fmt::format("|schema={}", kRecordSchema);
}

std::string PairSpec::reference_key() const {
  return fmt::format("{}|{}|init={}|hp={}", task, opt, init_seed,
                     hparams_text(hparams)) +
         common_tail(*this) + merge_text(merge_at);
}

std::string hparams_text(const optim::Hparams& hparams) {
  optim::Hparams sorted = hparams;  // a key must not depend on list order
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (const auto& [name, value] : sorted) {
    out += fmt::format("{}{}={}", out.empty() ? "" : ",", name, value);
  }
  return out;
}

std::string hparams_difference(const optim::Hparams& first,
                               const optim::Hparams& second) {
  auto find = [](const optim::Hparams& h, const std::string& name) {
    for (const auto& [n, v] : h) {
      if (n == name)
        return fmt::format("{}", v);
    }
    return std::string("missing");
  };
  for (const auto* list : {&first, &second}) {
    for (const auto& [name, value] : *list) {
      const std::string x = find(first, name), y = find(second, name);
      if (x != y)
        return fmt::format("{} {} vs {}", name, x, y);
    }
  }
  return "";
}

std::string format_scale(double scale) {
  std::string s = fmt::format("{:g}", scale);
  const size_t e = s.find("e-0");
  if (e != std::string::npos)
    s.erase(e + 2, 1);  // 1e-07 -> 1e-7
  return s;
}

std::string twin_label(const PairSpec& s) {
  switch (s.twin) {
    case TwinKind::kIdentity:
      return "A=I";
    case TwinKind::kNoise:
      return "noise " + format_scale(s.noise_scale);
    case TwinKind::kGaugeVo:
      return "gauge VO";
    case TwinKind::kGaugeAll:
      return "gauge QK+VO";
    case TwinKind::kGaugeFull:
      return "gauge full";
    case TwinKind::kRoundTrip:
      return "round trip";
    case TwinKind::kGauge:
      break;
  }
  return "gauge";
}

std::string pair_label(const PairSpec& s) {
  const std::string twin =
      s.twin == TwinKind::kIdentity ? std::string("identity") : twin_label(s);
  const std::string seeds =
      s.uses_twin_seed()
          ? fmt::format("init {}, seed {}", s.init_seed, s.twin_seed)
          : fmt::format("init {}", s.init_seed);
  return fmt::format("{} {} ({})", s.opt, twin, seeds);
}

}  // namespace twins
