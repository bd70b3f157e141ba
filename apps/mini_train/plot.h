// `mini_train plot`: the curves of one or more --log-json files as one SVG, the runs overlaid.
//
//   mini_train plot run1.jsonl [run2.jsonl ...] -o curves.svg [--title TEXT]
//
// Three panels share the x axis, the optimizer step: the training loss (the step records of
// --log-every, or the epoch records' losses when there are none), the --eval metric (the eval
// records: accuracy or loss, with its split), and the learning rate (as the loss). Each log is one
// colour throughout, named in the legend by its file name. The records are those of Note [Log
// records] (json_log.h).
//
// A file that cannot be read, a line that is not a record, or a log with no records at all is one
// line naming the file (and the line); the SVG follows the output rule (tensor/output_file.h).
// Not here: log scales, smoothing, a time axis.
#pragma once

namespace mt::app {

// argv[1] is "plot"; returns the exit code (0; 2 for a usage error). Throws mt::Error on bad input.
int run_plot(int argc, char** argv);

}  // namespace mt::app
