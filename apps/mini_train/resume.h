// The resume phase of mini_train (--resume FILE or auto): the checkpoint is reconciled with what this
// run asks (what cannot change mid-run is refused, what the optimizer state brings back is noted for
// the config table), then every piece of state that decides the rest of the run is loaded.
#pragma once

#include "apps/mini_train/run.h"

namespace mt::app {

// Loads r.o.resume into `r` (nothing for an empty --resume, or --resume auto with no checkpoint yet).
void resume(Run& r);

}  // namespace mt::app
