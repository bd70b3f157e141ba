// Fashion-MNIST (Xiao et al., 2017): 70,000 grayscale 28×28 images of clothing in 10 classes,
// a drop-in replacement for MNIST that is harder to get right by accident. The four IDX files
//
//   train-images-idx3-ubyte  train-labels-idx1-ubyte  t10k-images-idx3-ubyte  t10k-labels-idx1-ubyte
//
// (each optionally .gz) are found in a directory; Debian's dataset-fashion-mnist package installs
// them under /usr/share/datasets/fashion-mnist (scripts/install-deps.sh installs the package).
//
// Not here: downloading (nothing is fetched at run time), normalisation by the dataset's mean/std.
#pragma once

#include <array>
#include <string>

#include "tensor/tensor.h"

namespace mt::data {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

inline constexpr std::array<const char*, 10> kFashionMnistClasses = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

enum class Split { Train, Test };  // 60,000 and 10,000 examples

struct FashionMnist {
  Tensor images;  // (N, 28, 28) float32, pixels scaled to [0, 1]
  Tensor labels;  // (N) int64, class indices 0..9 into kFashionMnistClasses
};

// Reads one split from `dir`, preferring the uncompressed files when both forms are there. Checks
// that images and labels agree in count, that images are 28×28 and labels in 0..9. A missing
// directory or file is an error naming the path and saying which package provides it.
FashionMnist load_fashion_mnist(const std::string& dir = kFashionMnistDir, Split split = Split::Train);

}  // namespace mt::data
