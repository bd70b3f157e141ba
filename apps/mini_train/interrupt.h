// What mini_train says when Ctrl-C (SIGINT) or SIGTERM stops a training process: one line on
// stderr naming where training was and what is on disk to resume from, e.g.
//   mini_train: interrupted (SIGINT) in epoch 4 after step 130: checkpoint ck/checkpoint-epoch-000003.safetensors
//   is the newest; resume with --resume auto
// then the process still dies by the signal (exit status 128 + signal, as before).
//
// Installed by the process that speaks for the run: a single process, or rank 0 of a job whose
// ranks were started by torchrun or srun. Workers of mini_train's own launcher leave it to the
// launcher, which stops them and says so (workers.cpp). Not here: stopping cleanly at a step
// boundary (the ranks of a job could stop at different steps and hang a collective).
#pragma once

#include <cstdint>
#include <string>

namespace mt::app {

// Installs the SIGINT/SIGTERM handler. `checkpoint_dir` empty: the line says nothing is saved.
void install_interrupt_line(const std::string& checkpoint_dir);
// Where training is, for the line (cheap: two atomic stores, once per step).
void note_progress(int64_t epoch, int64_t step);
// The newest checkpoint on disk ("" for none), after each one written and after a resume.
void note_checkpoint(const std::string& path);

// The same words for the launcher, which stops its workers and then looks in `checkpoint_dir`:
// "checkpoint ck/... is the newest; resume with --resume auto", or "nothing saved ...".
std::string what_is_saved(const std::string& checkpoint_dir);

}  // namespace mt::app
