// sinew-load's report as one self-contained HTML page (inline SVG and CSS, no script, nothing
// fetched): the run's figures as printed, latency percentiles (p50, p90, p99, max) and answered
// frames/s over time in windows, and the latency histogram with p50 and p99 marked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace sinew::client {

struct LoadSample {
  float t = 0;           // seconds from the run's start to the frame's scheduled send
  float latency_ms = 0;  // from the scheduled send to the answer
};

struct LoadReport {
  std::string title;                                         // the run, as sinew-load's first line
  std::vector<std::pair<std::string, std::string>> figures;  // metric, value (as printed)
  std::vector<LoadSample> samples;                           // answered frames, any order
  double duration_s = 0;                                     // the run's length (x axis)
  // The fraction of the answered frames that `samples` holds, a uniform random sample of them
  // (MergeSamples); 1: every one. Frame counts and rates are the samples' divided by it.
  double sample_rate = 1;
};

// A uniform random sample of at most `cap` of one session's answered frames (reservoir
// sampling, Algorithm R): every frame until `cap`, then each later frame replaces a random one
// with probability cap / seen. sinew-load keeps one per session, so that a long run's report
// costs bounded memory (8 bytes a frame kept) instead of growing with the run.
class SampleReservoir {
 public:
  SampleReservoir(size_t cap, uint64_t seed) : cap_(cap), rng_(seed | 1) {}
  void Add(const LoadSample& s);
  uint64_t seen() const { return seen_; }
  const std::vector<LoadSample>& kept() const { return kept_; }

 private:
  uint64_t Next();  // xorshift64
  size_t cap_;
  uint64_t rng_;
  uint64_t seen_ = 0;
  std::vector<LoadSample> kept_;
};

// Appends the sessions' samples to `report` at one rate, the lowest any session's reservoir has
// (kept / seen): each session contributes a random seen × rate of its kept samples, so that the
// merged samples are a uniform sample of all the frames; sets report.sample_rate to that rate
// (1 when every reservoir holds every frame).
void MergeSamples(const std::vector<SampleReservoir>& sessions, LoadReport& report, uint64_t seed);

// Percentile as client::LatencyStats computes it (nearest rank) of sorted values; 0 when empty.
double NearestRank(const std::vector<float>& sorted, double p);

std::string LoadReportHtml(const LoadReport& report);

// Writes LoadReportHtml(report) to `path` (path.tmp, then rename); errno-derived codes with the
// path on failure.
absl::Status WriteLoadReport(const std::string& path, const LoadReport& report);

}  // namespace sinew::client
