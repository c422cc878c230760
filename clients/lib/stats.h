// Latency samples and their percentiles (nearest-rank), for client reports, in bounded memory.
// Up to kExact samples are kept as they are and their percentiles are exact. Past that (a long
// load run: 50 sessions at 60 frames/s for a day are 259 million samples, 2 GB of doubles, and
// as much again when merged) they are counted in logarithmic buckets 1e-3 wide (relative), so
// a percentile is the upper edge of its sample's bucket: at most 0.1 % above the exact value.
// The maximum, the minimum and the mean stay exact. At most 128 KiB of samples, then 203 kB of
// buckets (until 2026-12-03 it kept 64 Ki samples, 512 KiB, grown to 1 MiB by the one that
// tipped it over: sinew-load keeps one per session).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace sinew::client {

class LatencyStats {
 public:
  static constexpr size_t kExact = size_t{1} << 14;

  void Add(double ms) {
    ++count_;
    sum_ += ms;
    min_ = std::min(min_, ms);
    max_ = std::max(max_, ms);
    if (buckets_.empty() && samples_.size() < kExact) {
      samples_.push_back(ms);
      sorted_ = false;
    } else {
      ToBuckets();
      ++buckets_[Bucket(ms)];
    }
  }
  void Merge(const LatencyStats& o) {
    if (buckets_.empty() && o.buckets_.empty() && samples_.size() + o.samples_.size() <= kExact) {
      samples_.insert(samples_.end(), o.samples_.begin(), o.samples_.end());
      sorted_ = false;
    } else {
      ToBuckets();
      for (double ms : o.samples_) ++buckets_[Bucket(ms)];
      for (size_t b = 0; b < o.buckets_.size(); ++b) buckets_[b] += o.buckets_[b];
    }
    count_ += o.count_;
    sum_ += o.sum_;
    min_ = std::min(min_, o.min_);
    max_ = std::max(max_, o.max_);
  }
  size_t count() const { return count_; }
  // Whether percentiles are exact (no more than kExact samples so far).
  bool exact() const { return buckets_.empty(); }
  // p in [0, 100]; 0 when empty.
  double Percentile(double p) {
    if (count_ == 0) return 0;
    const uint64_t rank = std::clamp<uint64_t>(static_cast<uint64_t>(std::ceil(p / 100.0 * double(count_))), 1, count_);
    if (buckets_.empty()) {
      if (!sorted_) {
        std::sort(samples_.begin(), samples_.end());
        sorted_ = true;
      }
      return samples_[rank - 1];
    }
    if (rank == count_) return max_;
    uint64_t seen = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      seen += buckets_[b];
      if (seen >= rank) return std::clamp(UpperEdge(b), min_, max_);
    }
    return max_;
  }
  double Max() { return count_ == 0 ? 0 : max_; }
  double Mean() const { return count_ == 0 ? 0 : sum_ / double(count_); }

 private:
  static constexpr double kLow = 1e-4;   // ms: the first bucket holds everything below
  static constexpr double kHigh = 1e7;   // ms: the last bucket holds everything above
  static constexpr double kWidth = 1e-3;  // relative width of a bucket
  static size_t BucketCount() { return static_cast<size_t>(std::ceil(std::log(kHigh / kLow) / std::log1p(kWidth))) + 1; }
  static size_t Bucket(double ms) {
    if (!(ms > kLow)) return 0;
    return std::min(BucketCount() - 1, static_cast<size_t>(std::ceil(std::log(ms / kLow) / std::log1p(kWidth))));
  }
  // Bucket b > 0 holds (kLow (1 + w)^(b − 1), kLow (1 + w)^b].
  static double UpperEdge(size_t b) { return kLow * std::exp(double(b) * std::log1p(kWidth)); }
  void ToBuckets() {
    if (!buckets_.empty()) return;
    buckets_.assign(BucketCount(), 0);
    for (double ms : samples_) ++buckets_[Bucket(ms)];
    std::vector<double>().swap(samples_);
  }

  std::vector<double> samples_;    // while exact
  std::vector<uint64_t> buckets_;  // once past kExact
  bool sorted_ = false;
  uint64_t count_ = 0;
  double sum_ = 0, min_ = INFINITY, max_ = -INFINITY;
};

}  // namespace sinew::client
