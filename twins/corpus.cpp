#include "twins/corpus.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <map>

#include "data/charlm.h"
#include "twins/io.h"

namespace twins {

void bind_corpus(std::vector<PairSpec>& pairs) {
  std::map<std::string, std::string> digest;  // by resolved path
  for (auto& p : pairs) {
    if (!p.is_charlm())
      continue;
    if (!p.corpus.empty())
      p.corpus = resolved_path(p.corpus);  // "./c.txt" and "c.txt": one file
    auto it = digest.find(p.corpus);
    if (it == digest.end()) {
      const std::string path =
          p.corpus.empty() ? data::default_corpus_path() : p.corpus;
      it = digest.emplace(p.corpus, data::Corpus::load(path).sha256).first;
    }
    TORCH_CHECK(p.corpus_sha256.empty() || p.corpus_sha256 == it->second,
                "corpus '", p.corpus.empty() ? "tinyshakespeare" : p.corpus,
                "' has changed since pair '", pair_label(p),
                "' was trained on it (sha256 ", p.corpus_sha256, ", now ",
                it->second, ")");
    p.corpus_sha256 = it->second;
  }
}

std::string corpus_difference(const PairSpec& recorded, const PairSpec& now) {
  if (!now.is_charlm() || recorded.corpus_sha256 == now.corpus_sha256)
    return "";
  const std::string name = now.corpus.empty() ? "tinyshakespeare" : now.corpus;
  if (recorded.corpus_sha256.empty()) {
    return fmt::format(
        "was recorded without the corpus's content hash (an older twin-run), "
        "so it cannot be told to be of the text of '{}' (sha256 {})",
        name, now.corpus_sha256);
  }
  return fmt::format(
      "was run on another text of the corpus '{}' (sha256 {} in the file, "
      "{} now)",
      name, recorded.corpus_sha256, now.corpus_sha256);
}

}  // namespace twins
