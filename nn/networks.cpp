// mini_train's networks: linear, MLP and the 1×28×28 image CNN (see networks.h).
#include "nn/networks.h"

#include "autograd/ops.h"
#include "nn/activation.h"
#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/pooling.h"
#include "nn/sequential.h"

namespace mt::nn {

namespace {

constexpr int64_t kPixels = kImageSide * kImageSide;

// rows (N, 784) -> images (N, 1, 28, 28); images already of that shape pass as they are.
class ImageView : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    if (x.dim() == 4) return x;
    MT_CHECK(x.dim() == 2 && x.size(1) == kPixels, "the CNN takes rows of ", kPixels, " values (1x", kImageSide, "x",
             kImageSide, " images), got shape ", x.sizes());
    return mt::reshape(x, {x.size(0), 1, kImageSide, kImageSide});
  }
  std::string name() const override { return "ImageView"; }
  std::string extra_repr() const override { return "1x28x28"; }
};

// conv 3×3 pad 1 -> BatchNorm2d -> ReLU -> MaxPool2d(2): halves H and W. The Sequential runs the last
// three as one fused op (Note [Fused runs in Sequential]); they stay three modules, so the names hold.
void add_conv_block(Sequential& net, int64_t in, int64_t out) {
  net.push_back(std::make_shared<Conv2d>(in, out, 3, Conv2dLayerOptions{.padding = 1}));
  net.push_back(std::make_shared<BatchNorm2d>(out));
  net.push_back(std::make_shared<ReLU>());
  net.push_back(std::make_shared<MaxPool2d>(2));
}

}  // namespace

std::shared_ptr<Module> make_mlp(int64_t in, const std::vector<int64_t>& hidden, int64_t out) {
  auto net = std::make_shared<Sequential>();
  int64_t width = in;
  for (int64_t h : hidden) {
    net->push_back(std::make_shared<Linear>(width, h));
    net->push_back(std::make_shared<ReLU>());
    width = h;
  }
  net->push_back(std::make_shared<Linear>(width, out));
  return net;
}

std::shared_ptr<Module> make_image_cnn(int64_t classes) {
  auto net = std::make_shared<Sequential>();
  net->push_back(std::make_shared<ImageView>());
  add_conv_block(*net, 1, 32);   // (N, 32, 14, 14)
  add_conv_block(*net, 32, 64);  // (N, 64, 7, 7)
  net->push_back(std::make_shared<Flatten>());
  net->push_back(std::make_shared<Linear>(64 * 7 * 7, 128));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<Linear>(128, classes));
  return net;
}

}  // namespace mt::nn
