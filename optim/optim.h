// The optim layer in one include: optimizers (SGD, Adam, AdamW), gradient clipping, loss scaling
// (GradScaler) and learning-rate schedulers, all in namespace mt::optim.
#pragma once

#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
