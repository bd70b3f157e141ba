// mini_train's convolutional network for 1×28×28 images (see model_cnn.h).
#include "apps/mini_train/model_cnn.h"

#include "autograd/ops.h"
#include "nn/activation.h"
#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/pooling.h"
#include "nn/sequential.h"

namespace mt::app {

namespace {

constexpr int64_t kPixels = kCnnImageSide * kCnnImageSide;

// rows (N, 784) -> images (N, 1, 28, 28); images already of that shape pass as they are.
class ImageView : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override {
    if (x.dim() == 4) return x;
    MT_CHECK(x.dim() == 2 && x.size(1) == kPixels, "the CNN takes rows of ", kPixels, " values (1x", kCnnImageSide,
             "x", kCnnImageSide, " images), got shape ", x.sizes());
    return mt::reshape(x, {x.size(0), 1, kCnnImageSide, kCnnImageSide});
  }
  std::string name() const override { return "ImageView"; }
  std::string extra_repr() const override { return "1x28x28"; }
};

// conv 3×3 pad 1 -> BatchNorm2d -> ReLU -> MaxPool2d(2): halves H and W.
void add_conv_block(nn::Sequential& net, int64_t in, int64_t out) {
  net.push_back(std::make_shared<nn::Conv2d>(in, out, 3, nn::Conv2dLayerOptions{.padding = 1}));
  net.push_back(std::make_shared<nn::BatchNorm2d>(out));
  net.push_back(std::make_shared<nn::ReLU>());
  net.push_back(std::make_shared<nn::MaxPool2d>(2));
}

}  // namespace

std::string cnn_signature(const Data& d) {
  return "cnn:" + std::to_string(d.in_features) + "-" + std::to_string(d.out_features);
}

std::shared_ptr<nn::Module> build_cnn(const Data& d) {
  MT_CHECK(d.in_features == kPixels, "--model cnn takes 1x", kCnnImageSide, "x", kCnnImageSide, " images, rows of ",
           kPixels, " values (e.g. --dataset fashion-mnist); this data has ", d.in_features, " values per row");
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<ImageView>());
  add_conv_block(*net, 1, 32);   // (N, 32, 14, 14)
  add_conv_block(*net, 32, 64);  // (N, 64, 7, 7)
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(64 * 7 * 7, 128));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(128, d.out_features));
  return net;
}

}  // namespace mt::app
