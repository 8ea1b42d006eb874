#include "twins/group_state.h"

#include <fmt/format.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "data/sha256.h"
#include "twins/environment.h"
#include "twins/io.h"
#include "twins/lockstep.h"
#include "twins/record.h"

namespace twins {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMagic = "twins-checkpoint";

// The crash tests' hook (see write_state_file): the moment and the write.
struct KillHook {
  std::string moment;  // "rename" or "written"; empty: no hook
  long write = 0;
};

KillHook kill_hook() {
  const char* value = std::getenv("TWINS_TEST_KILL");
  if (!value || !*value)
    return {};
  const std::string text = value;
  const size_t colon = text.find(':');
  KillHook hook;
  if (colon != std::string::npos) {
    hook.moment = text.substr(0, colon);
    hook.write = std::strtol(text.c_str() + colon + 1, nullptr, 10);
  }
  TORCH_CHECK(
      (hook.moment == "rename" || hook.moment == "written") && hook.write > 0,
      "Invalid TWINS_TEST_KILL: '", text,
      "' (expected rename:K or written:K, K >= 1)");
  return hook;
}

std::atomic<long> writes{0};
std::atomic<int> stop_signal{0};

[[noreturn]] void kill_self() {
  ::raise(SIGKILL);
  std::abort();  // not reached
}

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

namespace {
StateFile read_state(const std::string& path, bool whole);  // below
}  // namespace

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
    check_header(read_state(path_, /*whole=*/false).header, reference, path_);
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

std::string group_state_key(const PairSpec& reference) {
  return fmt::format("{}|sha256={}|schema={}|format={}",
                     reference.reference_key(), reference.corpus_sha256,
                     kRecordSchema, kStateFormat);
}

void write_state_file(const std::string& path, nlohmann::json header,
                      const std::string& payload) {
  const KillHook hook = kill_hook();
  const long write = ++writes;
  header["payload_bytes"] = payload.size();
  // The digest covers the header and the archive: an edited partial curve
  // or pair index is refused like a flipped bit of a tensor. Written in
  // place of the placeholder once the body is there (one copy of the
  // archive, not two).
  std::string text = fmt::format("{} {}\nsha256 {}\n", kMagic, kFileLayout,
                                 std::string(64, '0'));
  const size_t body_at = text.size();
  text += header.dump();
  text += '\n';
  text += payload;
  const std::string digest =
      data::sha256_hex(std::string_view(text).substr(body_at));
  text.replace(body_at - 65, 64, digest);
  write_text_atomically(path, text, [&] {
    if (hook.moment == "rename" && hook.write == write)
      kill_self();
  });
  if (hook.moment == "written" && hook.write == write)
    kill_self();
}

namespace {

// The first `lines` lines of `path` (a checkpoint's magic, digest and
// header lines), without reading its archive.
std::string read_lines(const std::string& path, int lines) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.good(), "Cannot read checkpoint '", path, "': ",
              std::strerror(errno));
  std::string text, line;
  for (int i = 0; i < lines && std::getline(in, line); ++i)
    text += line + (in.eof() ? "" : "\n");
  return text;
}

// A state file read and checked: whole (`whole`: its size and digest
// checked, its archive kept) or up to its header (the framing checked, the
// header parsed; what check_before_start needs before any group trains).
StateFile read_state(const std::string& path, bool whole) {
  auto damaged = [&](const std::string& why) {
    TORCH_CHECK(false, "checkpoint '", path, "' is damaged: ", why,
                " (rerun with --checkpoint-restart to start its group "
                "afresh)");
  };
  // A pipe would block the read (a SLURM task then hangs until its time
  // limit), a directory fail it with words that do not say why.
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!ec && !fs::is_regular_file(status))
    damaged(fs::is_fifo(status)        ? "it is a pipe, not a file"
            : fs::is_directory(status) ? "it is a directory, not a file"
                                       : "it is not a regular file");
  const std::string text =
      whole ? read_file(path, "checkpoint") : read_lines(path, 3);
  const std::string magic = fmt::format("{} {}\n", kMagic, kFileLayout);
  if (text.compare(0, std::strlen(kMagic), kMagic) != 0)
    damaged("not a twins checkpoint");
  if (text.compare(0, magic.size(), magic) != 0)
    damaged(fmt::format("its first line '{}' is not this twins' layout {}",
                        text.substr(0, std::min(text.find('\n'), size_t(40))),
                        kFileLayout));
  constexpr char kDigest[] = "sha256 ";
  const size_t digest_at = magic.size() + std::strlen(kDigest);
  const size_t body_at = digest_at + 64 + 1;
  if (text.size() < body_at || text[body_at - 1] != '\n' ||
      text.compare(magic.size(), std::strlen(kDigest), kDigest) != 0)
    damaged("truncated or without its digest line");
  const size_t eol = text.find('\n', body_at);
  if (eol == std::string::npos)
    damaged("truncated in its header");
  StateFile file;
  try {
    file.header =
        nlohmann::json::parse(text.substr(body_at, eol - body_at));
  } catch (const nlohmann::json::exception&) {
    damaged("its header is not JSON");
  }
  if (!whole)
    return file;
  file.payload = text.substr(eol + 1);
  const auto bytes = file.header.find("payload_bytes");
  if (bytes != file.header.end() && bytes->is_number_unsigned() &&
      bytes->get<uint64_t>() != file.payload.size())
    damaged(fmt::format("{} bytes of data where {} were written",
                        file.payload.size(), bytes->get<uint64_t>()));
  if (data::sha256_hex(std::string_view(text).substr(body_at)) !=
      text.substr(digest_at, 64))
    damaged("its header or data do not match its SHA-256");
  return file;
}

}  // namespace

StateFile read_state_file(const std::string& path) {
  return read_state(path, /*whole=*/true);
}

// ===========================================================================
// Stop requests

int stop_requested() noexcept {
  return stop_signal.load();
}

void request_stop(int signal) noexcept {
  int none = 0;
  stop_signal.compare_exchange_strong(none, signal);
}

void clear_stop() noexcept {
  stop_signal = 0;
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    default:
      return fmt::format("signal {}", signal);
  }
}

namespace {

// A stop request; a second SIGTERM or SIGINT then ends the process.
extern "C" void on_stop_signal(int signal) {
  request_stop(signal);
  if (signal != SIGUSR1)
    ::signal(signal, SIG_DFL);
}

}  // namespace

StopSignals::StopSignals(bool install) : installed_(install) {
  if (!installed_)
    return;
  clear_stop();
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;  // other threads' reads and writes go on
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < kSignals.size(); ++i)
    ::sigaction(kSignals[i], &action, &previous_[i]);
}

StopSignals::~StopSignals() {
  if (!installed_)
    return;
  for (size_t i = 0; i < kSignals.size(); ++i)
    ::sigaction(kSignals[i], &previous_[i], nullptr);
}

}  // namespace twins
