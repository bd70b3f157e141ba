// The networks mini_train trains, built by the library so that a model file rebuilds them anywhere
// (nn/model_file.h): a linear model, an MLP, and a small CNN for 1×28×28 images. (The GPT is
// nn::GPT, nn/transformer.h.) Each is an nn::Sequential, so a parameter's name is its layer's index
// in the sequence: docs/model-file.md lists every name and shape.
//
//   linear  in -> out                       Linear(in, out)                          "0.weight", "0.bias"
//   mlp     in -> h1 -> ... -> hk -> out    Linear, ReLU, Linear, ReLU, ..., Linear  "0.", "2.", ..., "2k."
//   cnn     rows (N, 784) -> view (N, 1, 28, 28)                                     0 ImageView
//           conv 3×3 pad 1, 1 -> 32   (N, 32, 28, 28) -> BatchNorm2d -> ReLU -> MaxPool2d(2)     1 2 3 4
//           conv 3×3 pad 1, 32 -> 64  (N, 64, 14, 14) -> BatchNorm2d -> ReLU -> MaxPool2d(2)     5 6 7 8
//           flatten (N, 3136) -> Linear(3136 -> 128) -> ReLU -> Linear(128 -> classes)        9 10 11 12
// The CNN's data stays one row of 784 values per image, as the other networks see it; its first
// layer (ImageView, no parameters) views each row as its 1×28×28 image, so a saved CNN reads the
// same inputs as a saved MLP. Its BatchNorm running statistics are buffers, in the state dict.
//
// Weights start as each layer's own initialisation (PyTorch's), drawn from mt::default_generator()
// in the order the layers are listed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/module.h"

namespace mt::nn {

inline constexpr int64_t kImageSide = 28;  // the CNN takes 1×28×28 images: rows of 784 values
// The widest layer these networks are built with: mini_train's --features, --hidden widths and
// class count, and the widths a model file may declare. Past it is a wrong file or flag, not a layer.
inline constexpr int64_t kMaxWidth = int64_t{1} << 20;

// Linear(in, out) when `hidden` is empty, else the MLP in -> hidden... -> out with ReLU between.
std::shared_ptr<Module> make_mlp(int64_t in, const std::vector<int64_t>& hidden, int64_t out);
// The CNN above, for `classes` classes.
std::shared_ptr<Module> make_image_cnn(int64_t classes);

}  // namespace mt::nn
