// The server's time for idle timeouts and the times the API shows (server/service.cc).
#pragma once

#include <cstdint>

namespace sinew::server {

int64_t NowMs();  // Unix milliseconds by a steady clock (anchored to the wall clock at first use)

}  // namespace sinew::server
