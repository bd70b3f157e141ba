// mini_train's convolutional network (--model cnn) for 1×28×28 images such as Fashion-MNIST's:
//   rows (N, 784) -> view (N, 1, 28, 28)
//   conv 3×3 pad 1, 1 -> 32   (N, 32, 28, 28) -> BatchNorm2d -> ReLU -> MaxPool2d(2) (N, 32, 14, 14)
//   conv 3×3 pad 1, 32 -> 64  (N, 64, 14, 14) -> BatchNorm2d -> ReLU -> MaxPool2d(2) (N, 64, 7, 7)
//   flatten (N, 3136) -> Linear(3136 -> 128) -> ReLU -> Linear(128 -> classes)
// The data stays one row of 784 values per image (as the other models, evaluate and predict see
// it); the model's first layer views each row as its 1×28×28 image, so a saved CNN reads the same
// inputs as a saved MLP. The recipe is the Fashion-MNIST preset's (options.cpp): cross-entropy,
// Adam lr 1e-3 with cosine decay, batch 64, standardised inputs.
//
// The BatchNorm running statistics are buffers: state_dict() holds them, so checkpoints and the
// final model carry them and --resume restores them. Under --nproc/--gpus each rank keeps its own
// (plain BatchNorm over its share of the batch); the model rank 0 saves holds rank 0's.
//
// Not here: SyncBatchNorm (--sync-bn), other image sizes or channel counts.
#pragma once

#include <memory>
#include <string>

#include "apps/mini_train/job.h"
#include "nn/module.h"

namespace mt::app {

inline constexpr int64_t kCnnImageSide = 28;  // the CNN takes 1×28×28 images: rows of 784 values

// "cnn:784-10": what a checkpoint must match to be resumed; read_model_info parses it like an MLP's.
std::string cnn_signature(const Data& data);
// The network above for data.out_features classes. Throws one line naming the data's row width
// when its rows are not 784 values.
std::shared_ptr<nn::Module> build_cnn(const Data& data);

}  // namespace mt::app
