// `mini_train generate`: text from a GPT saved by `mini_train --model gpt`.
//
//   mini_train generate --init final_model.safetensors --prompt "The " --tokens 200
//                       [--temperature 0.8] [--top-k 40] [--seed 1]
//
// Rebuilds the model from the file's metadata (nn::load_model: layers, heads, dim, context; --init may
// also be a checkpoint, single-file or sharded: load_saved_model in model_file.h), then
// appends one byte at a time: the logits of the last position of (at most) the last `context`
// bytes, divided by the temperature, restricted to the top-k bytes when --top-k > 0, softmaxed and
// sampled with a Generator seeded by --seed (the same seed gives the same text); --temperature 0
// takes the most likely byte. Prints the prompt and its continuation as raw bytes, then a newline.
//
// Note [Prompt longer than the context]: refused, with one line naming both lengths: the model has
// positions for `context` bytes only, and silently dropping the start of a prompt would make its
// output depend on text it never saw. Once generation runs past the context, the window slides
// (the oldest bytes fall out), as in every fixed-context language model.
//
// Not here: key/value caching (each byte runs the whole window; 200 bytes of the preset take well
// under a second on one core), beam search, stop sequences.
#pragma once

namespace mt::app {

// argv[1] is "generate". Returns the exit code; throws mt::Error for bad input.
int run_generate(int argc, char** argv);

}  // namespace mt::app
