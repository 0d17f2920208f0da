// streams/plot.hpp — `--plot OUT.png`: the score over the stream, drawn by plot_stream.py.
//
// The picture is drawn by streams/plot_stream.py with Debian's python3-matplotlib, run as a
// child process (no shell). The script is looked for in $STREAMKNN_PLOT_SCRIPT, next to the
// executable (the build copies it there), then in the source tree; the interpreter is
// $STREAMKNN_PYTHON or /usr/bin/python3 (Debian's, which sees Debian's packages). Any failure
// throws DataError with the reason.
#pragma once

#include <string>

#include "streams/source.hpp"

namespace streamknn::streams {

void draw_plot(const std::string& predictions_csv, const std::string& png, Task task, const std::string& title);

}  // namespace streamknn::streams
