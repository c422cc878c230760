// Progress display for batch jobs ("frames" of a clip).
//
// On a terminal: one line redrawn in place with '\r', at most every 100 ms and always at
// Finish():
//   label [#########...........]  45%  54/120 frames  12.3 frames/s  ETA 5 s
// Elsewhere (a log file, a pipe): plain lines, never '\r', printed each time progress reaches
// a new multiple of 10% of the total, and at Finish() unless that line was already printed:
//   label: 54/120 frames (45%), 12.3 frames/s
//
// Rate and ETA count only frames done in this run: from construction with 0 done, or, after
// Resume(already_done), from the Resume() call with `already_done` as the baseline.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

namespace sinew::client {

class Progress {
 public:
  // Seconds on a monotonic clock; the default reads std::chrono::steady_clock.
  using Clock = std::function<double()>;

  // `total`: the count that means done (0 is allowed: Finish prints 0/0 at 100%).
  // `out`: where lines go (not owned; flushed after each print).
  // `tty`: redraw mode; nullopt means isatty(fileno(out)).
  // `now_seconds`: clock for rates and throttling (tests inject a fake one).
  Progress(std::string label, uint64_t total, std::FILE* out = stderr,
           std::optional<bool> tty = std::nullopt, Clock now_seconds = {});

  // Frames [0, already_done) came from an earlier run (a resumed batch): shows them as done
  // but restarts the rate clock here so that the rate and ETA count only this run's frames.
  // Call before the first Update.
  void Resume(uint64_t already_done);

  // `done` frames complete so far (monotonic, clamped to total). Prints only as the mode's
  // throttle allows.
  void Update(uint64_t done);

  // Prints the final state (the last Update's count) and, on a terminal, ends the line. Call
  // it on failure too, before printing an error. Later calls do nothing.
  void Finish();

  bool tty() const { return tty_; }

 private:
  double Rate(double now) const;  // frames/s this run; 0 when unknown
  void DrawTty(double now, bool final);
  void PrintPlain(double now);

  std::string label_;
  uint64_t total_;
  std::FILE* out_;
  bool tty_;
  Clock now_;

  double start_time_;
  uint64_t start_done_ = 0;
  uint64_t done_ = 0;
  bool drawn_ = false;                    // tty: a line has been drawn
  double last_draw_ = 0;                  // tty: time of the last redraw
  size_t last_width_ = 0;                 // tty: characters in the last line (to blank leftovers)
  uint64_t last_decile_ = 0;              // plain: highest 10% step printed (or the start's)
  std::optional<uint64_t> last_printed_;  // plain: `done` of the last printed line
  bool finished_ = false;
};

}  // namespace sinew::client
