#include "clients/export/load_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/atomic_file.h"

namespace sinew::client {
namespace {

constexpr double kW = 900, kH = 280, kL = 64, kR = 24, kT = 28, kB = 44;  // chart box and margins

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

// Round tick positions covering [lo, hi], about n of them.
std::vector<double> Ticks(double lo, double hi, int n) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / n, mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

// 1, 2, 5 × powers of ten within [lo, hi] (a log axis).
std::vector<double> LogTicks(double lo, double hi) {
  std::vector<double> t;
  for (double p = std::pow(10, std::floor(std::log10(lo))); p <= hi * 1.0001; p *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * p >= lo * 0.9999 && m * p <= hi * 1.0001) t.push_back(m * p);
    }
  }
  return t;
}

struct Frame {  // a chart's plot area and scales
  double x0, x1, y0, y1;
  bool log_x = false;
  double X(double v) const {
    const double f = log_x ? (std::log(v) - std::log(x0)) / (std::log(x1) - std::log(x0)) : (v - x0) / (x1 - x0);
    return kL + f * (kW - kL - kR);
  }
  double Y(double v) const { return kH - kB - (v - y0) / (y1 - y0) * (kH - kT - kB); }
};

// Axes, ticks, grid and labels of a chart.
std::string Axes(const Frame& f, const std::vector<double>& xt, const std::vector<double>& yt, const std::string& xlabel,
                 const std::string& ylabel) {
  std::string s;
  for (double y : yt) {
    absl::StrAppendFormat(&s, R"~(<line x1="%g" x2="%g" y1="%.1f" y2="%.1f" class="grid"/><text x="%g" y="%.1f" class="yt">%s</text>)~",
                          kL, kW - kR, f.Y(y), f.Y(y), kL - 6, f.Y(y) + 4, Num(y));
  }
  for (double x : xt) {
    absl::StrAppendFormat(&s, R"~(<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" class="tick"/><text x="%.1f" y="%g" class="xt">%s</text>)~",
                          f.X(x), f.X(x), kH - kB, kH - kB + 5, f.X(x), kH - kB + 18, Num(x));
  }
  absl::StrAppendFormat(&s, R"~(<rect x="%g" y="%g" width="%g" height="%g" class="frame"/>)~", kL, kT, kW - kL - kR, kH - kT - kB);
  absl::StrAppendFormat(&s, R"~(<text x="%g" y="%g" class="xl">%s</text>)~", (kL + kW - kR) / 2, kH - 8, Escape(xlabel));
  absl::StrAppendFormat(&s, R"~(<text x="14" y="%g" class="yl" transform="rotate(-90 14 %g)">%s</text>)~", (kT + kH - kB) / 2,
                        (kT + kH - kB) / 2, Escape(ylabel));
  return s;
}

std::string Legend(const std::vector<std::pair<std::string, std::string>>& items) {  // (class, label)
  std::string s;
  double x = kL + 8;
  for (const auto& [cls, label] : items) {
    absl::StrAppendFormat(&s, R"~(<line x1="%g" x2="%g" y1="16" y2="16" class="%s"/><text x="%g" y="20" class="lg">%s</text>)~", x,
                          x + 18, cls, x + 22, Escape(label));
    x += 34 + 7.0 * label.size();
  }
  return s;
}

}  // namespace

uint64_t SampleReservoir::Next() {
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return rng_;
}

void SampleReservoir::Add(const LoadSample& s) {
  ++seen_;
  if (kept_.size() < cap_) {
    kept_.push_back(s);
    return;
  }
  const uint64_t slot = Next() % seen_;  // uniform in [0, seen): kept with probability cap / seen
  if (slot < cap_) kept_[slot] = s;
}

void MergeSamples(const std::vector<SampleReservoir>& sessions, LoadReport& report, uint64_t seed) {
  double rate = 1;
  for (const SampleReservoir& s : sessions) {
    if (s.seen() > 0) rate = std::min(rate, double(s.kept().size()) / double(s.seen()));
  }
  uint64_t x = seed | 1;
  for (const SampleReservoir& s : sessions) {
    const std::vector<LoadSample>& kept = s.kept();
    const size_t take = rate >= 1 ? kept.size() : std::min(kept.size(), size_t(std::llround(double(s.seen()) * rate)));
    if (take == kept.size()) {
      report.samples.insert(report.samples.end(), kept.begin(), kept.end());
      continue;
    }
    // A random `take` of them: a partial Fisher-Yates shuffle of their indices.
    std::vector<uint32_t> index(kept.size());
    for (size_t i = 0; i < index.size(); ++i) index[i] = uint32_t(i);
    for (size_t i = 0; i < take; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      std::swap(index[i], index[i + x % (index.size() - i)]);
      report.samples.push_back(kept[index[i]]);
    }
  }
  report.sample_rate = rate;
}

double NearestRank(const std::vector<float>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

std::string LoadReportHtml(const LoadReport& r) {
  const double duration = r.duration_s > 0 ? r.duration_s : 1;
  // Frames each sample stands for (LoadReport::sample_rate).
  const bool sampled = r.sample_rate > 0 && r.sample_rate < 1;
  const double per_sample = sampled ? 1 / r.sample_rate : 1;
  std::vector<float> all;
  all.reserve(r.samples.size());
  for (const LoadSample& s : r.samples) all.push_back(s.latency_ms);
  std::sort(all.begin(), all.end());

  // Percentiles in windows of the run (a quarter second, 4 to 120 windows).
  const int windows = std::clamp(int(std::lround(duration / 0.25)), 4, 120);
  const double width = duration / windows;
  std::vector<std::vector<float>> in(windows);
  // The rate by when the answers came (a frame's send time plus its latency; those after the end,
  // within the answer grace, in the last window): until 2026-12-07 it was by scheduled send time,
  // and an overloaded run's frames scheduled late, never sent, showed as the rate falling to 0
  // while the server answered steadily.
  std::vector<double> answered(windows, 0);
  for (const LoadSample& s : r.samples) {
    in[std::clamp(int(s.t / width), 0, windows - 1)].push_back(s.latency_ms);
    answered[std::clamp(int((s.t + s.latency_ms / 1000.0) / width), 0, windows - 1)] += 1;
  }
  const double ps[] = {50, 90, 99, 100};
  std::string paths[4], rate_path, table_rows;
  double ymax = 0, rate_max = 0;
  for (int w = 0; w < windows; ++w) {
    std::sort(in[w].begin(), in[w].end());
    if (!in[w].empty()) ymax = std::max<double>(ymax, in[w].back());
    rate_max = std::max(rate_max, answered[w] * per_sample / width);
  }
  ymax = ymax > 0 ? ymax * 1.05 : 1;
  rate_max = rate_max > 0 ? rate_max * 1.1 : 1;
  const Frame lat{0, duration, 0, ymax}, rate{0, duration, 0, rate_max};
  bool pen[4] = {};
  for (int w = 0; w < windows; ++w) {
    const double x = (w + 0.5) * width;
    absl::StrAppend(&rate_path, w ? "L" : "M", absl::StrFormat("%.1f %.1f", rate.X(x), rate.Y(answered[w] * per_sample / width)));
    std::string row = sampled ? absl::StrFormat("<tr><td>%.2f–%.2f</td><td>≈%.0f</td>", w * width, (w + 1) * width,
                                                in[w].size() * per_sample)
                              : absl::StrFormat("<tr><td>%.2f–%.2f</td><td>%zu</td>", w * width, (w + 1) * width, in[w].size());
    for (int k = 0; k < 4; ++k) {
      if (in[w].empty()) {  // no answer in this window: a gap in the lines
        pen[k] = false;
        continue;
      }
      const double v = NearestRank(in[w], ps[k]);
      absl::StrAppend(&paths[k], pen[k] ? "L" : "M", absl::StrFormat("%.1f %.1f", lat.X(x), lat.Y(v)));
      pen[k] = true;
      absl::StrAppendFormat(&row, "<td>%.3f</td>", v);
    }
    if (in[w].empty()) row += "<td colspan=\"4\">no frame scheduled here was answered</td>";
    table_rows += row + "</tr>\n";
  }
  std::string over_time = Axes(lat, Ticks(0, duration, 10), Ticks(0, ymax, 6), "seconds from the start (frames by their scheduled send time)",
                               "latency ms");
  // The highest percentile first, so a lower one that meets it is drawn over it (with fewer than
  // 100 frames in a window its p99 is its max).
  for (int k = 3; k >= 0; --k) absl::StrAppendFormat(&over_time, R"~(<path d="%s" class="s%d"/>)~", paths[k], k);
  over_time += Legend({{"s0", "p50"}, {"s1", "p90"}, {"s2", "p99"}, {"s3", "max"}});
  std::string rate_svg = Axes(rate, Ticks(0, duration, 10), Ticks(0, rate_max, 5),
                              "seconds from the start (frames by their answer's arrival)", "answered frames/s");
  absl::StrAppendFormat(&rate_svg, R"~(<path d="%s" class="s4"/>)~", rate_path);
  rate_svg += Legend({{"s4", "answered frames/s, all sessions"}});

  // Histogram: 40 bins, logarithmic when the latencies span more than 20×.
  std::string hist;
  constexpr int kBins = 40;
  std::vector<size_t> counts(kBins, 0);
  if (!all.empty()) {
    double lo = std::max(all.front(), 1e-3f), hi = std::max<double>(all.back(), lo * 1.001);
    const bool log_x = hi / lo > 20;
    if (!log_x) lo = 0;
    auto bin = [&](double v) {
      const double f = log_x ? (std::log(std::max(v, lo)) - std::log(lo)) / (std::log(hi) - std::log(lo)) : (v - lo) / (hi - lo);
      return std::clamp(int(f * kBins), 0, kBins - 1);
    };
    for (float v : all) ++counts[bin(v)];
    const size_t peak = *std::max_element(counts.begin(), counts.end());
    Frame h{lo, hi, 0, peak * 1.1};
    h.log_x = log_x;
    hist = Axes(h, log_x ? LogTicks(lo, hi) : Ticks(lo, hi, 10), Ticks(0, peak * 1.1, 5),
                log_x ? "latency ms (logarithmic)" : "latency ms", sampled ? "frames in the sample" : "frames");
    for (int b = 0; b < kBins; ++b) {
      const double e0 = log_x ? lo * std::pow(hi / lo, double(b) / kBins) : lo + (hi - lo) * b / kBins;
      const double e1 = log_x ? lo * std::pow(hi / lo, double(b + 1) / kBins) : lo + (hi - lo) * (b + 1) / kBins;
      if (counts[b] == 0) continue;
      absl::StrAppendFormat(&hist, R"~(<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" class="bar"><title>%s–%s ms: %zu frames</title></rect>)~",
                            h.X(e0) + 0.5, h.Y(counts[b]), std::max(0.5, h.X(e1) - h.X(e0) - 1), h.Y(0) - h.Y(counts[b]), Num(e0), Num(e1),
                            counts[b]);
    }
    for (auto [p, cls] : {std::pair<double, const char*>{50, "s0"}, {99, "s2"}}) {
      const double v = NearestRank(all, p), x = h.X(std::max(v, lo));
      absl::StrAppendFormat(&hist, R"~(<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" class="%s dash"/><text x="%.1f" y="%g" class="lg">p%g %.3f</text>)~",
                            x, x, kT, kH - kB, cls, x + 4, kT + 12 + (p > 50 ? 14 : 0), p, v);
    }
  }

  std::string figures;
  for (const auto& [k, v] : r.figures) absl::StrAppendFormat(&figures, "<tr><td>%s</td><td>%s</td></tr>\n", Escape(k), Escape(v));
  const std::string svg_open = absl::StrFormat(R"~(viewBox="0 0 %g %g" width="%g" height="%g" role="img")~", kW, kH, kW, kH);
  return absl::StrCat(
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sinew-load report</title>\n<style>\n"
      "body{font:14px/1.45 sans-serif;margin:24px;color:#222;max-width:960px}h1{font-size:20px}h2{font-size:16px;margin-top:28px}\n"
      "table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #e4e4e4}td:first-child,th:first-child{text-align:left}\n"
      "svg{display:block;margin:8px 0;background:#fbfbfb}.grid{stroke:#e6e6e6}.tick{stroke:#888}.frame{fill:none;stroke:#888}\n"
      ".xt{font-size:11px;text-anchor:middle;fill:#555}.yt{font-size:11px;text-anchor:end;fill:#555}.xl,.yl{font-size:12px;text-anchor:middle;fill:#333}\n"
      ".lg{font-size:12px;fill:#333}path{fill:none;stroke-width:1.8}.s0{stroke:#2b7bb9}.s1{stroke:#3a9e58}.s2{stroke:#e08a1e}.s3{stroke:#c8373b}.s4{stroke:#6a4fb3}\n"
      ".bar{fill:#7fa6c8}.dash{stroke-dasharray:5 4;stroke-width:1.5}details{margin-top:8px}\n"
      "</style></head><body>\n<h1>sinew-load report</h1>\n<p>", Escape(r.title), "</p>\n",
      "<h2>Figures</h2>\n<table id=\"figures\">\n", figures, "</table>\n",
      sampled ? absl::StrFormat("<p id=\"sampled\">The figures above count every frame. The charts and the windows' table are from "
                                "a uniform random sample of %.3g %% of the answered frames (%zu of about %.0f), kept so that a "
                                "long run's report takes bounded memory; their frame counts and rates are the sample's, scaled "
                                "up.</p>\n",
                                100 * r.sample_rate, all.size(), all.size() * per_sample)
              : std::string(),
      absl::StrFormat("<h2>Latency over time</h2>\n<p>Percentiles of the frames scheduled in each %.3g s window "
                      "(nearest rank, as the figures above), measured from each frame's scheduled send time.</p>\n", width),
      absl::StrFormat("<svg id=\"over-time\" data-windows=\"%d\" %s>", windows, svg_open), over_time, "</svg>\n",
      "<svg id=\"rate\" ", svg_open, ">", rate_svg, "</svg>\n",
      "<h2>Latency histogram</h2>\n",
      absl::StrFormat("<svg id=\"histogram\" data-samples=\"%zu\" %s>", all.size(), svg_open), hist, "</svg>\n",
      "<details><summary>Windows as a table</summary>\n<table id=\"windows\"><tr><th>seconds</th><th>frames</th><th>p50 ms</th><th>p90 ms</th>"
      "<th>p99 ms</th><th>max ms</th></tr>\n", table_rows, "</table></details>\n</body></html>\n");
}

absl::Status WriteLoadReport(const std::string& path, const LoadReport& report) {
  return WriteFileAtomically(path, LoadReportHtml(report));
}

}  // namespace sinew::client
