// The rig store's holds (server/rig_store.h), on its own: what a tenant sees of a rig an upload is
// still keeping in --state-dir.

#include "server/rig_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/deformer/skeletal.h"
#include "core/swingtwist/method.h"
#include "gpu/backend.h"
#include "server/cache_folder.h"
#include "tests/core/test_util.h"

namespace sinew::server {
namespace {

namespace fs = std::filesystem;

std::string MakeTempFolder() {
  std::string pattern = ::testing::TempDir() + "/sinew-cache-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
  return pattern;
}

void WriteBytes(const std::string& path, size_t n) { std::ofstream(path, std::ios::binary) << std::string(n, 'x'); }

// Set, not waited for: file times written a moment apart can be equal (the kernel's coarse clock).
void SetAge(const std::string& path, int seconds_ago) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::seconds(seconds_ago));
}

// The swing-twist method at the spec's voxel size for the small limb (the default takes seconds).
DeformerConfig SwingTwistConfig() {
  DeformerConfig config("swing-twist");
  auto params = std::make_shared<SwingTwistParams>();
  params->voxel_size = 0.25;
  config.params = params;
  return config;
}

// The paths of the files in `dir`'s prepared/ folder.
std::vector<std::string> Prepared(const std::string& dir) {
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(dir + "/prepared")) paths.push_back(e.path().string());
  return paths;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// --max-cache-bytes: the oldest files of the kind go first, until the rest fit; the file just
// written stays whatever its age; temporaries and other files are neither counted nor removed.
TEST(CacheFolder, TrimRemovesTheLeastRecentlyUsedUntilTheRestFit) {
  const std::string dir = MakeTempFolder();
  for (auto [name, age] : {std::pair{"a.bin", 40}, {"b.bin", 30}, {"c.bin", 20}, {"d.bin", 10}, {"new.bin", 50}}) {
    WriteBytes(dir + "/" + name, 100);
    SetAge(dir + "/" + name, age);
  }
  WriteBytes(dir + "/old.bin.tmp.Ab3xYz", 1000);  // a writer's temporary
  WriteBytes(dir + "/notes.txt", 1000);
  SetAge(dir + "/old.bin.tmp.Ab3xYz", 60);
  const TrimResult r = TrimFolder(dir, ".bin", 250, dir + "/new.bin");
  EXPECT_EQ(r.removed, 3);
  EXPECT_EQ(r.removed_bytes, 300u);
  EXPECT_EQ(r.kept_bytes, 200u);
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"d.bin", "new.bin", "notes.txt", "old.bin.tmp.Ab3xYz"}));
  // Under the budget, or no budget: nothing goes; a folder that is not there is no error.
  EXPECT_EQ(TrimFolder(dir, ".bin", 200, "").removed, 0);
  EXPECT_EQ(TrimFolder(dir, ".bin", 0, "").removed, 0);
  EXPECT_EQ(TrimFolder(dir + "/missing", ".bin", 1, "").removed, 0);
  fs::remove_all(dir);
}

// Through the store, as the server prepares: each rig's swing-twist weights written to the cache
// folder, the folder kept to its budget, a rig read back from the cache counted as used (until
// 2026-12-07 the folder only grew, a file per rig and parameter set, for good).
TEST(CacheFolder, PreparationsKeepTheFolderUnderItsBudgetLeastRecentlyUsedFirst) {
  const Rig limb = testing::SmallLimb();
  const MethodInfo& method = *FindMethod("swing-twist");
  const DeformerConfig config = SwingTwistConfig();
  const std::string dir = MakeTempFolder();
  const auto shared = std::make_shared<const Rig>(limb);
  auto prepare = [&](const std::string& id, uint64_t max_bytes) {
    StoredRig fresh;  // no preparation in memory: the cache is asked
    fresh.id = id;
    fresh.rig = shared;
    auto p = fresh.GetOrPrepare(method, config, nullptr, 1, CacheFolder{dir, max_bytes});
    EXPECT_TRUE(p.ok()) << p.status();
    return Prepared(dir);
  };
  const std::vector<std::string> first = prepare("rig-a", 0);
  ASSERT_EQ(first.size(), 1u);
  const uint64_t one = fs::file_size(first[0]);
  const uint64_t budget = 2 * one + one / 2;  // room for two
  EXPECT_EQ(prepare("rig-b", budget).size(), 2u);
  for (const auto& e : fs::directory_iterator(dir + "/prepared")) {
    SetAge(e.path().string(), e.path().string() == first[0] ? 20 : 10);  // rig-a the older
  }
  prepare("rig-a", budget);  // read from the cache: used now, rig-b the least recently used
  const std::vector<std::string> after = prepare("rig-c", budget);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(std::count_if(after.begin(), after.end(), [](const std::string& p) { return p.find("rig-b") != std::string::npos; }), 0)
      << "the least recently used file should have gone";
  EXPECT_EQ(std::count_if(after.begin(), after.end(), [&](const std::string& p) { return p == first[0]; }), 1);
  // A preparation larger than the whole budget is not written (and nothing else removed for it).
  EXPECT_EQ(prepare("rig-d", one / 2).size(), 2u);
  fs::remove_all(dir);
}

// A preparation used from memory marks its cache file used, at most hourly: a rig in use for
// days kept the time its file was written, and the trim took it first (until 2026-12-07).
TEST(CacheFolder, APreparationUsedFromMemoryKeepsItsFileRecent) {
  const MethodInfo& method = *FindMethod("swing-twist");
  const DeformerConfig config = SwingTwistConfig();
  const std::string dir = MakeTempFolder();
  StoredRig stored;
  stored.id = "rig-hot";
  stored.rig = std::make_shared<const Rig>(testing::SmallLimb());
  const CacheFolder cache{dir, 0};
  ASSERT_TRUE(stored.GetOrPrepare(method, config, nullptr, 1000, cache).ok());
  const std::vector<std::string> files = Prepared(dir);
  ASSERT_EQ(files.size(), 1u);
  const auto age = [&] { return fs::file_time_type::clock::now() - fs::last_write_time(files[0]); };
  SetAge(files[0], 7200);
  ASSERT_TRUE(stored.GetOrPrepare(method, config, nullptr, 1000 + 60'000, cache).ok());  // a minute on
  EXPECT_GT(age(), std::chrono::seconds(3600)) << "marked within the hour";
  ASSERT_TRUE(stored.GetOrPrepare(method, config, nullptr, 1000 + 3'600'000, cache).ok());  // an hour on
  EXPECT_LT(age(), std::chrono::seconds(3600)) << "not marked used";
  fs::remove_all(dir);
}

// A rig whose device copy sits on a device a sticky error broke is uploaded again, to a usable
// device, while the broken copy's sessions still hold it: until 2026-12-07 OnGpu returned the
// broken copy for as long as any session held it, and every GPU session reopened on the rig was
// refused (BACKEND_AUTO: the CPU beside an idle GPU). (Emulated: a device's second launch fails
// as CUDA's illegal address would.)
TEST(RigStoreGpu, ARigOnABrokenDeviceIsUploadedAgainToAUsableOne) {
  gpu::GpuOptions options;
  options.emulate_devices = 2;
  options.emulate_broken_after_launches = 1;
  auto backend = gpu::GpuBackend::Create(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  StoredRig stored;
  stored.id = "r";
  stored.rig = std::make_shared<const Rig>(testing::SmallLimb());
  auto first = stored.OnGpu(**backend);
  ASSERT_TRUE(first.ok()) << first.status();
  auto session = (*backend)->CreateSession(*first, gpu::GpuMethod::kLbs);
  ASSERT_TRUE(session.ok()) << session.status();
  const Rig& rig = *stored.rig;
  const Pose pose = RestPose(rig.skeleton);
  std::vector<Similarity> world(rig.joint_count());
  std::vector<Affine34d> transforms(rig.joint_count());
  std::vector<float> joints(12 * rig.joint_count()), out(rig.positions.size());
  ASSERT_TRUE(SkeletalJointData(rig, JointData::kMatrix, {&pose, {}}, world, transforms, joints).ok());
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    absl::Status status;
    static void Call(void* c, const absl::Status& st) {
      auto* d = static_cast<Done*>(c);
      std::lock_guard lock(d->mu);
      d->status = st;
      d->done = true;
      d->cv.notify_all();
    }
  };
  for (int k = 0; k < 2; ++k) {  // the second launch breaks the device
    Done done;
    (*backend)->Submit(**session, joints, out.data(), gpu::OutputFormat::kFloat32, &Done::Call, &done);
    std::unique_lock lock(done.mu);
    done.cv.wait(lock, [&] { return done.done; });
  }
  const int broken = (*first)->device();
  ASSERT_FALSE((*backend)->DeviceFailed(broken).empty());
  auto again = stored.OnGpu(**backend);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE((*again)->device(), broken);
  EXPECT_TRUE((*backend)->CreateSession(*again, gpu::GpuMethod::kLbs).ok());
}

// An upload's hold is the tenant's only once kept (RigStore::Saved): until then GetRig, CreateSession,
// ListRigs and DeleteRig (Find, Acquire, List, Delete) do not see it, it counts in the tenant's
// quota (List with unsaved), and no other upload's room evicts it; an upload that cannot keep it
// lets go of its own unsaved hold only. Until 2026-12-07 the rig was seen from its insertion, so a
// crash while its files were written lost a rig GetRig had answered for (the Python client takes
// that answer as "uploaded").
// A preparation that waits for the test's word, stopping when asked to (its progress answers
// false), then prepares swing-twist.
std::atomic<bool> gate_entered{false}, gate_open{false};
absl::StatusOr<std::shared_ptr<const sinew::Prepared>> GatedPrepare(const Rig& rig, const DeformerConfig& config,
                                                             ThreadPool* pool, const ProgressFn& progress) {
  gate_entered = true;
  while (!gate_open) {
    if (!progress(0)) return absl::CancelledError("stopped at the gate");
    std::this_thread::yield();
  }
  return FindMethod("swing-twist")->prepare(rig, config, pool, progress);
}

MethodInfo GatedSwingTwist() {
  MethodInfo m = *FindMethod("swing-twist");
  m.prepare = &GatedPrepare;
  return m;
}

// A session asks again for a preparation that CancelPreparation stopped but that has not ended:
// the request starts it again. Until 2026-12-07 it found the key listed and started no task; the
// stopped run then left the list, and the session served its fallback for good.
TEST(RigStore, ARunningPreparationCancelledThenAskedForAgainIsStartedAgain) {
  StoredRig stored;
  stored.id = "rig";
  stored.rig = std::make_shared<const Rig>(testing::SmallLimb());
  const MethodInfo method = GatedSwingTwist();
  const DeformerConfig config = SwingTwistConfig();
  const std::string key = PreparationKey(method, config);
  gate_entered = false;
  gate_open = false;
  ASSERT_TRUE(stored.Reserve(key, 1, "t"));
  absl::Status first;
  std::thread task([&] { first = stored.GetOrPrepare(method, config, nullptr, 1).status(); });
  while (!gate_entered) std::this_thread::yield();
  // Not ASSERT while the task runs: a failure must still let it end and be joined.
  const absl::Status cancelled = stored.CancelPreparation(key, "t", [](const Preparation&) {});
  EXPECT_TRUE(cancelled.ok()) << cancelled;
  if (!cancelled.ok()) gate_open = true;
  EXPECT_FALSE(stored.Listed(key)) << "a new request needs a task";
  EXPECT_TRUE(stored.Reserve(key, 2, "t")) << "the request must start a task";
  task.join();
  EXPECT_EQ(first.code(), absl::StatusCode::kCancelled) << first;
  EXPECT_TRUE(stored.Listed(key)) << "the stopped run must leave the new entry listed";
  EXPECT_EQ(*stored.PreparedIfDone(key), nullptr);
  gate_open = true;
  const auto second = stored.GetOrPrepare(method, config, nullptr, 3);  // the new task
  ASSERT_TRUE(second.ok()) << second.status();
  const auto done = stored.PreparedIfDone(key);
  ASSERT_TRUE(done.ok());
  EXPECT_NE(*done, nullptr);
}

// The same for one cancelled before it started: asked for again, its task runs it after all.
// After CancelAll (the server stopping) nothing is started again.
TEST(RigStore, AQueuedPreparationCancelledThenAskedForAgainRuns) {
  StoredRig stored;
  stored.id = "rig";
  stored.rig = std::make_shared<const Rig>(testing::SmallLimb());
  const MethodInfo& method = *FindMethod("swing-twist");
  const DeformerConfig config = SwingTwistConfig();
  const std::string key = PreparationKey(method, config);
  ASSERT_TRUE(stored.Reserve(key, 1, "t"));
  ASSERT_TRUE(stored.CancelPreparation(key, "t", [](const Preparation&) {}).ok());
  EXPECT_TRUE(stored.Listed(key));
  EXPECT_FALSE(stored.Reserve(key, 2, "t")) << "its queued task is enough";
  const auto p = stored.GetOrPrepare(method, config, nullptr, 3);  // the queued task
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE(*stored.PreparedIfDone(key), nullptr);

  StoredRig stopping;
  stopping.id = "rig2";
  stopping.rig = stored.rig;
  ASSERT_TRUE(stopping.Reserve(key, 1, "t"));
  stopping.CancelAll();
  EXPECT_FALSE(stopping.Reserve(key, 2, "t"));
  EXPECT_EQ(stopping.GetOrPrepare(method, config, nullptr, 3).status().code(), absl::StatusCode::kCancelled);
}

TEST(RigStore, AnUploadsHoldIsUnseenUntilKept) {
  const Rig limb = testing::SmallLimb();
  const size_t bytes = limb.ResidentBytes();
  RigStore store(bytes + bytes / 2);  // room for one
  std::vector<std::string> evicted;
  auto stored = store.Insert("a", limb, 1, "t", &evicted);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(store.Find("a", 2, "t"), nullptr);
  EXPECT_FALSE(store.Acquire("a", 2, "t"));
  EXPECT_TRUE(store.List("t").empty());
  EXPECT_EQ(store.List("t", /*unsaved=*/true).size(), 1u);
  EXPECT_EQ(store.Delete("a", "t").code(), absl::StatusCode::kNotFound);
  // Another upload of the same bytes by the tenant: not had (it keeps the rig too).
  bool had = true;
  ASSERT_NE(store.Adopt("a", 2, "t", &had), nullptr);
  EXPECT_FALSE(had);
  EXPECT_TRUE(store.Holds("a", "t"));  // in its quota already
  // That second upload fails to keep it: the first's hold stays (until the review of 2026-12-07
  // one flag served both, and the second's failure dropped the rig the first then answered for).
  store.ReleaseUnsaved("a", "t");
  EXPECT_EQ(store.Tenants("a"), (std::vector<std::string>{"t"}));
  EXPECT_EQ(store.Find("a", 2, "t"), nullptr);
  // Not evicted for another rig while unsaved, though no session uses it.
  const auto full = store.Insert("b", limb, 3, "t", &evicted);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  EXPECT_TRUE(evicted.empty());
  // Another tenant adopts it; that upload fails to keep it: its hold goes, the first stays.
  ASSERT_NE(store.Adopt("a", 4, "u", &had), nullptr);
  EXPECT_FALSE(had);
  EXPECT_EQ(store.Tenants("a"), (std::vector<std::string>{"t", "u"}));
  store.ReleaseUnsaved("a", "u");
  EXPECT_EQ(store.Tenants("a"), (std::vector<std::string>{"t"}));
  // Kept: seen, used, listed, deletable; a release after that does nothing.
  store.Saved("a", "t");
  EXPECT_NE(store.Find("a", 5, "t"), nullptr);
  EXPECT_TRUE(store.Acquire("a", 5, "t"));
  EXPECT_EQ(store.List("t").size(), 1u);
  ASSERT_NE(store.Adopt("a", 5, "t", &had), nullptr);
  EXPECT_TRUE(had);
  store.ReleaseUnsaved("a", "t");
  EXPECT_EQ(store.Tenants("a"), (std::vector<std::string>{"t"}));
  // Now evictable for another rig, and gone with it.
  const auto room = store.Insert("b", limb, 6, "t", &evicted);
  ASSERT_TRUE(room.ok()) << room.status();
  EXPECT_EQ(evicted, (std::vector<std::string>{"a"}));
  // The last unsaved hold released: the rig leaves the store and its bytes the budget.
  store.ReleaseUnsaved("b", "t");
  EXPECT_EQ(store.count(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
}

}  // namespace
}  // namespace sinew::server
