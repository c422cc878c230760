#include "core/parallel/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace sinew {
namespace {
// The pool whose worker the calling thread is (null for other threads).
thread_local const ThreadPool* tls_worker_of = nullptr;

// Spins while busy() holds, for at most kSpin, pausing between looks: long enough to cover
// the gap between two passes of a solve, short enough that an idle pool costs little. Returns
// whether busy() ended within it.
constexpr auto kSpin = std::chrono::microseconds(50);
template <class Busy>
bool SpinWhile(Busy&& busy) {
  if (!busy()) return true;
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (uint32_t k = 1; busy(); ++k) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (k % 32 == 0 && std::chrono::steady_clock::now() >= deadline) return false;
  }
  return true;
}
}  // namespace

struct ThreadPool::Job {
  ThreadPool* pool;
  ChunkFn fn;
  void* ctx;
  size_t n;
  size_t grain;
  size_t chunks;
  std::atomic<size_t> next{0};
  // Helper tasks submitted and not finished; changed under pool->mu_, read without it only by
  // the owner's spin before it waits (ParallelForImpl).
  std::atomic<size_t> outstanding{0};
};

ThreadPool::ThreadPool(size_t workers) {
  ring_.resize(64);
  threads_.reserve(workers);
  for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    stopping_.store(true, std::memory_order_relaxed);
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

size_t ThreadPool::queued() const {
  std::lock_guard lock(mu_);
  return count_;
}

void ThreadPool::PushLocked(Task t) {
  if (count_ == ring_.size()) {
    std::vector<Task> bigger(ring_.size() * 2);
    for (size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) % ring_.size()];
    ring_.swap(bigger);
    head_ = 0;
  }
  ring_[(head_ + count_) % ring_.size()] = t;
  ++count_;
  queued_.store(count_, std::memory_order_relaxed);
}

void ThreadPool::Submit(TaskFn fn, void* arg) {
  if (threads_.empty()) {
    fn(arg);
    return;
  }
  {
    std::lock_guard lock(mu_);
    PushLocked({fn, arg});
  }
  work_cv_.notify_one();
}

void ThreadPool::WorkerLoop() {
  tls_worker_of = this;
  // Whether this worker's last wait for a task was short: only then does it spin before the next
  // one. A worker that runs out of tasks looks for the next one for a moment before it sleeps:
  // the passes of an iterative solve (the elastic relaxation's conjugate gradient: three
  // ParallelFors of some 20 µs each per iteration) follow one another closer than a sleeping
  // thread wakes, and the caller did most chunks alone. Where tasks come farther apart (a
  // server's frames), a spin that found nothing would only take the core from the threads that
  // make the next task; so after one such miss the worker sleeps at once, until a wait shows
  // tasks coming close together again.
  bool spin = true;
  for (;;) {
    Task t;
    const auto idle = [&] { return queued_.load(std::memory_order_relaxed) == 0 && !stopping_.load(std::memory_order_relaxed); };
    if (spin) spin = SpinWhile(idle);
    {
      std::unique_lock lock(mu_);
      if (!stop_ && count_ == 0) {
        const auto slept = std::chrono::steady_clock::now();
        work_cv_.wait(lock, [&] { return stop_ || count_ > 0; });
        spin = std::chrono::steady_clock::now() - slept < kSpin;
      }
      if (count_ == 0) return;  // stop_ and drained
      t = ring_[head_];
      head_ = (head_ + 1) % ring_.size();
      --count_;
      queued_.store(count_, std::memory_order_relaxed);
    }
    t.fn(t.arg);
  }
}

void ThreadPool::RunChunks(Job& job) {
  for (size_t c; (c = job.next.fetch_add(1, std::memory_order_relaxed)) < job.chunks;) {
    const size_t b = c * job.grain;
    job.fn(job.ctx, b, std::min(job.n, b + job.grain));
  }
}

void ThreadPool::HelperTask(void* arg) {
  Job& job = *static_cast<Job*>(arg);
  RunChunks(job);
  ThreadPool* pool = job.pool;
  std::lock_guard lock(pool->mu_);
  // After this decrement the owner may return and destroy `job`; touch nothing of it after.
  --job.outstanding;
  pool->done_cv_.notify_all();
}

void ThreadPool::ParallelForImpl(size_t n, size_t grain, ChunkFn fn, void* ctx) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  size_t chunks = (n + grain - 1) / grain;
  // Inline when there is one chunk, no worker, or work already queued: then every worker is
  // busy, helpers would only queue behind it and be withdrawn, and the caller does it all anyway.
  if (chunks == 1 || threads_.empty() || queued_.load(std::memory_order_relaxed) > 0) {
    fn(ctx, 0, n);
    return;
  }
  // Equal chunks, never longer than `grain`, as many as a multiple of the thread count, so that
  // no thread is left with a remainder (10k vertices at grain 8192 on 2 threads: two chunks of
  // 5000, not 8192 + 1808; 100k: 14 of 7143, not 12 of 8192 + 1696).
  // The threads that can work on it: the workers, plus the caller unless it is one of them.
  const size_t participants = threads_.size() + (tls_worker_of == this ? 0 : 1);
  chunks = std::min(n, (chunks + participants - 1) / participants * participants);
  grain = (n + chunks - 1) / chunks;
  chunks = (n + grain - 1) / grain;
  Job job{this, fn, ctx, n, grain, chunks};
  SubmitHelpers(&HelperTask, &job, std::min(threads_.size(), chunks - 1), job.outstanding);
  RunChunks(job);

  WithdrawAndWait(&HelperTask, &job, job.outstanding);
}

void ThreadPool::SubmitHelpers(TaskFn fn, void* arg, size_t helpers, std::atomic<size_t>& outstanding) {
  {
    std::lock_guard lock(mu_);
    outstanding = helpers;
    for (size_t i = 0; i < helpers; ++i) PushLocked({fn, arg});
  }
  if (helpers == 1) work_cv_.notify_one();
  else work_cv_.notify_all();
}

void ThreadPool::WithdrawAndWait(TaskFn fn, void* arg, std::atomic<size_t>& outstanding) {
  std::unique_lock lock(mu_);
  // Withdraw helpers that never started: all chunks are claimed, so they have nothing to do,
  // and waiting for them could deadlock when every worker is itself inside a ParallelFor.
  if (outstanding > 0 && count_ > 0) {
    size_t kept = 0;
    for (size_t i = 0; i < count_; ++i) {
      const Task t = ring_[(head_ + i) % ring_.size()];
      if (t.fn == fn && t.arg == arg) {
        --outstanding;
      } else {
        ring_[(head_ + kept++) % ring_.size()] = t;
      }
    }
    count_ = kept;
    queued_.store(count_, std::memory_order_relaxed);
  }
  if (outstanding > 0) {  // helpers still running their chunks: short ones end in a moment
    lock.unlock();
    SpinWhile([&] { return outstanding.load(std::memory_order_acquire) > 0; });
    lock.lock();
  }
  done_cv_.wait(lock, [&] { return outstanding == 0; });
}

struct ThreadPool::PassJob {
  ThreadPool* pool;
  PassFn fn;
  void* ctx;
  std::span<const size_t> sizes;
  const size_t* start;  // chunks before pass p: start[p]; start[passes] = every chunk
  const size_t* grain;  // per pass
  size_t total;
  std::atomic<size_t> next{0};   // chunks taken
  std::atomic<size_t> ended{0};  // chunks ended: all of pass p's have when ended ≥ start[p + 1]
  std::atomic<size_t> outstanding{0};
};

void ThreadPool::RunPasses(PassJob& job) {
  size_t p = 0;
  for (size_t g; (g = job.next.fetch_add(1, std::memory_order_relaxed)) < job.total;) {
    while (job.start[p + 1] <= g) ++p;  // chunks are taken in pass order
    // Every chunk of the earlier passes has been taken (this one came after them) by a thread
    // that runs it or waits, in turn, for chunks earlier still; the earliest unfinished chunk
    // waits for nothing, so they all end. No chunk of pass p or later can end before them, so the
    // count of ended chunks says exactly when.
    const size_t before = job.start[p];
    if (job.ended.load(std::memory_order_acquire) < before) {
      for (uint32_t k = 1; job.ended.load(std::memory_order_acquire) < before; ++k) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (k % 4096 == 0) std::this_thread::yield();  // the thread we wait for may have lost its core
      }
    }
    const size_t b = (g - before) * job.grain[p];
    job.fn(job.ctx, p, b, std::min(job.sizes[p], b + job.grain[p]));
    job.ended.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::PassHelperTask(void* arg) {
  PassJob& job = *static_cast<PassJob*>(arg);
  RunPasses(job);
  ThreadPool* pool = job.pool;
  std::lock_guard lock(pool->mu_);
  --job.outstanding;  // the owner may return and destroy `job` after this
  pool->done_cv_.notify_all();
}

void ThreadPool::ParallelPassesImpl(std::span<const size_t> sizes, size_t grain, std::vector<size_t>& scratch,
                                    PassFn fn, void* ctx) {
  const size_t passes = sizes.size();
  auto inline_passes = [&] {
    for (size_t p = 0; p < passes; ++p) {
      if (sizes[p] > 0) fn(ctx, p, 0, sizes[p]);
    }
  };
  // Inline, pass by pass, when there is no worker or work is already queued (every worker busy).
  if (threads_.empty() || queued_.load(std::memory_order_relaxed) > 0) return inline_passes();
  // Per pass as ParallelFor chunks it: at most `grain` long, as many as a multiple of the threads.
  const size_t participants = threads_.size() + (tls_worker_of == this ? 0 : 1);
  grain = std::max<size_t>(grain, 1);
  scratch.resize(2 * passes + 1);
  size_t* start = scratch.data();
  size_t* grains = start + passes + 1;
  start[0] = 0;
  size_t widest = 0;
  for (size_t p = 0; p < passes; ++p) {
    const size_t n = sizes[p];
    size_t chunks = 0, g = 1;
    if (n > 0) {
      chunks = std::min(n, ((n + grain - 1) / grain + participants - 1) / participants * participants);
      g = (n + chunks - 1) / chunks;
      chunks = (n + g - 1) / g;
    }
    grains[p] = g;
    start[p + 1] = start[p] + chunks;
    widest = std::max(widest, chunks);
  }
  if (widest <= 1) return inline_passes();  // no pass to share
  PassJob job{this, fn, ctx, sizes, start, grains, start[passes]};
  SubmitHelpers(&PassHelperTask, &job, std::min(threads_.size(), widest - 1), job.outstanding);
  RunPasses(job);
  WithdrawAndWait(&PassHelperTask, &job, job.outstanding);
  // Helpers that ended have run their last chunk; the count of ended chunks is then complete.
}

}  // namespace sinew
