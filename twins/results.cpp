#include "twins/results.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace twins {

namespace {

using nlohmann::json;

const json& field(const json& j, const char* name) {
  TORCH_CHECK(j.is_object(), "record is not a JSON object");
  auto it = j.find(name);
  TORCH_CHECK(it != j.end(), "record has no '", name, "' field");
  return *it;
}

// A number, or NaN for null (how non-finite values are written).
double real(const json& v, const char* name) {
  if (v.is_null()) {
    return std::nan("");
  }
  TORCH_CHECK(v.is_number(), "field '", name, "' is not a number");
  return v.get<double>();
}

int64_t integer(const json& v, const char* name) {
  TORCH_CHECK(v.is_number_integer(), "field '", name, "' is not an integer");
  return v.get<int64_t>();
}

uint64_t seed(const json& v, const char* name) {
  TORCH_CHECK(v.is_number_unsigned() ||
                  (v.is_number_integer() && v.get<int64_t>() >= 0),
              "field '", name, "' is not a seed");
  return v.get<uint64_t>();
}

std::string text(const json& v, const char* name) {
  TORCH_CHECK(v.is_string(), "field '", name, "' is not a string");
  return v.get<std::string>();
}

std::array<double, 2> pair_of(const json& v, const char* name) {
  TORCH_CHECK(v.is_array() && v.size() == 2, "field '", name,
              "' is not a pair of numbers");
  return {real(v[0], name), real(v[1], name)};
}

CurvePoint curve_point(const json& p) {
  CurvePoint c;
  c.step = integer(field(p, "step"), "curve.step");
  c.logit_drift = real(field(p, "logit_drift"), "curve.logit_drift");
  c.qk_drift_mean = real(field(p, "qk_drift_mean"), "curve.qk_drift_mean");
  c.qk_drift_max = real(field(p, "qk_drift_max"), "curve.qk_drift_max");
  c.val_loss = pair_of(field(p, "val_loss"), "curve.val_loss");
  c.val_acc = pair_of(field(p, "val_acc"), "curve.val_acc");
  c.train_loss = p.contains("train_loss")
                     ? pair_of(p["train_loss"], "curve.train_loss")
                     : std::array<double, 2>{std::nan(""), std::nan("")};
  return c;
}

}  // namespace

PairResult from_json(const json& j) {
  PairResult r;
  PairSpec& s = r.spec;
  s.task = text(field(j, "task"), "task");
  s.opt = text(field(j, "opt"), "opt");
  s.twin = parse_twin_kind(text(field(j, "twin"), "twin"));
  s.init_seed = seed(field(j, "init_seed"), "init_seed");
  const json& ts = field(j, "twin_seed");
  s.twin_seed = ts.is_null() ? 0 : seed(ts, "twin_seed");
  const json& ns = field(j, "noise_scale");
  s.noise_scale = ns.is_null() ? 0 : real(ns, "noise_scale");
  s.lr = real(field(j, "lr"), "lr");
  s.steps = integer(field(j, "steps"), "steps");
  s.dtype = parse_dtype(text(field(j, "dtype"), "dtype"));
  s.device = text(field(j, "device"), "device");
  s.data_seed = seed(field(j, "data_seed"), "data_seed");
  const json& m = field(j, "model");
  s.depth = integer(field(m, "depth"), "model.depth");
  s.d_model = integer(field(m, "d_model"), "model.d_model");
  s.heads = integer(field(m, "heads"), "model.heads");
  s.mlp = integer(field(m, "mlp"), "model.mlp");
  if (j.contains("ctx")) {
    s.ctx = integer(j["ctx"], "ctx");
  }
  if (j.contains("batch")) {
    s.batch = integer(j["batch"], "batch");
  }
  if (j.contains("corpus")) {
    s.corpus = text(j["corpus"], "corpus");
    if (s.corpus == "tinyshakespeare")
      s.corpus.clear();  // the shipped one
  }
  const json& curve = field(j, "curve");
  TORCH_CHECK(curve.is_array(), "field 'curve' is not an array");
  for (const json& p : curve) {
    r.curve.push_back(curve_point(p));
  }
  if (j.contains("qk_drift_per_head")) {
    TORCH_CHECK(j["qk_drift_per_head"].is_array(),
                "field 'qk_drift_per_head' is not an array");
    for (const json& v : j["qk_drift_per_head"]) {
      r.qk_per_head.push_back(real(v, "qk_drift_per_head"));
    }
  }
  if (j.contains("val_acc")) {
    r.val_acc = pair_of(j["val_acc"], "val_acc");
  }
  if (j.contains("val_loss")) {
    r.val_loss = pair_of(j["val_loss"], "val_loss");
  }
  if (j.contains("train_loss")) {
    r.train_loss = pair_of(j["train_loss"], "train_loss");
  }
  r.status = text(field(j, "status"), "status");
  if (j.contains("diverged_step") && !j["diverged_step"].is_null()) {
    r.diverged_step = integer(j["diverged_step"], "diverged_step");
  }
  if (j.contains("wall_s")) {
    r.wall_s = real(j["wall_s"], "wall_s");
  }
  if (j.contains("torch_version")) {
    r.torch_version = text(j["torch_version"], "torch_version");
  }
  return r;
}

ResultsFile read_results(const std::string& path, bool missing_ok) {
  ResultsFile out;
  out.path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    TORCH_CHECK(errno == ENOENT, "Cannot read results file '", path,
                "': ", std::strerror(errno));
    TORCH_CHECK(missing_ok, "results file '", path, "' does not exist");
    return out;
  }
  TORCH_CHECK(S_ISREG(st.st_mode), "results file '", path,
              "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, "Cannot read results file '", path,
              "': ", std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  TORCH_CHECK(!in.bad(), "Cannot read results file '", path, "'");
  const std::string content = buffer.str();

  size_t start = 0;
  int64_t line_no = 0;
  while (start < content.size()) {
    ++line_no;
    const size_t end = content.find('\n', start);
    const bool whole = end != std::string::npos;
    const std::string line =
        content.substr(start, (whole ? end : content.size()) - start);
    if (!whole) {
      // The sink writes '\n' with the record in one write(2): a line
      // without it is what a crash mid-write leaves.
      out.truncated_tail = true;
      break;
    }
    out.whole_bytes = end + 1;
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      continue;
    }
    StoredRecord rec;
    rec.line = line_no;
    try {
      rec.json = json::parse(line);
      rec.key = text(field(rec.json, "key"), "key");
      rec.result = from_json(rec.json);
    } catch (const json::exception& e) {
      TORCH_CHECK(false, "results file '", path, "', line ", line_no,
                  ": not a JSON record (", e.what(), ")");
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "results file '", path, "', line ", line_no,
                  ": not a twin-run record (", e.what_without_backtrace(), ")");
    }
    out.records.push_back(std::move(rec));
  }
  return out;
}

void drop_truncated_tail(const ResultsFile& file) {
  if (!file.truncated_tail) {
    return;
  }
  TORCH_CHECK(
      ::truncate(file.path.c_str(), static_cast<off_t>(file.whole_bytes)) == 0,
      "Cannot repair results file '", file.path, "': ", std::strerror(errno));
}

std::vector<StoredRecord> merge_records(const std::vector<ResultsFile>& files,
                                        int* duplicates) {
  std::vector<StoredRecord> out;
  std::set<std::string> seen;
  int dups = 0;
  for (const auto& f : files) {
    for (const auto& r : f.records) {
      if (seen.insert(r.key).second) {
        out.push_back(r);
      } else {
        ++dups;
      }
    }
  }
  if (duplicates) {
    *duplicates = dups;
  }
  return out;
}

nlohmann::json without_timing(nlohmann::json record) {
  record.erase("wall_s");
  record.erase("threads");
  return record;
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TORCH_CHECK(out, "Cannot write '", tmp, "': ", std::strerror(errno));
    out << text;
    out.flush();
    TORCH_CHECK(out, "Cannot write '", tmp, "': ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    TORCH_CHECK(false, "Cannot write '", path, "': ", std::strerror(err));
  }
}

}  // namespace twins
