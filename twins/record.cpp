#include "twins/record.h"

#include <fmt/format.h>

#include <cmath>

#include "twins/device.h"

namespace twins {

namespace {

using nlohmann::json;

json num(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

json pair_of(const std::array<double, 2>& v) {
  return json::array({num(v[0]), num(v[1])});
}

json numbers(const std::vector<double>& v) {
  json out = json::array();
  for (double x : v)
    out.push_back(num(x));
  return out;
}

// ---------------------------------------------------------------------------
// Reading

// j[name]; `what` names j in the message ("record", "merge record").
const json& field(const json& j, const std::string& name,
                  const char* what = "record") {
  TORCH_CHECK(j.is_object(), what, " is not a JSON object");
  auto it = j.find(name);
  TORCH_CHECK(it != j.end(), what, " has no '", name, "' field");
  return *it;
}

// A number, or NaN for null (how non-finite values are written).
double real(const json& v, const std::string& name) {
  if (v.is_null())
    return std::nan("");
  TORCH_CHECK(v.is_number(), "field '", name, "' is not a number");
  return v.get<double>();
}

// A hyperparameter: a number, or a non-finite one as its text.
double hparam(const json& v, const std::string& name) {
  if (v.is_string()) {
    const std::string t = v.get<std::string>();
    TORCH_CHECK(t == "inf" || t == "-inf" || t == "nan", "hyperparameter '",
                name, "' is '", t, "', not a number");
    return t == "nan" ? std::nan("") : t == "inf" ? HUGE_VAL : -HUGE_VAL;
  }
  return real(v, "hparams");
}

int64_t integer(const json& v, const std::string& name) {
  TORCH_CHECK(v.is_number_integer(), "field '", name, "' is not an integer");
  return v.get<int64_t>();
}

uint64_t seed(const json& v, const std::string& name) {
  TORCH_CHECK(v.is_number_unsigned() ||
                  (v.is_number_integer() && v.get<int64_t>() >= 0),
              "field '", name, "' is not a seed");
  return v.get<uint64_t>();
}

std::string text(const json& v, const std::string& name) {
  TORCH_CHECK(v.is_string(), "field '", name, "' is not a string");
  return v.get<std::string>();
}

std::array<double, 2> pair_from(const json& v, const std::string& name) {
  TORCH_CHECK(v.is_array() && v.size() == 2, "field '", name,
              "' is not a pair of numbers");
  return {real(v[0], name), real(v[1], name)};
}

std::vector<double> numbers_from(const json& v, const std::string& name) {
  TORCH_CHECK(v.is_array(), "field '", name, "' is not an array");
  std::vector<double> out;
  for (const json& x : v)
    out.push_back(real(x, name));
  return out;
}

CurvePoint curve_point(const json& p) {
  CurvePoint c;
  c.step = integer(field(p, "step"), "curve.step");
  c.logit_drift = real(field(p, "logit_drift"), "curve.logit_drift");
  c.qk_drift_mean = real(field(p, "qk_drift_mean"), "curve.qk_drift_mean");
  c.qk_drift_max = real(field(p, "qk_drift_max"), "curve.qk_drift_max");
  if (p.contains("vo_drift_mean")) {
    c.vo_drift_mean = real(p["vo_drift_mean"], "curve.vo_drift_mean");
    c.vo_drift_max = real(field(p, "vo_drift_max"), "curve.vo_drift_max");
  }
  c.val_loss = pair_from(field(p, "val_loss"), "curve.val_loss");
  c.val_acc = pair_from(field(p, "val_acc"), "curve.val_acc");
  c.train_loss = p.contains("train_loss")
                     ? pair_from(p["train_loss"], "curve.train_loss")
                     : std::array<double, 2>{std::nan(""), std::nan("")};
  return c;
}

// ---------------------------------------------------------------------------
// Head merging (twins/merge.h)

json path_json(const LossPath& p) {
  return {{"val_loss", numbers(p.loss)},
          {"val_acc", numbers(p.acc)},
          {"barrier", num(p.barrier)}};
}

LossPath path_from(const json& j, const std::string& name) {
  const json& p = field(j, name, "merge record");
  LossPath out;
  out.loss = numbers_from(field(p, "val_loss", "merge record"),
                          "merge." + name + ".val_loss");
  out.acc = numbers_from(field(p, "val_acc", "merge record"),
                         "merge." + name + ".val_acc");
  out.barrier = real(field(p, "barrier", "merge record"),
                     "merge." + name + ".barrier");
  return out;
}

// An alignment's summary, as fields of `j` (R_j are not recorded).
void put_alignment(const Alignment& a, json& j) {
  j["residual_per_head"] = numbers(a.residual);
  j["residual_mean"] = num(a.residual_mean);
  j["residual_max"] = num(a.residual_max);
  j["unaligned_residual_mean"] = num(a.unaligned_residual_mean);
  j["unaligned_residual_max"] = num(a.unaligned_residual_max);
  j["rotation_error_per_head"] = numbers(a.rotation_error);
  j["rotation_error_mean"] = num(a.rotation_error_mean);
  j["rotation_error_max"] = num(a.rotation_error_max);
}

// `what`: the fields' prefix in an error ("merge", "merge.vo", ...).
Alignment alignment_from(const json& j, const std::string& what) {
  auto get = [&](const char* name) -> const json& {
    return field(j, name, "merge record");
  };
  auto value = [&](const char* name) {
    return real(get(name), what + "." + name);
  };
  auto values = [&](const char* name) {
    return numbers_from(get(name), what + "." + name);
  };
  Alignment a;
  a.residual = values("residual_per_head");
  a.residual_mean = value("residual_mean");
  a.residual_max = value("residual_max");
  a.unaligned_residual_mean = value("unaligned_residual_mean");
  a.unaligned_residual_max = value("unaligned_residual_max");
  a.rotation_error = values("rotation_error_per_head");
  a.rotation_error_mean = value("rotation_error_mean");
  a.rotation_error_max = value("rotation_error_max");
  return a;
}

}  // namespace

// The value/output alignment ("vo") and the unrestricted comparison under
// rotary positions ("unrestricted") are written only when measured, so the
// records of the paper's attention keep their fields.
json to_json(const MergePoint& point) {
  json j = {{"step", point.step},
            {"lambda", numbers(point.lambdas)},
            {"naive", path_json(point.naive)},
            {"aligned", path_json(point.aligned)}};
  put_alignment(point.alignment, j);
  j["qk_drift_mean"] = num(point.qk_drift_mean);
  j["qk_drift_max"] = num(point.qk_drift_max);
  if (point.values) {
    json vo;
    put_alignment(*point.values, vo);
    j["vo"] = vo;
    j["vo_drift_mean"] = num(point.vo_drift_mean);
    j["vo_drift_max"] = num(point.vo_drift_max);
  }
  if (point.unrestricted) {
    json u = {{"path", path_json(point.unrestricted->path)}};
    put_alignment(point.unrestricted->alignment, u);
    j["unrestricted"] = u;
  }
  return j;
}

MergePoint merge_point_from_json(const json& j) {
  auto value = [&](const char* name) {
    return real(field(j, name, "merge record"), std::string("merge.") + name);
  };
  MergePoint p;
  p.step = integer(field(j, "step", "merge record"), "merge.step");
  p.lambdas = numbers_from(field(j, "lambda", "merge record"), "merge.lambda");
  p.naive = path_from(j, "naive");
  p.aligned = path_from(j, "aligned");
  std::vector<const LossPath*> paths = {&p.naive, &p.aligned};
  p.alignment = alignment_from(j, "merge");
  p.qk_drift_mean = value("qk_drift_mean");
  p.qk_drift_max = value("qk_drift_max");
  if (j.contains("vo")) {
    p.values = alignment_from(j["vo"], "merge.vo");
    p.vo_drift_mean = value("vo_drift_mean");
    p.vo_drift_max = value("vo_drift_max");
  }
  if (j.contains("unrestricted")) {
    const json& u = j["unrestricted"];
    p.unrestricted = MergePoint::Unrestricted{
        path_from(u, "path"), alignment_from(u, "merge.unrestricted")};
    paths.push_back(&p.unrestricted->path);
  }
  for (const LossPath* path : paths) {
    TORCH_CHECK(path->loss.size() == p.lambdas.size() &&
                    path->acc.size() == p.lambdas.size(),
                "merge record: ", p.lambdas.size(), " lambdas but ",
                path->loss.size(), " losses and ", path->acc.size(),
                " accuracies");
  }
  return p;
}

// ---------------------------------------------------------------------------
// Pairs

json spec_to_json(const PairSpec& s) {
  json j;
  j["protocol"] = to_string(s.protocol);
  j["task"] = s.task;
  j["opt"] = s.opt;
  json hp = json::object();
  // JSON has no infinity: a non-finite default (D-Adaptation's and
  // Prodigy's growth_rate=inf) is written as its text ("inf", "-inf",
  // "nan"), so that the record reads back to the key it was written with.
  for (const auto& [name, value] : s.hparams)
    hp[name] = std::isfinite(value) ? json(value)
                                    : json(fmt::format("{}", value));
  j["hparams"] = hp;
  j["twin"] = to_string(s.twin);
  j["init_seed"] = s.init_seed;
  j["twin_seed"] = s.uses_twin_seed() ? json(s.twin_seed) : json(nullptr);
  j["noise_scale"] = s.uses_noise_scale() ? json(s.noise_scale) : json(nullptr);
  j["lr"] = s.lr;
  j["steps"] = s.steps;
  if (s.stop_after > 0)
    j["stop_after"] = s.stop_after;
  j["dtype"] = dtype_name(s.dtype);
  j["device"] = s.device;
  j["data_seed"] = s.data_seed;
  if (s.is_charlm()) {
    j["ctx"] = s.ctx;
    j["batch"] = s.batch;
    j["corpus"] = s.corpus.empty() ? "tinyshakespeare" : s.corpus;
    if (!s.corpus_sha256.empty())
      j["corpus_sha256"] = s.corpus_sha256;
  }
  j["model"] = {{"depth", s.depth},
                {"d_model", s.d_model},
                {"heads", s.heads},
                {"mlp", s.mlp}};
  // Only where given, so the paper's records keep their fields.
  if (s.kv_head_count() != s.heads)
    j["model"]["kv_heads"] = s.kv_head_count();
  if (s.rope)
    j["model"]["rope_base"] = s.rope_base;
  if (!s.twin_is_symmetry())
    j["twin_is_symmetry"] = false;
  if (!s.merge_at.empty())
    j["merge_at"] = s.merge_at;
  return j;
}

namespace {

// The record's "model" object into `s`: the shape, grouped-query heads and
// rotary positions.
void model_from_json(const json& m, PairSpec& s) {
  s.depth = integer(field(m, "depth"), "model.depth");
  s.d_model = integer(field(m, "d_model"), "model.d_model");
  s.heads = integer(field(m, "heads"), "model.heads");
  s.mlp = integer(field(m, "mlp"), "model.mlp");
  if (m.contains("kv_heads")) {
    s.kv_heads = integer(m["kv_heads"], "model.kv_heads");
    if (s.kv_heads == s.heads)
      s.kv_heads = 0;
  }
  if (m.contains("rope_base")) {
    s.rope = true;
    s.rope_base = real(m["rope_base"], "model.rope_base");
  }
}

// The char-LM's fields into `s`: context, batch and the corpus with its
// digest (absent for mod-p records).
void data_from_json(const json& j, PairSpec& s) {
  if (j.contains("ctx"))
    s.ctx = integer(j["ctx"], "ctx");
  if (j.contains("batch"))
    s.batch = integer(j["batch"], "batch");
  if (j.contains("corpus")) {
    s.corpus = text(j["corpus"], "corpus");
    if (s.corpus == "tinyshakespeare")
      s.corpus.clear();  // the shipped one
  }
  if (j.contains("corpus_sha256"))
    s.corpus_sha256 = text(j["corpus_sha256"], "corpus_sha256");
}

}  // namespace

PairSpec spec_from_json(const json& j) {
  PairSpec s;
  // Records before schema 3 name no protocol: they followed the project's
  // own (PyTorch's init, float64 draws).
  s.protocol = j.contains("protocol")
                   ? parse_protocol(text(j["protocol"], "protocol"))
                   : Protocol::kTwins;
  s.task = text(field(j, "task"), "task");
  s.opt = text(field(j, "opt"), "opt");
  if (j.contains("hparams")) {
    const json& hp = j["hparams"];
    TORCH_CHECK(hp.is_object(), "field 'hparams' is not an object");
    // Read back in name order; keys sort hyperparameters by name anyway.
    for (auto it = hp.begin(); it != hp.end(); ++it) {
      s.hparams.emplace_back(it.key(), hparam(it.value(), it.key()));
    }
  }
  s.twin = parse_twin_kind(text(field(j, "twin"), "twin"));
  s.init_seed = seed(field(j, "init_seed"), "init_seed");
  const json& ts = field(j, "twin_seed");
  s.twin_seed = ts.is_null() ? 0 : seed(ts, "twin_seed");
  const json& ns = field(j, "noise_scale");
  s.noise_scale = ns.is_null() ? 0 : real(ns, "noise_scale");
  s.lr = real(field(j, "lr"), "lr");
  s.steps = integer(field(j, "steps"), "steps");
  if (j.contains("stop_after"))
    s.stop_after = integer(j["stop_after"], "stop_after");
  s.dtype = parse_dtype(text(field(j, "dtype"), "dtype"));
  s.device = text(field(j, "device"), "device");
  s.data_seed = seed(field(j, "data_seed"), "data_seed");
  model_from_json(field(j, "model"), s);
  data_from_json(j, s);
  if (j.contains("merge_at")) {
    TORCH_CHECK(j["merge_at"].is_array(), "field 'merge_at' is not an array");
    for (const json& v : j["merge_at"]) {
      s.merge_at.push_back(integer(v, "merge_at"));
    }
  }
  return s;
}

json commutation_to_json(const Commutation& c) {
  return {{"moved_at", c.moved_at > 0 ? json(c.moved_at) : json(nullptr)},
          {"errors", numbers(c.errors)},
          {"sizes", numbers(c.sizes)}};
}

Commutation commutation_from_json(const json& j) {
  TORCH_CHECK(j.is_object(), "field 'commutation' is not an object");
  Commutation c;
  c.measured = true;
  const json& moved = field(j, "moved_at");
  c.moved_at = moved.is_null() ? -1 : integer(moved, "moved_at");
  TORCH_CHECK(moved.is_null() || c.moved_at > 0,
              "field 'moved_at' must be a step >= 1 or null, not ", c.moved_at);
  c.errors = numbers_from(field(j, "errors"), "commutation errors");
  TORCH_CHECK(c.moved_at > 0 || c.errors.empty(),
              "field 'commutation' has errors but no moved_at");
  // Records written before the sizes were measured carry none.
  if (j.contains("sizes")) {
    c.sizes = numbers_from(j["sizes"], "commutation sizes");
    TORCH_CHECK(c.sizes.size() == c.errors.size(), "field 'commutation' has ",
                c.errors.size(), " errors but ", c.sizes.size(), " sizes");
  }
  return c;
}

json to_json(const PairResult& result) {
  json j = spec_to_json(result.spec);
  j["schema"] = kRecordSchema;
  j["key"] = result.spec.key();
  json curve = json::array();
  for (const CurvePoint& c : result.curve) {
    json p = {{"step", c.step},
              {"logit_drift", num(c.logit_drift)},
              {"qk_drift_mean", num(c.qk_drift_mean)},
              {"qk_drift_max", num(c.qk_drift_max)},
              {"val_loss", pair_of(c.val_loss)},
              {"val_acc", pair_of(c.val_acc)}};
    if (acts_on_vo(result.spec.twin)) {  // measured for these twins only
      p["vo_drift_mean"] = num(c.vo_drift_mean);
      p["vo_drift_max"] = num(c.vo_drift_max);
    }
    if (c.step > 0)
      p["train_loss"] = pair_of(c.train_loss);
    curve.push_back(p);
  }
  j["curve"] = curve;
  j["qk_drift_per_head"] = numbers(result.qk_per_head);
  if (acts_on_vo(result.spec.twin))
    j["vo_drift_per_head"] = numbers(result.vo_per_head);
  j["val_acc"] = pair_of(result.val_acc);
  j["val_loss"] = pair_of(result.val_loss);
  j["train_loss"] = pair_of(result.train_loss);
  j["status"] = to_string(result.status);
  j["diverged_step"] =
      result.diverged_step > 0 ? json(result.diverged_step) : json(nullptr);
  if (result.status == PairStatus::kFailed)
    j["error"] = result.error;
  if (!result.merges.empty()) {
    json merges = json::array();
    for (const auto& m : result.merges)
      merges.push_back(to_json(m));
    j["merge"] = merges;
  }
  if (result.commutation.measured)
    j["commutation"] = commutation_to_json(result.commutation);
  j["wall_s"] = result.wall_s;
  j["group_pairs"] = result.group_pairs;
  const ThreadInfo t = thread_info();
  j["threads"] = {{"torch", t.torch_threads}, {"openblas", t.openblas_threads}};
  j["torch_version"] = result.torch_version;
  if (result.numeric_env.known())
    j["numeric_env"] = to_json(result.numeric_env);
  return j;
}

int record_schema(const json& record) {
  return record.contains("schema")
             ? static_cast<int>(integer(record["schema"], "schema"))
             : 1;
}

PairResult from_json(const json& j) {
  PairResult r;
  r.spec = spec_from_json(j);
  const json& curve = field(j, "curve");
  TORCH_CHECK(curve.is_array(), "field 'curve' is not an array");
  for (const json& p : curve)
    r.curve.push_back(curve_point(p));
  if (j.contains("qk_drift_per_head")) {
    r.qk_per_head = numbers_from(j["qk_drift_per_head"], "qk_drift_per_head");
  }
  if (j.contains("vo_drift_per_head"))
    r.vo_per_head = numbers_from(j["vo_drift_per_head"], "vo_drift_per_head");
  if (j.contains("val_acc"))
    r.val_acc = pair_from(j["val_acc"], "val_acc");
  if (j.contains("val_loss")) {
    r.val_loss = pair_from(j["val_loss"], "val_loss");
  }
  if (j.contains("train_loss")) {
    r.train_loss = pair_from(j["train_loss"], "train_loss");
  }
  r.status = parse_pair_status(text(field(j, "status"), "status"));
  if (j.contains("diverged_step") && !j["diverged_step"].is_null()) {
    r.diverged_step = integer(j["diverged_step"], "diverged_step");
  }
  if (r.status == PairStatus::kFailed)
    r.error = text(field(j, "error"), "error");
  if (j.contains("merge")) {
    TORCH_CHECK(j["merge"].is_array(), "field 'merge' is not an array");
    for (const json& m : j["merge"])
      r.merges.push_back(merge_point_from_json(m));
  }
  // Records written before the commutation check read as not measured.
  if (j.contains("commutation"))
    r.commutation = commutation_from_json(j["commutation"]);
  if (j.contains("wall_s"))
    r.wall_s = real(j["wall_s"], "wall_s");
  if (j.contains("group_pairs")) {
    r.group_pairs = static_cast<int>(integer(j["group_pairs"], "group_pairs"));
  }
  if (j.contains("torch_version")) {
    r.torch_version = text(j["torch_version"], "torch_version");
  }
  // Records written before the field read as of an unknown environment.
  if (j.contains("numeric_env"))
    r.numeric_env = numeric_env_from_json(j["numeric_env"]);
  return r;
}

json without_timing(json record) {
  record.erase("wall_s");
  record.erase("threads");
  record.erase("group_pairs");
  return record;
}

}  // namespace twins
