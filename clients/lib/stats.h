// Latency samples and their percentiles (nearest-rank), for client reports.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace sinew::client {

class LatencyStats {
 public:
  void Add(double ms) {
    samples_.push_back(ms);
    sorted_ = false;
  }
  void Merge(const LatencyStats& o) {
    samples_.insert(samples_.end(), o.samples_.begin(), o.samples_.end());
    sorted_ = false;
  }
  size_t count() const { return samples_.size(); }
  // p in [0, 100]; 0 when empty.
  double Percentile(double p) {
    if (samples_.empty()) return 0;
    if (!sorted_) {
      std::sort(samples_.begin(), samples_.end());
      sorted_ = true;
    }
    const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * samples_.size()));
    return samples_[std::clamp<size_t>(rank, 1, samples_.size()) - 1];
  }
  double Max() { return Percentile(100); }
  double Mean() const {
    double s = 0;
    for (double x : samples_) s += x;
    return samples_.empty() ? 0 : s / samples_.size();
  }

 private:
  std::vector<double> samples_;
  bool sorted_ = false;
};

}  // namespace sinew::client
