// sinew-load's HTML report (clients/export/load_report.h) on samples made here: the windows'
// percentiles, the histogram's count, escaping, and no script or external reference.
#include "clients/export/load_report.h"
#include "clients/lib/stats.h"

#include <algorithm>
#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sinew::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(LoadReport, WindowsHoldTheirNearestRankPercentiles) {
  LoadReport r;
  r.title = "run <1> & co";
  r.figures = {{"latency p50 ms", "50.000"}, {"frames ok", "200"}};
  r.duration_s = 2;  // 8 windows of 0.25 s
  for (int i = 1; i <= 100; ++i) r.samples.push_back({0.1f, float(i)});        // window 0: 1..100 ms
  for (int i = 1; i <= 100; ++i) r.samples.push_back({1.9f, float(1000 + i)});  // window 7
  const std::string html = LoadReportHtml(r);
  EXPECT_THAT(html, HasSubstr("<p>run &lt;1&gt; &amp; co</p>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>latency p50 ms</td><td>50.000</td></tr>"));
  EXPECT_THAT(html, HasSubstr("data-windows=\"8\""));
  EXPECT_THAT(html, HasSubstr("data-samples=\"200\""));
  EXPECT_THAT(html, HasSubstr("<tr><td>0.00–0.25</td><td>100</td><td>50.000</td><td>90.000</td><td>99.000</td><td>100.000</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>1.75–2.00</td><td>100</td><td>1050.000</td><td>1090.000</td><td>1099.000</td><td>1100.000</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>0.25–0.50</td><td>0</td><td colspan=\"4\">no answers</td></tr>"));
  EXPECT_THAT(html, HasSubstr("latency ms (logarithmic)"));  // 1 … 1100 ms spans more than 20×
  for (const char* external : {"<script", "src=", "href=", "http:", "https:", "@import", "url("}) {
    EXPECT_THAT(html, Not(HasSubstr(external))) << external;
  }
}

TEST(LoadReport, NearestRankMatchesLatencyStats) {
  std::vector<float> v = {1, 2, 3, 4};
  EXPECT_EQ(NearestRank(v, 50), 2);
  EXPECT_EQ(NearestRank(v, 51), 3);
  EXPECT_EQ(NearestRank(v, 100), 4);
  EXPECT_EQ(NearestRank(v, 0), 1);
  EXPECT_EQ(NearestRank({}, 50), 0);
}

// LatencyStats keeps at most kExact samples (exact percentiles), then counts them in buckets
// 1e-3 wide: a percentile is then no lower than the exact one and at most 0.1 % above it; the
// maximum and the mean stay exact; merges agree. Until 2026-12-01 every sample was kept (a day's
// load run at 3 000 frames/s: 2 GB, and as much again when the sessions' stats were merged).
TEST(LatencyStats, PastItsExactSamplesPercentilesStayWithinATenthOfAPercent) {
  std::vector<double> all;
  LatencyStats whole, a, b;
  uint64_t x = 88172645463325252ull;  // xorshift: log-uniform latencies from 0.01 to 10 000 ms
  for (int i = 0; i < 200000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const double ms = 0.01 * std::pow(1e6, double(x % 1000003) / 1000003.0);
    all.push_back(ms);
    whole.Add(ms);
    (i % 3 == 0 ? a : b).Add(ms);
  }
  std::sort(all.begin(), all.end());
  EXPECT_FALSE(whole.exact());
  LatencyStats merged = a;
  merged.Merge(b);
  EXPECT_EQ(merged.count(), all.size());
  for (double p : {0.0, 1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 100.0}) {
    const size_t rank = std::clamp<size_t>(size_t(std::ceil(p / 100 * double(all.size()))), 1, all.size());
    const double exact = all[rank - 1];
    for (LatencyStats* s : {&whole, &merged}) {
      const double got = s->Percentile(p);
      EXPECT_GE(got, exact * (1 - 1e-12)) << "p" << p;
      EXPECT_LE(got, exact * (1 + 1e-3) * (1 + 1e-12)) << "p" << p;
    }
  }
  EXPECT_EQ(whole.Max(), all.back());
  double sum = 0;
  for (double ms : all) sum += ms;
  EXPECT_NEAR(whole.Mean(), sum / double(all.size()), 1e-9 * sum / double(all.size()));
  // Below kExact: exact, merges too.
  LatencyStats small, half;
  for (int i = 1; i <= 100; ++i) (i % 2 ? small : half).Add(i);
  small.Merge(half);
  EXPECT_TRUE(small.exact());
  EXPECT_EQ(small.Percentile(50), 50);
  EXPECT_EQ(small.Percentile(99), 99);
  EXPECT_EQ(small.Max(), 100);
}

TEST(LoadReport, NoSamplesStillWritesAPage) {
  LoadReport r;
  r.duration_s = 1;
  const std::string html = LoadReportHtml(r);
  EXPECT_THAT(html, HasSubstr("data-samples=\"0\""));
  EXPECT_THAT(html, HasSubstr("</html>"));
  EXPECT_EQ(WriteLoadReport("/nonexistent-dir/r.html", r).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sinew::client
