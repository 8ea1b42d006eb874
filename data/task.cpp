#include "data/task.h"

#include <cctype>

#include "data/charlm.h"
#include "data/modular.h"

namespace data {

namespace {

// p^2 examples are materialised; beyond this the split alone is gigabytes.
constexpr int64_t kMaxModulus = 4096;

// "mod<p>" -> p, or -1 when `name` is not of that form.
int64_t parse_modulus(const std::string& name) {
  if (name.size() < 4 || name.compare(0, 3, "mod") != 0)
    return -1;
  if (name.size() > 12 || name[3] == '0')
    return -1;  // keeps p^2 far from overflow; "mod047" is not a name of 47
  int64_t p = 0;
  for (size_t i = 3; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i])))
      return -1;
    p = p * 10 + (name[i] - '0');
  }
  return p <= kMaxModulus ? p : -1;
}

}  // namespace

std::string task_family(const std::string& name) {
  if (name == "charlm")
    return "charlm";
  TORCH_CHECK(parse_modulus(name) >= 2, "Unknown task: '", name,
              "' (expected charlm or mod<p> with 2 <= p <= ", kMaxModulus,
              " written without leading zeros, e.g. mod47)");
  return "mod";
}

const TaskDefaults& task_defaults(const std::string& name) {
  static const TaskDefaults kMod{2, 64, 4, 1500, 128, 32};
  static const TaskDefaults kCharlm{6, 256, 8, 3000, 128, 32};
  return task_family(name) == "mod" ? kMod : kCharlm;
}

std::unique_ptr<Task> make_task(const TaskOptions& options) {
  if (task_family(options.name) == "charlm") {  // throws for an unknown name
    const Corpus corpus = Corpus::load(
        options.corpus.empty() ? default_corpus_path() : options.corpus);
    return std::make_unique<CharLM>(corpus, options.ctx, options.batch,
                                    options.steps, options.data_seed,
                                    options.device);
  }
  const int64_t p = parse_modulus(options.name);
  return std::make_unique<ModularAddition>(p, options.data_seed,
                                           options.device);
}

}  // namespace data
