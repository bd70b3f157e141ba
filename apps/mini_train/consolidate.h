// `mini_train consolidate CHECKPOINT -o OUT [--as checkpoint|model]`: one file from a checkpoint.
//   CHECKPOINT  a checkpoint: a sharded one's index (checkpoint_sharded.h) or its .shards folder, or a
//               single file; or a --checkpoint-dir, meaning its newest checkpoint
//   --as checkpoint (default)  the ordinary single-file checkpoint (nn/checkpoint.h), which --resume
//               takes at any world size
//   --as model  the model file of its weights (model_file.h), as --save would have written it
// Every shard is checked on the way (Note [Sharded checkpoints]): a missing, damaged or mismatched
// shard is one line naming it and a non-zero exit, and nothing is written.
#pragma once

namespace mt::app {

// argv[1] is "consolidate"; returns the exit code (0; 2 for a usage error). Throws mt::Error on bad input.
int run_consolidate(int argc, char** argv);

}  // namespace mt::app
