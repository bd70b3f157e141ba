// Byte-level text: reading a file or a directory of files, the 90/10 split, and the windows.
#include "data/text.h"

#include <algorithm>
#include <filesystem>

#include "data/detail/file_io.h"

namespace mt::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kInstallHint = "install Debian's fortunes package (scripts/install-deps.sh does)";

// A directory's text files: regular files (symlink_status: fortune's *.u8 links are skipped, they
// point at files already listed) other than the *.dat indexes strfile(1) writes, in name order.
std::vector<fs::path> text_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (fs::is_regular_file(e.symlink_status()) && e.path().extension() != ".dat") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::vector<uint8_t> read_text_bytes(const std::string& path) {
  MT_CHECK(fs::exists(path), "text corpus ", path, " does not exist",
           path == kDefaultTextCorpus ? std::string("; ") + kInstallHint : std::string("; give a text file"));
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    files = text_files(path);
    MT_CHECK(!files.empty(), "text corpus ", path, " is a directory without text files");
  } else {
    files.push_back(path);
  }
  std::vector<uint8_t> bytes;
  for (const fs::path& f : files) {
    const std::string content = read_file(f.string());
    bytes.insert(bytes.end(), content.begin(), content.end());
  }
  return bytes;
}

TextCorpus split_text(std::vector<uint8_t> bytes, TextCorpusOptions options, const std::string& origin) {
  MT_CHECK(options.context > 0, origin, ": context must be positive, got ", options.context);
  const auto n = static_cast<int64_t>(bytes.size());
  const int64_t window = options.context + 1;
  MT_CHECK(n >= 2 * window, origin, ": ", n, " bytes is shorter than two windows of context + 1 = ", window,
           " bytes (one to train on, one to validate on); give a longer text or a smaller context");
  // Validation: the last 10 % (rounded up), but at least one window; n >= 2·window leaves training
  // at least one window too.
  const int64_t n_val = std::max((n + 9) / 10, window);
  const auto cut = bytes.begin() + (n - n_val);
  auto validation = std::make_shared<const std::vector<uint8_t>>(cut, bytes.end());
  bytes.resize(n - n_val);
  return {std::make_shared<const std::vector<uint8_t>>(std::move(bytes)), std::move(validation)};
}

TextCorpus load_text_corpus(const std::string& path, TextCorpusOptions options) {
  return split_text(read_text_bytes(path), options, path);
}

TextWindowDataset::TextWindowDataset(Bytes bytes, int64_t context, TextWindowOptions options)
    : bytes_(std::move(bytes)), context_(context), stride_(options.stride) {
  MT_CHECK(bytes_ != nullptr, "TextWindowDataset: no bytes");
  MT_CHECK(context_ > 0 && stride_ > 0, "TextWindowDataset: context (", context_, ") and stride (", stride_,
           ") must be positive");
  const auto n = static_cast<int64_t>(bytes_->size());
  MT_CHECK(n >= context_ + 1, "TextWindowDataset: ", n, " bytes hold no window of context + 1 = ", context_ + 1,
           " bytes");
  size_ = (n - context_ - 1) / stride_ + 1;  // starts 0, stride, ... with start + context + 1 <= n
}

Example TextWindowDataset::get(int64_t index) const {
  const int64_t i = index;
  const Batch b = get_batch(std::span<const int64_t>(&i, 1));
  return {b.input.view({context_}), b.target.view({context_})};
}

Batch TextWindowDataset::get_batch(std::span<const int64_t> indices) const {
  const auto count = static_cast<int64_t>(indices.size());
  std::vector<int64_t> input(count * context_), target(count * context_);
  const uint8_t* data = bytes_->data();
  for (int64_t r = 0; r < count; ++r) {
    const int64_t i = indices[r];
    MT_CHECK(i >= 0 && i < size_, "TextWindowDataset: index ", i, " is out of range for ", size_, " windows");
    const uint8_t* w = data + i * stride_;
    for (int64_t t = 0; t < context_; ++t) input[r * context_ + t] = w[t], target[r * context_ + t] = w[t + 1];
  }
  return {from_vector(input, {count, context_}), from_vector(target, {count, context_})};
}

}  // namespace mt::data
