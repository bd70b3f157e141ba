// mini_train's convolutional network for 1×28×28 images (see model_cnn.h).
#include "apps/mini_train/model_cnn.h"

#include "nn/networks.h"

namespace mt::app {

std::string cnn_signature(const Data& d) {
  return "cnn:" + std::to_string(d.in_features) + "-" + std::to_string(d.out_features);
}

std::shared_ptr<nn::Module> build_cnn(const Data& d) {
  constexpr int64_t kSide = nn::kImageSide;
  MT_CHECK(d.in_features == kSide * kSide, "--model cnn takes 1x", kSide, "x", kSide, " images, rows of ",
           kSide * kSide, " values (e.g. --dataset fashion-mnist); this data has ", d.in_features, " values per row");
  return nn::make_image_cnn(d.out_features);
}

}  // namespace mt::app
