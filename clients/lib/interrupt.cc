#include "clients/lib/interrupt.h"
#include "core/util/atomic_file.h"

#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace sinew::client {
namespace {

// Never destroyed: the closing thread may still use it while another thread's exit() runs the
// static destructors.
struct Registry {
  std::mutex mu;
  std::condition_variable settled;  // a session being created got its id, or was dropped
  std::map<uint64_t, std::pair<Client*, std::string>> sessions;  // under mu; "": being created
  uint64_t next_key = 0;                                         // under mu
  bool closing = false;  // under mu: the interrupt is closing `sessions` through their clients
};
Registry& Sessions() {
  static Registry* registry = new Registry;
  return *registry;
}

std::atomic<void (*)(int)> first_stop{nullptr};  // StopOnFirstInterrupt

sigset_t Signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

void CloseAllAndExit(int sig) {
  std::vector<std::pair<Client*, std::string>> open;
  {
    // A session being created is waited for (the watchdog in InstallInterruptHandler bounds it).
    Registry& r = Sessions();
    std::unique_lock lock(r.mu);
    r.settled.wait(lock, [&] {
      for (const auto& [key, s] : r.sessions) {
        if (s.second.empty()) return false;
      }
      return true;
    });
    for (const auto& [key, s] : r.sessions) open.push_back(s);
    r.closing = true;
  }
  for (const auto& [client, id] : open) {
    const auto closed = client->CloseSession(id);
    std::fprintf(stderr, "sinew: interrupted (%s); session %s %s\n", sigabbrev_np(sig), id.c_str(),
                 closed.ok() ? "closed" : ("not closed: " + closed.status().ToString()).c_str());
  }
  if (open.empty()) std::fprintf(stderr, "sinew: interrupted (%s)\n", sigabbrev_np(sig));
  RemoveTemporariesInProgress();
  std::fflush(nullptr);
  std::_Exit(128 + sig);
}

}  // namespace

void InstallInterruptHandler(std::chrono::milliseconds close_timeout) {
  ::signal(SIGPIPE, SIG_IGN);
  const sigset_t set = Signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, close_timeout] {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) return;
    if (auto stop = first_stop.load()) {
      std::fprintf(stderr, "sinew: interrupted (%s): finishing; again to exit at once\n", sigabbrev_np(sig));
      stop(sig);
      if (sigwait(&set, &sig) != 0) return;
    }
    std::thread(CloseAllAndExit, sig).detach();
    // A second signal, or a server that does not answer the closes in time: out at once.
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(close_timeout);
    timespec wait{static_cast<time_t>(secs.count()),
                  static_cast<long>(std::chrono::nanoseconds(close_timeout - secs).count())};
    (void)sigtimedwait(&set, nullptr, &wait);
    RemoveTemporariesInProgress();
    std::fflush(nullptr);
    std::_Exit(128 + sig);
  }).detach();
}

void StopOnFirstInterrupt(void (*stop)(int sig)) { first_stop = stop; }

ClosedOnInterrupt::ClosedOnInterrupt(Client& client) : ClosedOnInterrupt(client, std::string()) {}

ClosedOnInterrupt::ClosedOnInterrupt(Client& client, std::string session_id) {
  Registry& r = Sessions();
  std::lock_guard lock(r.mu);
  key_ = r.next_key++;
  r.sessions.emplace(key_, std::make_pair(&client, std::move(session_id)));
}

void ClosedOnInterrupt::Set(std::string session_id) {
  Registry& r = Sessions();
  {
    std::lock_guard lock(r.mu);
    r.sessions.at(key_).second = std::move(session_id);
  }
  r.settled.notify_all();
}

ClosedOnInterrupt::~ClosedOnInterrupt() {
  Registry& r = Sessions();
  {
    std::unique_lock lock(r.mu);
    // Once the interrupt closes the registered sessions it uses their Clients, which live past
    // this registration: the owner goes no further (it would destroy its Client under the
    // closing thread, until 2026-12-03), and the closing thread, or its watchdog, ends the
    // process.
    if (r.closing) r.settled.wait(lock, [] { return false; });
    r.sessions.erase(key_);
  }
  r.settled.notify_all();
}

}  // namespace sinew::client
