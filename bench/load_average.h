// The machine's 1-minute load average printed when a benchmark starts and when it ends, so that
// every figure it prints comes with the load it was measured under (the development VMs are
// shared). Declared first in main: "load average before" on stdout at once, "after" at the
// end of main's scope.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace sinew::bench {

class LoadAverageReport {
 public:
  LoadAverageReport() { Print("before"); }
  ~LoadAverageReport() { Print("after"); }
  LoadAverageReport(const LoadAverageReport&) = delete;
  LoadAverageReport& operator=(const LoadAverageReport&) = delete;

 private:
  static void Print(const char* when) {
    double load[3];
    if (getloadavg(load, 3) >= 1) std::printf("load average %s: %.2f\n", when, load[0]);
    std::fflush(stdout);
  }
};

}  // namespace sinew::bench
