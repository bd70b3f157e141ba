// Byte-level text for language models: the vocabulary is the 256 byte values, so any file is a
// token stream (UTF-8 text becomes one to four tokens per character) and nothing needs a tokenizer.
//
//   TextCorpus c = load_text_corpus(kDefaultTextCorpus, {.context = 64});
//   auto train = std::make_shared<TextWindowDataset>(c.train, 64);               // every window
//   auto val = std::make_shared<TextWindowDataset>(c.validation, 64, {.stride = 64});  // non-overlapping
//   DataLoader loader(train, std::make_shared<DistributedSampler>(train->size(), world, rank,
//                                                                 DistributedSamplerOptions{.seed = s}),
//                     {.batch_size = 32});
//   // batch.input, batch.target: (32, 64) int64; target = input shifted left by one byte
//
// Note [Text windows]: example i is the window of context + 1 bytes starting at byte i·stride:
// its first context bytes are the input, its last context bytes the target (the next byte at every
// position). With stride 1 every position starts a window, so a shuffling sampler (RandomSampler,
// DistributedSampler) makes each epoch a seeded random draw of windows (without replacement within
// the epoch): the same under any num_workers (Note [Batch order]) and sharded across ranks like any
// other dataset, with no random state in the dataset itself. Validation uses stride = context, so
// its windows do not overlap and each byte after the first is predicted exactly once.
//
// Not here: tokenizers (BPE), streaming corpora larger than memory, document boundaries.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace mt::data {

// Debian's `fortunes` package (scripts/install-deps.sh installs it): about 2.5 MB of English
// quotations, jokes and definitions in a few dozen text files.
inline constexpr const char* kDefaultTextCorpus = "/usr/share/games/fortunes";

using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

// The bytes of `path`: a file, or a directory's regular files (not symlinks, not fortune's *.dat
// index files, not subdirectories) concatenated in name order. A missing path, an unreadable file
// or a directory without text files is an error naming the path.
std::vector<uint8_t> read_text_bytes(const std::string& path);

struct TextCorpusOptions {
  int64_t context = 64;  // the model's context: windows are context + 1 bytes
};

// The first 90 % of the bytes for training, the last 10 % for validation. The validation part is
// at least one window (context + 1 bytes), taken from the end; a text shorter than two windows is
// an error naming the path, its length and the window size.
struct TextCorpus {
  Bytes train, validation;
};
TextCorpus load_text_corpus(const std::string& path, TextCorpusOptions options = {});
TextCorpus split_text(std::vector<uint8_t> bytes, TextCorpusOptions options, const std::string& origin = "text");

struct TextWindowOptions {
  int64_t stride = 1;  // bytes between window starts (Note [Text windows])
};

// The windows of a byte stream (Note [Text windows]). Example i: input (context), target (context),
// both int64 byte values: input[t] = bytes[i·stride + t], target[t] = bytes[i·stride + t + 1].
class TextWindowDataset final : public Dataset {
 public:
  TextWindowDataset(Bytes bytes, int64_t context, TextWindowOptions options = {});

  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  // One pass over the windows' bytes into two (B, context) int64 tensors.
  Batch get_batch(std::span<const int64_t> indices) const override;

  int64_t context() const { return context_; }
  const std::vector<uint8_t>& bytes() const { return *bytes_; }

 private:
  Bytes bytes_;
  int64_t context_, stride_, size_;
};

}  // namespace mt::data
