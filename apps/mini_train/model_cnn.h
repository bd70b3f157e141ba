// mini_train's convolutional network (--model cnn) for 1×28×28 images such as Fashion-MNIST's: the
// library's nn::make_image_cnn (nn/networks.h, where its layers are drawn), here checked against the
// data and named. The recipe is the Fashion-MNIST preset's (options.cpp): cross-entropy, Adam lr 1e-3
// with cosine decay, batch 64, standardised inputs.
//
// The BatchNorm running statistics are buffers: state_dict() holds them, so checkpoints and the
// final model carry them and --resume restores them. Under --nproc/--gpus each rank keeps its own
// (plain BatchNorm over its share of the batch); the model rank 0 saves holds rank 0's.
//
// Not here: SyncBatchNorm (--sync-bn, data_parallel.h), other image sizes or channel counts.
#pragma once

#include <memory>
#include <string>

#include "apps/mini_train/job.h"
#include "nn/module.h"

namespace mt::app {

// "cnn:784-10": what a checkpoint must match to be resumed; nn::read_model_info parses it like an MLP's.
std::string cnn_signature(const Data& data);
// The network for data.out_features classes. Throws one line naming the data's row width when its
// rows are not 784 values.
std::shared_ptr<nn::Module> build_cnn(const Data& data);

}  // namespace mt::app
