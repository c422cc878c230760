// sinew-load's report as one self-contained HTML page (inline SVG and CSS, no script, nothing
// fetched): the run's figures as printed, latency percentiles (p50, p90, p99, max) and answered
// frames/s over time in windows, and the latency histogram with p50 and p99 marked.
#pragma once

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
  std::vector<LoadSample> samples;                           // every answered frame, any order
  double duration_s = 0;                                     // the run's length (x axis)
};

// Percentile as client::LatencyStats computes it (nearest rank) of sorted values; 0 when empty.
double NearestRank(const std::vector<float>& sorted, double p);

std::string LoadReportHtml(const LoadReport& report);

// Writes LoadReportHtml(report) to `path` (path.tmp, then rename); errno-derived codes with the
// path on failure.
absl::Status WriteLoadReport(const std::string& path, const LoadReport& report);

}  // namespace sinew::client
