#include "clients/lib/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"

namespace sinew::client {
namespace {

constexpr int kBarWidth = 20;
constexpr double kRedrawSeconds = 0.1;

double SteadyNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// floor(done * scale / total); `scale` when total is 0.
uint64_t Fraction(uint64_t done, uint64_t total, uint64_t scale) {
  if (total == 0) return scale;
  return static_cast<uint64_t>(static_cast<unsigned __int128>(done) * scale / total);
}

// "7 s", "2 min 05 s", "3 h 04 min".
std::string Duration(double seconds) {
  const long long s = std::llround(std::max(0.0, seconds));
  if (s < 60) return absl::StrFormat("%d s", s);
  if (s < 3600) return absl::StrFormat("%d min %02d s", s / 60, s % 60);
  return absl::StrFormat("%d h %02d min", s / 3600, s / 60 % 60);
}

std::string RateText(double rate) {
  return rate > 0 ? absl::StrFormat("%.1f frames/s", rate) : std::string("-- frames/s");
}

}  // namespace

Progress::Progress(std::string label, uint64_t total, std::FILE* out, std::optional<bool> tty,
                   Clock now_seconds)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      tty_(tty.has_value() ? *tty : ::isatty(::fileno(out)) == 1),
      now_(now_seconds ? std::move(now_seconds) : Clock(SteadyNow)),
      start_time_(now_()) {}

void Progress::Resume(uint64_t already_done) {
  done_ = start_done_ = std::min(already_done, total_);
  start_time_ = now_();
  last_decile_ = Fraction(done_, total_, 10);
}

void Progress::Update(uint64_t done) {
  if (finished_) return;
  done_ = std::min(done, total_);
  const double now = now_();
  if (tty_) {
    if (!drawn_ || now - last_draw_ >= kRedrawSeconds) DrawTty(now, /*final=*/false);
    return;
  }
  const uint64_t decile = Fraction(done_, total_, 10);
  if (decile > last_decile_) {
    last_decile_ = decile;
    PrintPlain(now);
  }
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  const double now = now_();
  if (tty_) {
    DrawTty(now, /*final=*/true);
  } else if (!last_printed_.has_value() || *last_printed_ != done_) {
    PrintPlain(now);
  }
}

double Progress::Rate(double now) const {
  const double elapsed = now - start_time_;
  const uint64_t frames = done_ - start_done_;
  if (elapsed <= 0 || frames == 0) return 0;
  return static_cast<double>(frames) / elapsed;
}

void Progress::DrawTty(double now, bool final) {
  const uint64_t filled = Fraction(done_, total_, kBarWidth);
  std::string bar(filled, '#');
  bar.append(kBarWidth - filled, '.');
  const double rate = Rate(now);
  std::string tail;
  if (final) {
    tail = "in " + Duration(now - start_time_);
  } else if (done_ >= total_) {
    tail = "ETA 0 s";
  } else if (rate > 0) {
    tail = "ETA " + Duration(static_cast<double>(total_ - done_) / rate);
  } else {
    tail = "ETA --";
  }
  std::string line =
      absl::StrFormat("%s [%s] %3d%%  %d/%d frames  %s  %s", label_, bar,
                      Fraction(done_, total_, 100), done_, total_, RateText(rate), tail);
  const size_t width = line.size();
  if (width < last_width_) line.append(last_width_ - width, ' ');  // blank the old tail
  std::fputc('\r', out_);
  std::fputs(line.c_str(), out_);
  if (final) std::fputc('\n', out_);
  std::fflush(out_);
  drawn_ = true;
  last_draw_ = now;
  last_width_ = width;
}

void Progress::PrintPlain(double now) {
  const std::string line = absl::StrFormat("%s: %d/%d frames (%d%%), %s\n", label_, done_, total_,
                                           Fraction(done_, total_, 100), RateText(Rate(now)));
  std::fputs(line.c_str(), out_);
  std::fflush(out_);
  last_printed_ = done_;
}

}  // namespace sinew::client
