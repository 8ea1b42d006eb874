#include "twins/snapshot.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "data/sha256.h"
#include "twins/io.h"
#include "twins/merge.h"
#include "twins/metrics.h"
#include "twins/record.h"
#include "twins/setup.h"
#include "twins/text.h"

namespace twins {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The spec fields of the result record (twins::spec_to_json), its key and
// schema, and the step.
json spec_json(const PairSpec& spec, int64_t step) {
  json j = spec_to_json(spec);
  j["schema"] = kRecordSchema;
  j["key"] = spec.key();
  j["torch_version"] = TORCH_VERSION;
  j["saved_step"] = step;
  return j;
}

// Writes copy `m` to `path`; returns the file's SHA-256, which spec.json
// records so that a copy is read back only beside its own spec.
std::string write_model(const std::string& path, const model::Transformer& m) {
  torch::serialize::OutputArchive archive;
  for (const auto& item : m->named_parameters()) {
    archive.write(item.key(), item.value().detach().cpu());
  }
  std::ostringstream bytes;
  archive.save_to(bytes);
  const std::string text = bytes.str();
  write_text_atomically(path, text);
  return data::sha256_hex(text);
}

// The SHA-256 spec.json records for model file `index` (0 or 1).
std::string recorded_digest(const json& spec, size_t index,
                            const std::string& path) {
  const auto digests = spec.find("model_sha256");
  TORCH_CHECK(digests != spec.end() && digests->is_array() &&
                  digests->size() == 2 && (*digests)[index].is_string(),
              "saved pair: '", path,
              "' has no 'model_sha256' (two digests: saved by an earlier "
              "twins, whose copies cannot be checked against it; save the "
              "pair again)");
  return (*digests)[index].get<std::string>();
}

// The SHA-256 of spec.json's fields but its own digest ("spec_sha256"),
// as one canonical JSON text (keys sorted): what an edit of any field, the
// key and the models' digests included, changes.
std::string spec_digest(json j) {
  j.erase("spec_sha256");
  return data::sha256_hex(j.dump());
}

PairSpec read_spec(const std::string& path, int64_t* step,
                   std::array<std::string, 2>* digests) {
  TORCH_CHECK(fs::is_regular_file(path), "saved pair: '", path,
              "' does not exist");
  const std::string text = read_file(path, "saved pair file");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    TORCH_CHECK(false, "saved pair: '", path, "' is not valid JSON (",
                first_line(e.what()), ")");
  }
  TORCH_CHECK(j.is_object(), "saved pair: '", path, "' is not a JSON object");
  PairSpec spec;
  try {
    spec = spec_from_json(j);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "saved pair: '", path,
                "': ", first_line(e.what_without_backtrace()));
  }
  TORCH_CHECK(j.contains("key") && j["key"] == spec.key(), "saved pair: '",
              path, "': its 'key' does not match its fields");
  TORCH_CHECK(j.contains("spec_sha256") && j["spec_sha256"].is_string(),
              "saved pair: '", path, "' has no 'spec_sha256' (saved by an "
              "earlier twins, whose spec cannot be checked; save the pair "
              "again)");
  TORCH_CHECK(j["spec_sha256"].get<std::string>() == spec_digest(j),
              "saved pair: '", path, "' was edited since it was saved (its "
              "fields no longer match its 'spec_sha256'): the models were "
              "trained as the saved spec says, not as the edited one");
  TORCH_CHECK(j.contains("saved_step") && j["saved_step"].is_number_integer(),
              "saved pair: '", path, "' has no integer 'saved_step'");
  *step = j["saved_step"].get<int64_t>();
  TORCH_CHECK(*step >= 0 && *step <= spec.steps, "saved pair: '", path,
              "': saved_step ", *step, " outside 0..", spec.steps);
  for (size_t i = 0; i < 2; ++i)
    (*digests)[i] = recorded_digest(j, i, path);
  return spec;
}

// The saved spec must describe the same kind of model as `want`.
void check_expected(const PairSpec& got, const PairSpec& want,
                    const std::string& path) {
  auto same = [&](const char* what, const auto& a, const auto& b) {
    TORCH_CHECK(a == b, "saved pair: '", path, "' has ", what, " ", a,
                ", expected ", b);
  };
  same("task", got.task, want.task);
  same("dtype", dtype_name(got.dtype), dtype_name(want.dtype));
  same("depth", got.depth, want.depth);
  same("d_model", got.d_model, want.d_model);
  same("heads", got.heads, want.heads);
  same("mlp", got.mlp, want.mlp);
  same("kv_heads", got.kv_head_count(), want.kv_head_count());
  same("rope", got.rope, want.rope);
  if (got.task == "charlm")
    same("ctx", got.ctx, want.ctx);
}

// Reads `path` into m's parameters: the file spec.json recorded (`digest`),
// exactly m's names, shapes and `dtype`.
void read_model(const std::string& path, model::Transformer& m,
                torch::Dtype dtype, const std::string& digest) {
  TORCH_CHECK(fs::is_regular_file(path), "saved pair: '", path,
              "' does not exist");
  const std::string bytes = read_file(path, "saved model");
  TORCH_CHECK(data::sha256_hex(bytes) == digest, "saved pair: '", path,
              "' is not the file its spec.json recorded (its SHA-256 "
              "differs: changed, damaged or copied from another pair since "
              "it was saved)");
  torch::serialize::InputArchive archive;
  std::vector<std::string> keys;
  try {
    std::istringstream in(bytes);
    archive.load_from(in);
    keys = archive.keys();
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "saved pair: '", path,
                "' is not a readable model archive (",
                first_line(e.what_without_backtrace()), ")");
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "saved pair: '", path,
                "' is not a readable model archive (", first_line(e.what()),
                ")");
  }
  auto params = m->named_parameters();
  std::set<std::string> names;
  for (const auto& item : params)
    names.insert(item.key());
  for (const std::string& k : keys) {
    TORCH_CHECK(names.count(k), "saved pair: '", path,
                "' has an unexpected tensor '", k, "'");
  }
  torch::NoGradGuard no_grad;
  for (auto& item : params) {
    torch::Tensor t;
    TORCH_CHECK(archive.try_read(item.key(), t), "saved pair: '", path,
                "' has no tensor '", item.key(), "'");
    TORCH_CHECK(t.sizes() == item.value().sizes(), "saved pair: '", path,
                "': tensor '", item.key(), "' has shape ", t.sizes(),
                ", expected ", item.value().sizes());
    TORCH_CHECK(t.scalar_type() == dtype, "saved pair: '", path, "': tensor '",
                item.key(), "' is ", t.scalar_type(), ", expected ",
                dtype_name(dtype));
    item.value().copy_(t);
  }
}

}  // namespace

std::string snapshot_name(const PairSpec& spec) {
  std::string label = spec.opt + "-" + to_string(spec.twin);
  if (spec.uses_noise_scale())
    label += "-" + format_scale(spec.noise_scale);
  label += "-init" + std::to_string(spec.init_seed);
  if (spec.uses_twin_seed())
    label += "-seed" + std::to_string(spec.twin_seed);
  for (char& c : label) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') {
      c = '_';
    }
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the key
  for (unsigned char c : spec.key())
    h = (h ^ c) * 1099511628211ull;
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(h ^ (h >> 32)));
  return label + "-" + hex;
}

void save_pair(const std::string& dir, const PairSpec& spec, int64_t step,
               const model::Transformer& m1, const model::Transformer& m2) {
  for (const auto* m : {&m1, &m2}) {
    TORCH_CHECK((*m)->tok_emb.scalar_type() == spec.dtype,
                "save_pair: a model is ", (*m)->tok_emb.scalar_type(),
                ", the spec says ", dtype_name(spec.dtype));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  TORCH_CHECK(!ec && fs::is_directory(dir), "Cannot create directory '", dir,
              "': ", ec.message());
  const fs::path d(dir);
  const std::string spec_path = (d / kSnapshotSpecFile).string();
  fs::remove(spec_path, ec);  // an older snapshot stops loading first
  TORCH_CHECK(!ec, "Cannot remove '", spec_path, "': ", ec.message());
  json j = spec_json(spec, step);
  j["model_sha256"] = {write_model((d / kSnapshotModelFiles[0]).string(), m1),
                       write_model((d / kSnapshotModelFiles[1]).string(), m2)};
  j["spec_sha256"] = spec_digest(j);
  write_text_atomically(spec_path, j.dump(2) + "\n");
}

SavedPair load_pair(const std::string& dir, const torch::Device& device,
                    const PairSpec* expected) {
  const fs::path d(dir);
  const std::string spec_path = (d / kSnapshotSpecFile).string();
  SavedPair s;
  std::array<std::string, 2> digests;
  s.spec = read_spec(spec_path, &s.step, &digests);
  if (expected != nullptr)
    check_expected(s.spec, *expected, spec_path);
  s.task = make_task(s.spec, device);
  const model::ModelConfig cfg = model_config(s.spec, s.task->shape());
  model::Transformer* models[2] = {&s.m1, &s.m2};
  for (int i = 0; i < 2; ++i) {
    *models[i] = model::build(cfg, s.spec.init_seed, s.spec.dtype, device);
    read_model((d / kSnapshotModelFiles[i]).string(), *models[i], s.spec.dtype,
               digests[i]);
  }
  return s;
}

std::vector<std::string> find_saved_pairs(const std::string& dir) {
  if (fs::exists(fs::path(dir) / kSnapshotSpecFile))
    return {dir};
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_directory() && fs::exists(it->path() / kSnapshotSpecFile))
      out.push_back(it->path().string());
  }
  TORCH_CHECK(!ec, "Cannot read directory '", dir, "': ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

PairSpec saved_spec(const SavedPair& pair) {
  PairSpec spec = pair.spec;
  spec.merge_at = {pair.step};
  return spec;
}

PairResult measure_saved(SavedPair& pair) {
  PairResult r;
  r.spec = saved_spec(pair);
  r.torch_version = TORCH_VERSION;
  r.numeric_env = numeric_env(r.spec.device);
  // Train losses are unknown (NaN): the copies were saved, not trained here.
  const Evaluation e1 = evaluate(pair.m1, *pair.task);
  const Evaluation e2 = evaluate(pair.m2, *pair.task);
  const bool vo = acts_on_vo(r.spec.twin);
  CurvePoint c = compare(e1, pair.m1, e2, pair.m2, pair.step, vo);
  c.train_loss = {std::nan(""), std::nan("")};
  r.curve.push_back(c);
  r.qk_per_head = qk_drift_per_head(pair.m1, pair.m2);
  if (vo)
    r.vo_per_head = vo_drift_per_head(pair.m1, pair.m2);
  r.val_acc = c.val_acc;
  r.val_loss = c.val_loss;
  r.train_loss = c.train_loss;
  r.merges.push_back(measure_merge(pair.m1, pair.m2, *pair.task, pair.step,
                                   twin_gauge(pair.spec)));
  return r;
}

}  // namespace twins
