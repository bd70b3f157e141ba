// minitrain: the one header a program includes to use the library.
#pragma once

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/generator.h"
#include "tensor/tensor.h"
