// Which text a char-LM pair trains on, by content: the corpus's SHA-256
// enters the pair's key (PairSpec::corpus_sha256), so that a record names
// the very text it was measured on and a changed file is never taken for
// the one recorded (docs/output-format.md).
#pragma once

#include <string>
#include <vector>

#include "twins/spec.h"

namespace twins {

// For every char-LM pair of `pairs`: its corpus path made absolute and
// resolved (empty, the shipped corpus, stays empty), the file read, checked
// (data::Corpus::load) and its SHA-256 set. A pair that already names a
// digest (a saved pair) must match the file's: throws naming the corpus
// and both digests otherwise. Reads each distinct file once.
void bind_corpus(std::vector<PairSpec>& pairs);

// Why records of char-LM pairs `recorded` and `now` are of different text,
// in words; empty when their corpora agree.
std::string corpus_difference(const PairSpec& recorded, const PairSpec& now);

}  // namespace twins
