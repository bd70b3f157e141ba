// nn: everything of the layer above autograd in one include: Module, the layers, the losses, the
// functional forms (nn::F) and nn::init.
#pragma once

#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/flatten.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/module_dict.h"
#include "nn/module_list.h"
#include "nn/sequential.h"
// Transformers: Embedding, LayerNorm, MultiheadAttention, TransformerBlock, GPT.
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/transformer.h"

// Convolutional networks
#include "nn/batchnorm.h"
#include "nn/group_norm.h"
#include "nn/conv.h"
#include "nn/conv_transpose.h"
#include "nn/pooling.h"
#include "nn/upsample.h"
