// A one-line progress bar for the steps of an epoch, and for the rows of an evaluation:
//   Epoch 2/5 [=========>          ] 412/938 loss 0.4312 61k samples/s ETA 0:09
//   Evaluating test [=====>        ] 4096/10000 210k samples/s ETA 0:01
// redrawn in place (carriage return) at most ten times a second and cut to the terminal's width,
// so a narrow terminal never wraps it into one new line per redraw. The loss is the epoch's
// running mean; the rate and ETA are this process's.
//
// Drawn only where someone watches: stdout is a terminal, the process was not started by an MPI
// launcher or Slurm (their ranks' terminals are theirs, not the user's, even when the output goes
// to a file), and MT_NO_PROGRESS is unset (set it to 1 to turn bars off anywhere; the launcher sets
// it for workers whose output is not a terminal).
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

namespace mt::app {

// Whether this process may draw progress bars (see above).
bool progress_wanted();

class ProgressBar {
 public:
  // enabled: the caller's wish (rank 0, not --quiet); progress_wanted() must agree too. `head`
  // starts the line ("Epoch 2/5", "Evaluating test"); `total`: the steps or rows to come.
  ProgressBar(bool enabled, std::string head, int64_t total);
  ~ProgressBar() { clear(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // After step (or row) `done`: `samples` seen so far, `running_loss` their mean loss (NaN: no loss
  // to show, as in an evaluation).
  void update(int64_t done, int64_t samples, double running_loss = std::nan(""));
  // Erases the bar (before the epoch line is printed).
  void clear();

  // The bar's text for a terminal `columns` wide (at most columns - 1 characters, so the cursor
  // never wraps). Public for tests and for reading.
  static std::string line(const std::string& head, int64_t done, int64_t total, double loss, double samples_per_s,
                          double eta_s, int columns);

 private:
  bool enabled_;
  std::string head_;
  int64_t total_;
  int drawn_width_ = 0;  // characters on screen, 0 when nothing is drawn
  std::chrono::steady_clock::time_point start_, last_{};
};

}  // namespace mt::app
