// Interrupted command-line clients close the sessions they opened. Without this, Ctrl-C during
// `sinew play` or `sinew batch` (whose README story is "interrupt and resume") left the session
// open on the server until its idle TTL: counted against --max-sessions and the tenant's
// max_sessions, a --state-dir record kept across restarts, its rig undeletable meanwhile.
//
// InstallInterruptHandler() blocks SIGINT, SIGTERM and SIGHUP in the calling thread, so call it
// first in main, before a Client starts gRPC's threads (they inherit the mask), and starts one
// thread that waits for them. On the first signal every session registered (ClosedOnInterrupt)
// is closed through its client, at most `close_timeout` in all, the process says so on stderr
// and exits with 128 + the signal's number. A second signal, or the timeout, exits at once.
// Output files are as the interrupted code left them, less the temporaries of writes in progress
// (RemoveTemporariesInProgress): the batch's point cache is written frame before count, and a
// resume repairs a partial tail. SIGKILL cannot be caught: only the idle TTL
// (or a stream's close_with_stream) ends sessions then. It also ignores SIGPIPE: a write to a
// closed pipe (`sinew play --json | head -1`) fails with EPIPE, which the program reports and
// exits 1 on, closing its sessions, instead of dying of the signal with them open.
#pragma once

#include <chrono>
#include <string>

#include "clients/lib/client.h"

namespace sinew::client {

void InstallInterruptHandler(std::chrono::milliseconds close_timeout = std::chrono::seconds(5));

// For a program that would rather finish than die at the first signal (sinew-load: the report
// of a long run is what the run was for): `stop` is called with the signal, on the signal
// thread, and the program goes on to finish by itself (closing its sessions). A second signal
// then closes the registered sessions and exits as above. Set it right after
// InstallInterruptHandler, before anything worth stopping starts.
void StopOnFirstInterrupt(void (*stop)(int sig));

// Registers a session for closing on interrupt for as long as it lives (the scope that opened
// the session; its normal exits close the session themselves).
// Construct it before the CreateSession call and Set the id once it returns: an interrupt that
// comes between (the server has made the session, the client has not yet heard) waits for Set
// or this object's end, within the close timeout, and closes that session too. Until 2026-12-02
// the session was registered after the call, and a Ctrl-C in that window left it open.
class ClosedOnInterrupt {
 public:
  explicit ClosedOnInterrupt(Client& client);  // a session being created (Set names it)
  ClosedOnInterrupt(Client& client, std::string session_id);
  void Set(std::string session_id);
  ~ClosedOnInterrupt();
  ClosedOnInterrupt(const ClosedOnInterrupt&) = delete;
  ClosedOnInterrupt& operator=(const ClosedOnInterrupt&) = delete;

 private:
  uint64_t key_;
};

}  // namespace sinew::client
