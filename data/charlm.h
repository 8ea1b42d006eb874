// Character language model on a text corpus (docs/protocol.md §4): vocabulary =
// the sorted distinct characters (Unicode code points of UTF-8 text); the first
// 90% trains, the last 10% validates. One CPU generator seeded with the data
// seed draws, in this order, the start offsets of every training batch of
// every step (steps x batch, uniform in [0, len(train) - ctx - 1)) and then
// 64 validation windows (uniform in [0, len(val) - ctx - 1)). Both twins of
// a pair read the same batch of step t.
#pragma once

#include <string>
#include <vector>

#include "data/task.h"

namespace data {

// A text file as code points. Throws a one-line message naming the file
// when it is missing, unreadable, empty or not UTF-8.
struct Corpus {
  std::string path;
  std::vector<int32_t> codepoints;  // the text
  std::vector<int32_t> vocab;       // sorted distinct code points
  std::string sha256;               // of the file's bytes, as sha256sum

  // A pipe is read to its end: a named pipe (mkfifo) waiting at most
  // `pipe_wait_seconds` for each of its writes (one nobody writes to is an
  // error, not a hang), an anonymous one (`<(zcat corpus.gz)`) as long as
  // its writer takes; and at most physical memory / kCorpusBytesPerByte
  // bytes of it (a writer that never ends, `yes |`, is refused before it
  // takes the machine's memory).
  static Corpus load(const std::string& path,
                     int pipe_wait_seconds = kPipeWaitSeconds);
  static constexpr int kPipeWaitSeconds = 60;
};

// Bytes of memory a loaded corpus takes per byte of its file: the text,
// its code points and their tensor (measured: 50 MB of text, 1.57 GB).
constexpr double kCorpusBytesPerByte = 32;

// The shipped tinyshakespeare.txt: $TWINS_DATA_DIR, then data/ next to or
// above the executable, then the source tree's data/. Throws when none has
// it.
std::string default_corpus_path();

constexpr int64_t kValidationWindows = 64;

class CharLM : public Task {
 public:
  CharLM(const Corpus& corpus, int64_t ctx, int64_t batch, int64_t steps,
         uint64_t data_seed, const torch::Device& device);

  std::string name() const override { return "charlm"; }
  TaskShape shape() const override;
  Batch train_batch(int64_t step) const override;
  const Batch& validation() const override { return val_; }

  int64_t vocab_size() const { return vocab_size_; }
  // (steps, batch) int64 start offsets into the training split, on CPU.
  const torch::Tensor& train_offsets() const { return offsets_cpu_; }

 private:
  int64_t ctx_, batch_, steps_, vocab_size_;
  torch::Tensor train_tokens_;  // (n_train) int64 on the device
  torch::Tensor offsets_;       // (steps, batch) on the device
  torch::Tensor offsets_cpu_;
  torch::Tensor window_;  // arange(ctx + 1) on the device
  Batch val_;             // (64, ctx) inputs and next-char targets
};

}  // namespace data
