// Tasks run once their delay has passed, on one thread of their own: what a call that must wait
// (a batch paced by its tenant's frame quota) uses instead of holding a worker asleep. A task can
// be run at once (Expedite: the call is cancelled or the server drains); the destructor runs
// whatever is still pending at once, then joins.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace sinew::server {

class DelayQueue {
 public:
  using Clock = std::chrono::steady_clock;

  DelayQueue() : thread_([this] { Loop(); }) {}
  ~DelayQueue() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  DelayQueue(const DelayQueue&) = delete;
  DelayQueue& operator=(const DelayQueue&) = delete;

  // Runs `task` after `delay` (never on the calling thread); the id names it for Expedite.
  uint64_t After(Clock::duration delay, std::function<void()> task) {
    std::lock_guard lock(mu_);
    const uint64_t id = ++next_id_;
    tasks_.emplace(std::pair{Clock::now() + delay, id}, std::move(task));
    cv_.notify_all();
    return id;
  }

  // Runs task `id` now (on the queue's thread) if it has not run yet.
  void Expedite(uint64_t id) {
    std::lock_guard lock(mu_);
    for (auto it = tasks_.begin(); it != tasks_.end(); ++it) {
      if (it->first.second != id) continue;
      auto task = std::move(it->second);
      tasks_.erase(it);
      tasks_.emplace(std::pair{Clock::time_point::min(), id}, std::move(task));
      cv_.notify_all();
      return;
    }
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      if (tasks_.empty()) {
        if (stop_) return;
        cv_.wait(lock);
        continue;
      }
      auto first = tasks_.begin();
      if (!stop_ && first->first.first > Clock::now()) {
        cv_.wait_until(lock, first->first.first);
        continue;
      }
      std::function<void()> task = std::move(first->second);
      tasks_.erase(first);
      lock.unlock();  // a task may take its caller's locks, and those may call After or Expedite
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<Clock::time_point, uint64_t>, std::function<void()>> tasks_;  // by due time, then id
  uint64_t next_id_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members it reads exist
};

}  // namespace sinew::server
