// sinew-load's HTML report (clients/export/load_report.h) on samples made here: the windows'
// percentiles, the histogram's count, escaping, and no script or external reference.
#include "clients/export/load_report.h"

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
