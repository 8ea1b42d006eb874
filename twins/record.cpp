#include "twins/record.h"

#include <cmath>

#include "twins/device.h"

namespace twins {

namespace {

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json pair_of(const std::array<double, 2>& v) {
  return nlohmann::json::array({num(v[0]), num(v[1])});
}

}  // namespace

nlohmann::json to_json(const PairResult& r) {
  const PairSpec& s = r.spec;
  nlohmann::json j;
  j["key"] = s.key();
  j["task"] = s.task;
  j["opt"] = s.opt;
  j["twin"] = to_string(s.twin);
  j["init_seed"] = s.init_seed;
  j["twin_seed"] = s.uses_twin_seed() ? nlohmann::json(s.twin_seed)
                                      : nlohmann::json(nullptr);
  j["noise_scale"] = s.uses_noise_scale() ? nlohmann::json(s.noise_scale)
                                          : nlohmann::json(nullptr);
  j["lr"] = s.lr;
  j["steps"] = s.steps;
  j["dtype"] = dtype_name(s.dtype);
  j["device"] = s.device;
  j["data_seed"] = s.data_seed;
  if (s.task == "charlm") {
    j["ctx"] = s.ctx;
    j["batch"] = s.batch;
    j["corpus"] = s.corpus.empty() ? "tinyshakespeare" : s.corpus;
  }
  j["model"] = {{"depth", s.depth},
                {"d_model", s.d_model},
                {"heads", s.heads},
                {"mlp", s.mlp}};
  nlohmann::json curve = nlohmann::json::array();
  for (const CurvePoint& c : r.curve) {
    nlohmann::json p = {{"step", c.step},
                        {"logit_drift", num(c.logit_drift)},
                        {"qk_drift_mean", num(c.qk_drift_mean)},
                        {"qk_drift_max", num(c.qk_drift_max)},
                        {"val_loss", pair_of(c.val_loss)},
                        {"val_acc", pair_of(c.val_acc)}};
    if (c.step > 0) p["train_loss"] = pair_of(c.train_loss);
    curve.push_back(p);
  }
  j["curve"] = curve;
  nlohmann::json heads = nlohmann::json::array();
  for (double v : r.qk_per_head) heads.push_back(num(v));
  j["qk_drift_per_head"] = heads;
  j["val_acc"] = pair_of(r.val_acc);
  j["val_loss"] = pair_of(r.val_loss);
  j["train_loss"] = pair_of(r.train_loss);
  j["status"] = r.status;
  j["diverged_step"] = r.diverged_step > 0 ? nlohmann::json(r.diverged_step)
                                           : nlohmann::json(nullptr);
  j["wall_s"] = r.wall_s;
  const ThreadInfo t = thread_info();
  j["threads"] = {{"torch", t.torch_threads},
                  {"openblas", t.openblas_threads}};
  j["torch_version"] = r.torch_version;
  return j;
}

}  // namespace twins
