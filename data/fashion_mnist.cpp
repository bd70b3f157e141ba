// fashion_mnist.cpp: find the split's two IDX files, read them, check they are Fashion-MNIST.
#include "data/fashion_mnist.h"

#include <filesystem>

#include "data/idx.h"
#include "tensor/raw_ops.h"

namespace mt::data {
namespace {

constexpr const char* kInstallHint =
    "install Debian's dataset-fashion-mnist package (scripts/install-deps.sh does), which puts the "
    "files in /usr/share/datasets/fashion-mnist";

// dir/name, else dir/name.gz.
std::string find_file(const std::filesystem::path& dir, const std::string& name) {
  for (const std::string& candidate : {name, name + ".gz"}) {
    const std::filesystem::path p = dir / candidate;
    if (std::filesystem::is_regular_file(p)) return p.string();
  }
  MT_FAIL("load_fashion_mnist: neither ", (dir / name).string(), " nor ", (dir / (name + ".gz")).string(),
          " exists; ", kInstallHint);
}

}  // namespace

FashionMnist load_fashion_mnist(const std::string& dir, Split split) {
  MT_CHECK(std::filesystem::is_directory(dir), "load_fashion_mnist: directory ", dir, " does not exist; ",
           kInstallHint);
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  const std::string images_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");

  FashionMnist fm;
  fm.images = read_idx(images_path, {.dtype = kFloat32, .normalize = true});
  fm.labels = read_idx(labels_path, {.dtype = kInt64});
  MT_CHECK(fm.images.dim() == 3 && fm.images.size(1) == 28 && fm.images.size(2) == 28, images_path,
           ": expected Fashion-MNIST images of shape (N, 28, 28), got ", fm.images.sizes());
  MT_CHECK(fm.labels.dim() == 1 && fm.labels.size(0) == fm.images.size(0), labels_path, ": expected ",
           fm.images.size(0), " labels to match ", images_path, ", got shape ", fm.labels.sizes());
  if (fm.labels.numel() > 0) {
    const auto max_label = raw::max(fm.labels).item<int64_t>();
    MT_CHECK(max_label < static_cast<int64_t>(kFashionMnistClasses.size()), labels_path, ": label ", max_label,
             " is not a Fashion-MNIST class (0..9)");
  }
  return fm;
}

}  // namespace mt::data
