#include "twins/checkpoint.h"

#include <fmt/format.h>
#include <torch/version.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "data/sha256.h"
#include "twins/environment.h"
#include "twins/io.h"
#include "twins/lockstep.h"
#include "twins/record.h"

namespace twins {

namespace fs = std::filesystem;

namespace {

// How notes and stop messages name a group: "adam (init 42)".
std::string group_label(const Lockstep& group) {
  const PairSpec& spec = group.spec(0);
  return fmt::format("{} (init {})", spec.opt, spec.init_seed);
}

// One copy's training state: its weights (by position: the build fixes the
// order), its optimizer's state and its losses.
void save_copy(TrainingCopy& copy, torch::serialize::OutputArchive& archive) {
  copy.flush();
  torch::serialize::OutputArchive weights, state;
  for (size_t i = 0; i < copy.parameters.size(); ++i)
    weights.write(fmt::format("p{}", i), copy.parameters[i].detach());
  copy.optimizer->save(state);
  archive.write("weights", weights);
  archive.write("optimizer", state);
  archive.write("losses", torch::tensor(copy.losses, torch::kDouble));
  archive.write("checked", torch::tensor(static_cast<int64_t>(copy.checked)));
}

// save_copy's state back into `copy` at `step`; throws naming what does not
// fit (another model shape or optimizer state).
void load_copy(TrainingCopy& copy, torch::serialize::InputArchive& archive,
               int64_t step) {
  torch::serialize::InputArchive weights, state;
  archive.read("weights", weights);
  archive.read("optimizer", state);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < copy.parameters.size(); ++i) {
    torch::Tensor& own = copy.parameters[i];
    torch::Tensor saved;
    weights.read(fmt::format("p{}", i), saved);
    TORCH_CHECK(saved.sizes() == own.sizes() &&
                    saved.scalar_type() == own.scalar_type(),
                "parameter ", i, " is ", saved.sizes(), " ",
                saved.scalar_type(), " in the checkpoint, ", own.sizes(), " ",
                own.scalar_type(), " here");
    own.copy_(saved);
  }
  copy.optimizer->load(state);
  torch::Tensor losses, checked;
  archive.read("losses", losses);
  archive.read("checked", checked);
  losses = losses.to(torch::kDouble).contiguous();
  TORCH_CHECK(losses.numel() == step, "the checkpoint holds ", losses.numel(),
              " losses for step ", step);
  copy.losses.assign(losses.data_ptr<double>(),
                     losses.data_ptr<double>() + losses.numel());
  copy.checked = static_cast<size_t>(checked.item<int64_t>());
  copy.pending.clear();
}

// The reference and every live twin (twin i under "twin<i>").
std::string save_models(Lockstep& group) {
  torch::serialize::OutputArchive archive, reference;
  save_copy(group.reference_copy(), reference);
  archive.write("reference", reference);
  for (size_t i = 0; i < group.twins(); ++i) {
    if (!group.live(i))
      continue;
    torch::serialize::OutputArchive twin;
    save_copy(group.twin_copy(i), twin);
    archive.write(fmt::format("twin{}", i), twin);
  }
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

// save_models' archive back into a fresh group at `step`: twin i of `group`
// from the archive's twin source[i].
void load_models(Lockstep& group, const std::string& payload,
                 const std::vector<size_t>& source, int64_t step) {
  torch::serialize::InputArchive archive, reference;
  archive.load_from(payload.data(), payload.size());
  group.restored_at(step);
  archive.read("reference", reference);
  load_copy(group.reference_copy(), reference, step);
  for (size_t i = 0; i < group.twins(); ++i) {
    torch::serialize::InputArchive twin;
    archive.read(fmt::format("twin{}", source.at(i)), twin);
    load_copy(group.twin_copy(i), twin, step);
  }
}

// The header's pairs and partial records: every live twin's key, curve and
// merges, in the group's order.
void write_partials(const Lockstep& group,
                    const std::vector<PairResult>& results,
                    nlohmann::json& header) {
  nlohmann::json keys = nlohmann::json::array();
  nlohmann::json partial = nlohmann::json::array();
  for (size_t i = 0; i < group.twins(); ++i) {
    if (!group.live(i))
      continue;
    keys.push_back(group.spec(i).key());
    const nlohmann::json record = to_json(results[i]);
    nlohmann::json saved = {
        {"curve", record.at("curve")},
        {"merges", record.value("merge", nlohmann::json::array())},
        {"twin", i}};
    if (record.contains("commutation"))
      saved["commutation"] = record["commutation"];
    partial.push_back(saved);
  }
  header["pairs"] = keys;
  header["partial"] = partial;
}

// write_partials' curves and merges back into `results`; returns, per twin
// of `group`, the position of its models in the file. Throws for a pair
// the file does not hold.
std::vector<size_t> read_partials(const nlohmann::json& header,
                                  const Lockstep& group,
                                  std::vector<PairResult>& results,
                                  const std::string& path) {
  const auto& keys = header.at("pairs");
  const auto& partial = header.at("partial");
  std::vector<size_t> source;
  for (size_t i = 0; i < group.twins(); ++i) {
    const std::string key = group.spec(i).key();
    auto it = std::find(keys.begin(), keys.end(), key);
    TORCH_CHECK(it != keys.end(), "checkpoint '", path,
                "' does not hold pair '", pair_label(group.spec(i)),
                "' of this group; rerun with --checkpoint-restart to start "
                "the group afresh");
    const auto& saved = partial.at(static_cast<size_t>(it - keys.begin()));
    source.push_back(saved.at("twin").get<size_t>());
    nlohmann::json record = to_json(results[i]);
    record["curve"] = saved.at("curve");
    if (!saved.at("merges").empty())
      record["merge"] = saved.at("merges");
    const PairResult back = from_json(record);
    results[i].curve = back.curve;
    results[i].merges = back.merges;
    // A checkpoint written before the check: not measured for this pair.
    results[i].commutation = saved.contains("commutation")
                                 ? commutation_from_json(saved["commutation"])
                                 : Commutation{};
  }
  return source;
}

// The checks of a header against the group that reads it: the same
// configuration, written under the same numeric environment.
void check_header(const nlohmann::json& header, const PairSpec& reference,
                  const std::string& path) {
  const std::string want = group_state_key(reference);
  const std::string have = header.value("group", std::string());
  TORCH_CHECK(have == want, "checkpoint '", path,
              "' was written for another configuration ('", have,
              "'; this run: '", want,
              "'); rerun with --checkpoint-restart to start the group "
              "afresh");
  // Steps from another kind of machine would make the pair's bits a mix
  // of two environments (docs/output-format.md, "What is reproducible
  // across machines").
  const std::string env =
      environment_difference(numeric_env_from_json(header.value(
                                 "numeric_env", nlohmann::json::object())),
                             numeric_env(reference.device));
  TORCH_CHECK(env.empty(), "checkpoint '", path,
              "' was written under another numeric environment (", env,
              ": checkpoint vs this process); resume it on the same kind "
              "of node, or with the --portable-kernels it was written "
              "with, or rerun with --checkpoint-restart");
}

}  // namespace

// ===========================================================================
// Where checkpoints live

std::string checkpoint_folder(const std::string& results_path) {
  return results_path + ".ckpt";
}

std::vector<std::string> checkpoint_paths(
    const std::string& results_path,
    const std::vector<std::vector<PairSpec>>& groups) {
  std::map<std::string, int> groups_of_reference;
  for (const auto& group : groups)
    ++groups_of_reference[group_state_key(group.front())];
  std::vector<std::string> paths;
  for (const auto& group : groups) {
    std::string id = group_state_key(group.front());
    if (groups_of_reference[id] > 1)
      id += "|" + group.front().key();
    paths.push_back((fs::path(checkpoint_folder(results_path)) /
                     (data::sha256_hex(id).substr(0, 16) + ".ckpt"))
                        .string());
  }
  return paths;
}

void remove_empty_checkpoint_folder(const std::string& results_path) {
  const std::string folder = checkpoint_folder(results_path);
  std::error_code ec;
  if (fs::is_empty(folder, ec))
    fs::remove(folder, ec);
}

// ===========================================================================
// GroupCheckpoint

GroupCheckpoint::GroupCheckpoint(std::string path, StatePolicy policy,
                                 CheckpointNote note)
    : path_(std::move(path)), policy_(policy), note_(std::move(note)) {}

void GroupCheckpoint::say(const std::string& line) const {
  if (note_)
    note_(line);
}

// A write killed before its rename leaves "<file>.tmp<pid>" beside the
// file. A group's file has one writer at a time (the engine holds the
// results file's lock), so any such file is a dead process's.
void GroupCheckpoint::remove_unfinished_writes() const {
  const fs::path file(path_);
  const std::string prefix = file.filename().string() + ".tmp";
  std::error_code ec;
  if (!fs::is_directory(file.parent_path(), ec))
    return;
  for (const auto& entry : fs::directory_iterator(file.parent_path(), ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0)
      fs::remove(entry.path(), ec);
  }
}

void GroupCheckpoint::check_before_start(const PairSpec& reference) const {
  if (!enabled())
    return;
  std::error_code ec;
  const bool present =
      fs::symlink_status(path_, ec).type() != fs::file_type::not_found;
  if (present && policy_.restart) {
    // resume() removes a file it cannot use; its folder must take the next.
    check_output_directory(fs::path(path_).parent_path().string(),
                           "checkpoint folder");
    return;
  }
  check_output_file(path_, "checkpoint");
  // The header only: the archive is read and its digest checked once, when
  // the group resumes.
  if (present)
    check_header(read_state_header(path_).header, reference, path_);
}

std::optional<GroupProgress> GroupCheckpoint::resume(
    Lockstep& group, std::vector<PairResult>& results,
    const std::vector<int64_t>& measurement_steps) {
  if (!enabled())
    return std::nullopt;
  remove_unfinished_writes();
  std::error_code ec;
  if (!fs::exists(path_, ec))
    return std::nullopt;
  GroupProgress progress;
  try {
    const StateFile file = read_state_file(path_);
    progress =
        load(file.header, file.payload, group, results, measurement_steps);
  } catch (const std::exception& e) {
    if (!policy_.restart)
      throw;
    fs::remove(path_, ec);
    const std::string why = e.what();
    say(fmt::format(
        "{} (removed: --checkpoint-restart; group '{}' starts at step 0)",
        why.substr(0, why.find('\n')), group_label(group)));
    throw StartAfresh{};
  }
  say(fmt::format("group '{}': resumed at step {} from {}", group_label(group),
                  group.done(), path_));
  return progress;
}

GroupProgress GroupCheckpoint::load(
    const nlohmann::json& header, const std::string& payload, Lockstep& group,
    std::vector<PairResult>& results,
    const std::vector<int64_t>& measurement_steps) {
  try {
    return load_checked(header, payload, group, results, measurement_steps);
  } catch (const nlohmann::json::exception& e) {
    // A header that passed its digest yet lacks a field or holds another
    // type: written by another twins, or by hand.
    TORCH_CHECK(false, "checkpoint '", path_,
                "' is damaged: its header does not have the fields this "
                "twins writes (",
                e.what(), "; rerun with --checkpoint-restart to start its "
                "group afresh)");
  }
}

GroupProgress GroupCheckpoint::load_checked(
    const nlohmann::json& header, const std::string& payload, Lockstep& group,
    std::vector<PairResult>& results,
    const std::vector<int64_t>& measurement_steps) {
  check_header(header, group.spec(0), path_);
  const std::vector<size_t> source =
      read_partials(header, group, results, path_);
  const int64_t step = header.at("step").get<int64_t>();
  try {
    load_models(group, payload, source, step);
  } catch (const c10::Error& e) {
    const std::string why = e.what_without_backtrace();
    TORCH_CHECK(false, "checkpoint '", path_,
                "' does not fit this group: ", why.substr(0, why.find('\n')),
                " (rerun with --checkpoint-restart to start it afresh)");
  }
  GroupProgress progress;
  progress.next_measurement = header.at("next_checkpoint").get<size_t>();
  const size_t next = progress.next_measurement;
  TORCH_CHECK(next < measurement_steps.size() &&
                  measurement_steps[next] > step &&
                  (next == 0 || measurement_steps[next - 1] <= step),
              "checkpoint '", path_, "' is damaged: step ", step,
              " with next measurement ", next);
  progress.elapsed_s = header.value("elapsed_s", 0.0);
  saved_step_ = step;
  return progress;
}

void GroupCheckpoint::count_from(int64_t step) {
  period_step_ = step;
  period_start_ = Clock::now();
}

void GroupCheckpoint::between_steps(Lockstep& group,
                                    const std::vector<PairResult>& results,
                                    const GroupProgress& progress) {
  const int64_t step = group.done();
  if (const int signal = stop_requested()) {
    if (step > 0 && step > saved_step_)
      save(group, results, progress);
    throw Stopped(
        signal,
        saved_step_ < 0
            ? fmt::format("{}: group '{}' stopped before its first step; "
                          "nothing to save",
                          signal_name(signal), group_label(group))
            : fmt::format("{}: group '{}' stopped at step {} of {}; its "
                          "state is in {}",
                          signal_name(signal), group_label(group), step,
                          group.spec(0).last_step(), path_));
  }
  const bool by_steps =
      policy_.every_steps > 0 && step - period_step_ >= policy_.every_steps;
  const bool by_time =
      policy_.every_seconds > 0 &&
      std::chrono::duration<double>(Clock::now() - period_start_).count() >=
          policy_.every_seconds;
  if ((by_steps || by_time) && step > saved_step_)
    save(group, results, progress);
}

void GroupCheckpoint::save(Lockstep& group,
                           const std::vector<PairResult>& results,
                           const GroupProgress& progress) {
  const auto start = Clock::now();
  const std::string payload = save_models(group);
  nlohmann::json header;
  header["group"] = group_state_key(group.spec(0));
  header["step"] = group.done();
  header["next_checkpoint"] = progress.next_measurement;
  header["elapsed_s"] = progress.elapsed_s;
  header["torch_version"] = TORCH_VERSION;
  header["numeric_env"] = to_json(numeric_env(group.spec(0).device));
  write_partials(group, results, header);
  write_state_file(path_, header, payload);
  saved_step_ = group.done();
  count_from(saved_step_);
  say(fmt::format(
      "group '{}': checkpoint at step {} ({:.1f} MB in {:.2f} s): {}",
      group_label(group), saved_step_, payload.size() / 1e6,
      std::chrono::duration<double>(period_start_ - start).count(), path_));
}

void GroupCheckpoint::discard() const {
  if (!enabled())
    return;
  std::error_code ec;
  fs::remove(path_, ec);
}

// ===========================================================================
// The file

}  // namespace twins
