// SINEW_FUZZ_VERBOSE=1 in the environment: the fuzz targets print what each input came to
// (which check refused it, or that it was accepted), to see what a corpus file exercises.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"

namespace sinew::fuzz {

inline void Say(const char* stage, const absl::Status& st) {
  static const bool verbose = std::getenv("SINEW_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s: %s\n", stage, st.ok() ? "accepted" : std::string(st.ToString()).c_str());
}

}  // namespace sinew::fuzz
