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
  EXPECT_THAT(html, HasSubstr("<tr><td>0.25–0.50</td><td>0</td><td colspan=\"4\">no frame scheduled here was answered</td></tr>"));
  EXPECT_THAT(html, HasSubstr("latency ms (logarithmic)"));  // 1 … 1100 ms spans more than 20×
  for (const char* external : {"<script", "src=", "href=", "http:", "https:", "@import", "url("}) {
    EXPECT_THAT(html, Not(HasSubstr(external))) << external;
  }
}

// The rate chart counts frames by when their answers came: frames all scheduled in the first
// quarter second and answered one a window over the run draw a flat rate over every window, not
// one peak at the start and nothing after (by scheduled send time until 2026-12-07).
TEST(LoadReport, TheRateChartCountsFramesByTheirAnswersArrival) {
  LoadReport r;
  r.duration_s = 2;  // 8 windows of 0.25 s
  for (int w = 0; w < 8; ++w) r.samples.push_back({0.01f, float(250 * w + 100)});  // answered in window w
  const std::string html = LoadReportHtml(r);
  const size_t at = html.find("<svg id=\"rate\"");
  ASSERT_NE(at, std::string::npos);
  const std::string rate = html.substr(at, html.find("</svg>", at) - at);
  const size_t d = rate.find("<path d=\"M");
  ASSERT_NE(d, std::string::npos);
  const std::string path = rate.substr(d + 9, rate.find('"', d + 9) - d - 9);
  std::vector<std::string> ys;
  for (size_t p = 0; p < path.size();) {
    const size_t space = path.find(' ', p), next = path.find('L', p + 1);
    ys.push_back(path.substr(space + 1, (next == std::string::npos ? path.size() : next) - space - 1));
    p = next == std::string::npos ? path.size() : next;
  }
  ASSERT_EQ(ys.size(), 8u) << path;
  for (const std::string& y : ys) EXPECT_EQ(y, ys[0]) << path;  // 4 frames/s in every window
  EXPECT_THAT(rate, HasSubstr("frames by their answer's arrival"));
}

// A session's reservoir keeps every frame up to its cap, in order; past it exactly `cap` frames,
// each of the stream's frames equally likely: over 1 000 000 frames numbered by their latency,
// the kept ones' mean and deciles are those of the whole stream within 1 % of its range, and the
// second half of the stream holds half of them (a reservoir that kept the first frames, or the
// last, fails both).
TEST(SampleReservoir, KeepsEveryFrameUpToItsCapThenAUniformSample) {
  SampleReservoir small(100, 7);
  for (int i = 0; i < 60; ++i) small.Add({float(i), float(i)});
  ASSERT_EQ(small.kept().size(), 60u);
  for (int i = 0; i < 60; ++i) EXPECT_EQ(small.kept()[i].latency_ms, float(i));

  constexpr int kFrames = 1000000;
  constexpr size_t kCap = 20000;
  SampleReservoir r(kCap, 12345);
  for (int i = 0; i < kFrames; ++i) r.Add({float(i) / kFrames, float(i)});
  EXPECT_EQ(r.seen(), uint64_t(kFrames));
  ASSERT_EQ(r.kept().size(), kCap);
  std::vector<float> kept;
  double mean = 0;
  size_t late = 0;
  for (const LoadSample& s : r.kept()) {
    kept.push_back(s.latency_ms);
    mean += s.latency_ms / double(kCap);
    late += s.t >= 0.5f;
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_NEAR(mean, kFrames / 2.0, 0.01 * kFrames);
  for (int d = 1; d <= 9; ++d) EXPECT_NEAR(NearestRank(kept, 10.0 * d), 0.1 * d * kFrames, 0.01 * kFrames) << "decile " << d;
  EXPECT_NEAR(double(late), kCap / 2.0, 0.02 * kCap);
}

// Sessions merge at one rate, the lowest of theirs: a session that saw 4 times the frames of
// another (and whose reservoir overflowed) contributes 4 times the samples, so the merged set is
// a uniform sample of all the frames, and the report scales its counts and rates back up and says
// it is a sample. Sessions whose reservoirs hold every frame merge whole, at rate 1.
TEST(SampleReservoir, SessionsMergeAtOneRateAndTheReportScalesItsCountsBack) {
  std::vector<SampleReservoir> whole;
  whole.emplace_back(1000, 1);
  whole.emplace_back(1000, 2);
  for (int i = 0; i < 300; ++i) whole[0].Add({0.1f, 1});
  for (int i = 0; i < 500; ++i) whole[1].Add({0.1f, 2});
  LoadReport exact;
  MergeSamples(whole, exact, 9);
  EXPECT_EQ(exact.samples.size(), 800u);
  EXPECT_EQ(exact.sample_rate, 1);

  std::vector<SampleReservoir> sessions;
  sessions.emplace_back(1000, 1);
  sessions.emplace_back(1000, 2);
  for (int i = 0; i < 40000; ++i) sessions[0].Add({1.9f, 10});  // rate 1000 / 40000
  for (int i = 0; i < 10000; ++i) sessions[1].Add({0.1f, 20});  // rate 1000 / 10000
  LoadReport r;
  r.duration_s = 2;  // 8 windows of 0.25 s
  MergeSamples(sessions, r, 9);
  EXPECT_DOUBLE_EQ(r.sample_rate, 0.025);
  size_t a = 0, b = 0;
  for (const LoadSample& s : r.samples) (s.latency_ms == 10 ? a : b) += 1;
  EXPECT_EQ(a, 1000u);
  EXPECT_EQ(b, 250u);
  const std::string html = LoadReportHtml(r);
  EXPECT_THAT(html, HasSubstr("id=\"sampled\""));
  EXPECT_THAT(html, HasSubstr("2.5 % of the answered frames (1250 of about 50000)"));
  EXPECT_THAT(html, HasSubstr("<tr><td>0.00–0.25</td><td>≈10000</td>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>1.75–2.00</td><td>≈40000</td>"));
  EXPECT_THAT(LoadReportHtml(exact), Not(HasSubstr("id=\"sampled\"")));
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
  // Exact up to kExact samples, bucketed from the next one.
  LatencyStats edge;
  for (size_t i = 0; i < LatencyStats::kExact; ++i) edge.Add(double(i));
  EXPECT_TRUE(edge.exact());
  EXPECT_EQ(edge.Percentile(100), double(LatencyStats::kExact - 1));
  edge.Add(1);
  EXPECT_FALSE(edge.exact());
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
