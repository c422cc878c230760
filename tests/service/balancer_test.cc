// Issue 17's scale-out: three real sinew-servers behind Debian's HAProxy running
// deploy/haproxy.cfg, all on loopback. Clients with different affinities each keep to one server
// (their sessions exist on exactly one, and no frame of theirs fails); when a client's server is
// killed, client::RecoveringSession re-uploads its rig and re-creates its session on another server
// and carries on, counting the frames it redid, and every frame equals core's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "clients/lib/recovering_session.h"
#include "tests/service/server_process.h"
#include "tests/service/test_util.h"

namespace sinew::testing {
namespace {

constexpr char kHaproxy[] = "/usr/sbin/haproxy";

// How many of a server's sessions there are (asked directly, not through the balancer).
int SessionsOn(const ServerProcess& server) {
  client::Client c(server.target());
  auto list = c.ListSessions();
  return list.ok() ? list->sessions_size() : -1;
}

TEST(Balancer, SessionsStickToTheirServerAndMoveWhenItDies) {
  if (!std::filesystem::exists(kHaproxy)) GTEST_SKIP() << "no " << kHaproxy << " (scripts/install-deps.sh installs it)";
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(std::make_unique<ServerProcess>());
    ASSERT_TRUE(servers.back()->started());
  }
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  std::vector<std::string> argv = {"/usr/bin/env", "SINEW_LB_BIND=127.0.0.1:" + std::to_string(port)};
  for (int i = 0; i < 3; ++i) argv.push_back("SINEW_BACKEND_" + std::to_string(i) + "=" + servers[i]->target());
  argv.insert(argv.end(), {kHaproxy, "-db", "-f", std::string(SINEW_SOURCE_DIR) + "/deploy/haproxy.cfg"});
  const pid_t haproxy = SpawnProcess(argv);
  ASSERT_GT(haproxy, 0);
  // Stopped however the test ends (a failed ASSERT below left it running, holding its port).
  struct StopHaproxy {
    pid_t pid;
    ~StopHaproxy() {
      kill(pid, SIGTERM);
      WaitProcess(pid);
    }
  } stop_haproxy{haproxy};
  const std::string target = "127.0.0.1:" + std::to_string(port);

  const LimbOptions limb = LimbOf(1500);
  const v1::Rig rig = client::RigToProto(MakeLimb(limb));
  const Skeleton sk = LimbSkeleton(limb);
  constexpr int kClients = 6;
  std::vector<std::unique_ptr<client::Client>> clients;
  std::vector<std::unique_ptr<client::RecoveringSession>> sessions;
  for (int k = 0; k < kClients; ++k) {
    client::ClientOptions o;
    o.affinity = "client-" + std::to_string(k);
    clients.push_back(std::make_unique<client::Client>(target, o));
    ASSERT_TRUE(clients.back()->WaitReady(std::chrono::seconds(60)).ok());
    v1::CreateSessionRequest create;
    create.mutable_deformer()->set_method(v1::METHOD_DQS);
    absl::StatusOr<std::unique_ptr<client::RecoveringSession>> s;
    for (int attempt = 0; attempt < 100; ++attempt) {  // until HAProxy has found its servers up
      // Up to 20 s a frame for the balancer to see a server gone (its checks take 0.5 s): a
      // loaded CI machine must not fail the test by being slow.
      s = client::RecoveringSession::Open(*clients.back(), rig, create,
                                          {.max_attempts = 200, .retry_delay = std::chrono::milliseconds(100)});
      if (s.ok() || s.status().code() != absl::StatusCode::kUnavailable) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(s.ok()) << s.status();
    sessions.push_back(std::move(*s));
  }
  auto play = [&](int k, int first, int count) {
    for (int f = first; f < first + count; ++f) {
      const Pose pose = LimbPose(sk, f / 20.0);
      auto frame = sessions[k]->Deform(Frame("", uint64_t(f), pose));
      ASSERT_TRUE(frame.ok()) << "client " << k << " frame " << f << ": " << frame.status();
      std::vector<float> got;
      ASSERT_TRUE(client::DecodePositions(*frame, got).ok());
      EXPECT_EQ(got, CoreDeform(limb, "dqs", pose)) << "client " << k << " frame " << f;
    }
  };
  // Sticky: every client's frames reach the server that holds its session.
  for (int k = 0; k < kClients; ++k) play(k, 0, 4);
  int total = 0;
  for (auto& s : servers) total += SessionsOn(*s);
  EXPECT_EQ(total, kClients) << "each session on exactly one server";
  for (int k = 0; k < kClients; ++k) EXPECT_EQ(sessions[k]->frames_redone(), 0u) << "client " << k;

  // The command-line client through the balancer: its run's calls carry one affinity key
  // (--affinity, default a random one per run), so its session's frames reach the server that
  // holds it. (Until 2026-12-03 it sent none, and HAProxy spread its calls round robin.)
  for (int run = 0; run < 3; ++run) {
    std::string out, err;
    EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", target, "play", "--vertices", "800", "--frames", "6", "--method",
                          "lbs,dqs"},
                         &out, &err),
              0)
        << out << err;
  }

  // A client that sends no affinity key is keyed by its address: its session's frames reach the
  // server that holds it (until 2026-12-03 HAProxy spread them round robin: NOT_FOUND).
  {
    client::Client plain(target);
    auto up = plain.UploadRig(rig);
    ASSERT_TRUE(up.ok()) << up.status();
    v1::CreateSessionRequest create;
    create.set_rig_id(up->rig_id());
    create.mutable_deformer()->set_method(v1::METHOD_DQS);
    auto session = plain.CreateSession(create);
    ASSERT_TRUE(session.ok()) << session.status();
    for (int f = 0; f < 9; ++f) {
      auto frame = plain.Deform(Frame(session->session_id(), uint64_t(f), LimbPose(sk, f / 9.0)));
      ASSERT_TRUE(frame.ok()) << "frame " << f << ": " << frame.status();
    }
    EXPECT_TRUE(plain.CloseSession(session->session_id()).ok());
  }

  // Kill client 0's server: its session moves; the others' clients carry on untouched.
  int victim = -1;
  for (int i = 0; i < 3 && victim < 0; ++i) {
    client::Client direct(servers[i]->target());
    if (direct.GetSession(sessions[0]->session_id()).ok()) victim = i;
  }
  ASSERT_GE(victim, 0);
  ASSERT_EQ(kill(servers[victim]->pid(), SIGKILL), 0);
  servers[victim]->Terminate(1);
  const std::string before = sessions[0]->session_id();
  play(0, 4, 4);
  EXPECT_GE(sessions[0]->frames_redone(), 1u);
  EXPECT_GE(sessions[0]->sessions_recreated(), 1u);
  EXPECT_NE(sessions[0]->session_id(), before);
  for (int k = 1; k < kClients; ++k) play(k, 4, 2);
  std::printf("client 0 redid %llu frame(s), re-created its session %llu time(s)\n",
              (unsigned long long)sessions[0]->frames_redone(), (unsigned long long)sessions[0]->sessions_recreated());

  for (int i = 0; i < 3; ++i) {
    if (i != victim) {
      EXPECT_EQ(servers[i]->Terminate(), 0);
    }
  }
}

// A server that has every rig, numbers the sessions it creates and answers its first frames
// with `script`'s errors (one each), then deforms: sinew-server shedding under --max-queue-ms
// ("overloaded: ..."), a connection lost, a session this server does not know.
class ScriptedServer final : public v1::Sinew::Service {
 public:
  explicit ScriptedServer(std::vector<grpc::Status> script) : script(std::move(script)) {}
  grpc::Status GetRig(grpc::ServerContext*, const v1::GetRigRequest* req, v1::RigInfo* info) override {
    info->set_rig_id(req->rig_id());
    return grpc::Status::OK;
  }
  grpc::Status CreateSession(grpc::ServerContext*, const v1::CreateSessionRequest* req, v1::Session* s) override {
    std::lock_guard lock(mu);
    deformers.push_back(req->deformer());
    backends.push_back(req->backend());
    s->set_session_id("s" + std::to_string(++created));
    return grpc::Status::OK;
  }
  grpc::Status UpdateSession(grpc::ServerContext*, const v1::UpdateSessionRequest* req, v1::Session* s) override {
    std::lock_guard lock(mu);
    if (update_makes_stateful) stateless = false;
    s->set_session_id(req->session_id());
    return grpc::Status::OK;
  }
  grpc::Status Deform(grpc::ServerContext*, const v1::DeformRequest* req, v1::DeformResponse* resp) override {
    std::lock_guard lock(mu);
    if (forget_before.count(framed.size())) last.erase(req->session_id());  // a crash between calls
    framed.push_back(req->session_id());
    frames.push_back(req->session_id() + ":" + std::to_string(req->frame()) + (req->reset() ? " reset" : ""));
    // A scripted error answers the call; a scripted error with applied_ set was applied first
    // (its answer lost on the way back).
    if (framed.size() <= script.size() && !script[framed.size() - 1].ok()) {
      if (applied.count(framed.size() - 1)) last[req->session_id()] = req->frame();
      if (forget.count(framed.size() - 1)) last.erase(req->session_id());  // reopened from rest
      return script[framed.size() - 1];
    }
    resp->set_from_rest(req->reset() || !last.count(req->session_id()));  // as sinew-server says
    last[req->session_id()] = req->frame();
    resp->set_frame(req->frame());
    if (int& left = fallback_frames[req->session_id()]; left > 0) {  // the method still preparing
      --left;
      resp->set_method(v1::METHOD_DQS);
    }
    return grpc::Status::OK;
  }
  // The "state" of a session is its name and the last frame it applied.
  grpc::Status GetSessionState(grpc::ServerContext*, const v1::GetSessionStateRequest* req,
                               v1::SessionState* state) override {
    std::lock_guard lock(mu);
    ++states_got;
    if (failing_gets > 0) {
      --failing_gets;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed");
    }
    state->set_backend(v1::BACKEND_CPU);
    if (auto it = last.find(req->session_id()); it != last.end()) state->set_last_frame(it->second);
    if (!stateless) state->set_method_state(req->session_id() + "@" + std::to_string(last[req->session_id()]));
    return grpc::Status::OK;
  }
  grpc::Status SetSessionState(grpc::ServerContext*, const v1::SetSessionStateRequest* req, v1::Session* s) override {
    std::lock_guard lock(mu);
    states_set.push_back(req->session_id() + " <- " + req->state().method_state());
    if (preparing_sets > 0) {
      --preparing_sets;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "session_id: its method is still preparing (elastic-implicit)");
    }
    if (refuse_states) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "state.backend: saved on BACKEND_GPU; this session runs on BACKEND_CPU");
    }
    last[req->session_id()] = req->state().last_frame();
    s->set_session_id(req->session_id());
    return grpc::Status::OK;
  }
  const std::vector<grpc::Status> script;
  std::set<size_t> applied;  // indexes of script errors returned after the frame was applied
  std::set<size_t> forget;   // ... after which the session is as reopened from rest (a crash)
  std::set<size_t> forget_before;  // Deform calls (by index) that find the session so
  bool stateless = false, refuse_states = false, update_makes_stateful = false;
  std::mutex mu;
  int created = 0, states_got = 0;
  int failing_gets = 0, preparing_sets = 0;   // the next so many calls answer UNAVAILABLE
  std::map<std::string, int> fallback_frames;  // per session: its next so many frames by the fallback
  std::vector<v1::Backend> backends;          // as each session was created
  std::vector<std::string> framed;
  std::vector<std::string> frames;      // "session:frame[ reset]" per Deform call
  std::vector<std::string> states_set;  // "session <- state" per SetSessionState call
  std::map<std::string, uint64_t> last;
  std::vector<v1::DeformerConfig> deformers;  // as each session was created
};

// Plays one frame through a RecoveringSession against `service`; the session after it.
struct Played {
  absl::StatusOr<v1::DeformResponse> frame;
  uint64_t recreated = 0, redone = 0;
  std::string session;
};
Played PlayOne(ScriptedServer& service, client::RecoveringSession::Options options = {},
               const v1::DeformerConfig* update = nullptr) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  Played out{absl::InternalError("no server"), 0, 0, ""};
  if (server == nullptr || port <= 0) return out;
  client::Client c("127.0.0.1:" + std::to_string(port));
  const LimbOptions limb = LimbOf(300);
  v1::CreateSessionRequest create;
  create.mutable_deformer()->set_method(v1::METHOD_LBS);
  options.retry_delay = std::chrono::milliseconds(1);
  auto s = client::RecoveringSession::Open(c, client::RigToProto(MakeLimb(limb)), create, options);
  if (!s.ok()) {
    out.frame = s.status();
  } else {
    if (update != nullptr) {
      if (auto st = (*s)->Update(*update); !st.ok()) out.frame = st.status();
    }
    if (out.frame.status().code() == absl::StatusCode::kInternal) {
      out.frame = (*s)->Deform(Frame("", 7, LimbPose(LimbSkeleton(limb), 0.2)));
    }
    out.recreated = (*s)->sessions_recreated();
    out.redone = (*s)->frames_redone();
    out.session = (*s)->session_id();
  }
  server->Shutdown();
  return out;
}

// A shed frame is sent again on the same session. Until 2026-12-01 RecoveringSession took any
// UNAVAILABLE for a lost server: it created a new session for every shed frame, leaving the old
// one open on a server already overloaded (and a history-dependent one restarted from rest).
TEST(RecoveringSession, AShedFrameIsSentAgainOnTheSameSession) {
  ScriptedServer service({grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                       "overloaded: the frame waited 300 ms for a worker (more than --max-queue-ms "
                                       "250) and was not deformed; send fewer frames or use more servers")});
  const Played p = PlayOne(service);
  ASSERT_TRUE(p.frame.ok()) << p.frame.status();
  EXPECT_EQ(p.frame->frame(), 7u);
  EXPECT_EQ(p.recreated, 0u);
  EXPECT_EQ(p.redone, 1u);
  EXPECT_EQ(p.session, "s1");
  EXPECT_EQ(service.created, 1);
  EXPECT_THAT(service.framed, ::testing::ElementsAre("s1", "s1"));
}

// No server answered (a blip, or a server restarting with --state-dir, which reopens its
// sessions): the frame goes again to the same session, which keeps its history. Until
// 2026-12-03 any UNAVAILABLE re-created the session: the old one stayed open on its server,
// holding the tenant's quota until its idle timeout (and a restarted server reopened it at
// every restart).
TEST(RecoveringSession, AFrameThatFoundNoServerIsSentAgainOnTheSameSession) {
  ScriptedServer service({grpc::Status(grpc::StatusCode::UNAVAILABLE, "failed to connect to all addresses"),
                          grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed")});
  const Played p = PlayOne(service);
  ASSERT_TRUE(p.frame.ok()) << p.frame.status();
  EXPECT_EQ(p.recreated, 0u);
  EXPECT_EQ(p.redone, 1u);
  EXPECT_EQ(service.created, 1);
  EXPECT_THAT(service.framed, ::testing::ElementsAre("s1", "s1", "s1"));
}

// The server that answers once one is there again does not know the session (a balancer's next
// server, or a restart without --state-dir): the session is created again, once.
TEST(RecoveringSession, ASessionTheServerDoesNotKnowIsCreatedAgainOnce) {
  ScriptedServer service({grpc::Status(grpc::StatusCode::UNAVAILABLE, "failed to connect to all addresses"),
                          grpc::Status(grpc::StatusCode::NOT_FOUND, "session_id: no session \"s1\" (closed or expired)")});
  const Played p = PlayOne(service);
  ASSERT_TRUE(p.frame.ok()) << p.frame.status();
  EXPECT_EQ(p.recreated, 1u);
  EXPECT_EQ(p.redone, 1u);
  EXPECT_EQ(p.session, "s2");
  EXPECT_EQ(service.created, 2);
  EXPECT_THAT(service.framed, ::testing::ElementsAre("s1", "s1", "s2"));
}

// A session re-created after Update gets the parameters it was last given, not Open's.
TEST(RecoveringSession, ASessionCreatedAgainHasTheParametersItWasLastGiven) {
  ScriptedServer service({grpc::Status(grpc::StatusCode::NOT_FOUND, "session_id: no session \"s1\" (closed or expired)")});
  v1::DeformerConfig jiggling;
  jiggling.set_method(v1::METHOD_PBS);
  jiggling.mutable_pbs()->set_jiggle_stiffness(0.05);
  const Played p = PlayOne(service, {}, &jiggling);
  ASSERT_TRUE(p.frame.ok()) << p.frame.status();
  EXPECT_EQ(p.recreated, 1u);
  ASSERT_EQ(service.deformers.size(), 2u);
  EXPECT_FALSE(service.deformers[0].has_pbs());
  EXPECT_EQ(service.deformers[1].pbs().jiggle_stiffness(), 0.05);
}

// Serves `service` on loopback, opens a RecoveringSession with `options` (retry delay 1 ms) on it
// and hands it to `play`; the error of Open, or OK.
absl::Status PlayThrough(ScriptedServer& service, client::RecoveringSession::Options options,
                         const std::function<void(client::RecoveringSession&, const Pose&)>& play) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port <= 0) return absl::InternalError("no server");
  client::Client c("127.0.0.1:" + std::to_string(port));
  const LimbOptions limb = LimbOf(300);
  v1::CreateSessionRequest create;
  create.mutable_deformer()->set_method(v1::METHOD_ELASTIC_IMPLICIT);
  options.retry_delay = std::chrono::milliseconds(1);
  auto s = client::RecoveringSession::Open(c, client::RigToProto(MakeLimb(limb)), create, options);
  if (s.ok()) play(**s, LimbPose(LimbSkeleton(limb), 0.2));
  server->Shutdown();
  return s.status();
}

grpc::Status NotFound(const std::string& session) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, "session_id: no session \"" + session + "\" (closed or expired)");
}
std::vector<grpc::Status> OkThen(size_t ok, std::vector<grpc::Status> then) {
  then.insert(then.begin(), ok, grpc::Status::OK);
  return then;
}

// With checkpoints, a session created again is given the last checkpoint and the frames applied
// since, then the frame at hand: its history goes on. Frames before an Update are not sent again
// (they ran under the old parameters): Update checkpoints.
TEST(RecoveringSession, ASessionCreatedAgainGetsItsCheckpointAndTheFramesSince) {
  ScriptedServer service(OkThen(7, {NotFound("s1")}));
  uint64_t replayed = 0, checkpoints = 0;
  ASSERT_TRUE(PlayThrough(service, {.checkpoint_every = 3}, [&](client::RecoveringSession& s, const Pose& pose) {
                for (uint64_t f = 1; f <= 5; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                v1::DeformerConfig relaxed;
                relaxed.set_method(v1::METHOD_ELASTIC_IMPLICIT);
                ASSERT_TRUE(s.Update(relaxed).ok());
                for (uint64_t f = 6; f <= 9; ++f) {
                  auto frame = s.Deform(Frame("", f, pose));
                  ASSERT_TRUE(frame.ok()) << f << ": " << frame.status();
                  EXPECT_EQ(frame->frame(), f);
                }
                replayed = s.frames_replayed();
                checkpoints = s.checkpoints();
                EXPECT_EQ(s.sessions_recreated(), 1u);
                EXPECT_EQ(s.histories_lost(), 0u);
              }).ok());
  // Checkpoints at frame 3, at the Update (after 5), and at 8 (3 frames after the Update, one of them on s2).
  EXPECT_EQ(checkpoints, 3u);
  EXPECT_THAT(service.states_set, ::testing::ElementsAre("s2 <- s1@5"));
  EXPECT_THAT(service.frames, ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:4", "s1:5", "s1:6", "s1:7", "s1:8",
                                                     "s2:6", "s2:7", "s2:8", "s2:9"));
  EXPECT_EQ(replayed, 2u);
  // Re-created on the backend kind its state was saved on (opened with AUTO).
  EXPECT_THAT(service.backends, ::testing::ElementsAre(v1::BACKEND_AUTO, v1::BACKEND_CPU));
}

// A rebuild that runs out of attempts (the new server's method still preparing) is finished by
// the next call, before its frame. (A review found the next call sent its frame to the half-built
// session: a wrong history, uncounted.)
TEST(RecoveringSession, ARebuildThatRunsOutOfAttemptsIsFinishedByTheNextCall) {
  ScriptedServer service(OkThen(3, {NotFound("s1")}));
  service.preparing_sets = 3;
  ASSERT_TRUE(PlayThrough(service, {.max_attempts = 3, .checkpoint_every = 2},
                          [&](client::RecoveringSession& s, const Pose& pose) {
                            for (uint64_t f = 1; f <= 3; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                            EXPECT_EQ(s.Deform(Frame("", 4, pose)).status().code(), absl::StatusCode::kUnavailable);
                            auto again = s.Deform(Frame("", 4, pose));
                            ASSERT_TRUE(again.ok()) << again.status();
                            EXPECT_EQ(s.sessions_recreated(), 1u);
                            EXPECT_EQ(s.histories_lost(), 0u);
                          }).ok());
  EXPECT_THAT(service.states_set, ::testing::ElementsAre("s2 <- s1@2", "s2 <- s1@2", "s2 <- s1@2", "s2 <- s1@2"));
  EXPECT_THAT(service.frames, ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:4", "s2:3", "s2:4"));
}

// Frames the fallback served while the method prepared are no part of the method's history: the
// kept history starts at the method's first frame, and a rebuild the new server's fallback
// answers is tried again once the method serves.
TEST(RecoveringSession, FramesOfTheFallbackAreNoPartOfTheHistory) {
  ScriptedServer service(OkThen(4, {NotFound("s1")}));
  service.fallback_frames = {{"s1", 2}, {"s2", 1}};
  ASSERT_TRUE(PlayThrough(service, {.checkpoint_every = 10}, [&](client::RecoveringSession& s, const Pose& pose) {
                for (uint64_t f = 1; f <= 5; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
              }).ok());
  EXPECT_THAT(service.frames, ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:4", "s1:5", "s2:3 reset",
                                                     "s2:3 reset", "s2:4", "s2:5"));
}

// An Update can make a stateless session history-dependent (pbs's jiggle): checkpoints start,
// also when the one right after the Update fails. A refused frame is followed by a checkpoint (it
// may have changed the history: a refused reset frame has forgotten it).
TEST(RecoveringSession, CheckpointsFollowUpdatesAndRefusedFrames) {
  ScriptedServer service(OkThen(4, {NotFound("s1")}));
  service.stateless = true;
  service.update_makes_stateful = true;
  ASSERT_TRUE(PlayThrough(service, {.checkpoint_every = 2}, [&](client::RecoveringSession& s, const Pose& pose) {
                for (uint64_t f = 1; f <= 2; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                {
                  std::lock_guard lock(service.mu);
                  service.failing_gets = 1;
                }
                v1::DeformerConfig jiggling;
                jiggling.set_method(v1::METHOD_ELASTIC_IMPLICIT);
                ASSERT_TRUE(s.Update(jiggling).ok());
                for (uint64_t f = 3; f <= 5; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                EXPECT_EQ(s.histories_lost(), 0u);
              }).ok());
  EXPECT_THAT(service.states_set, ::testing::ElementsAre("s2 <- s1@4"));
  EXPECT_THAT(service.frames, ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:4", "s1:5", "s2:5"));

  ScriptedServer refusing(OkThen(2, {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "pose: joint 3: not finite"),
                                     grpc::Status::OK, NotFound("s1")}));
  ASSERT_TRUE(PlayThrough(refusing, {.checkpoint_every = 5}, [&](client::RecoveringSession& s, const Pose& pose) {
                for (uint64_t f = 1; f <= 2; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                v1::DeformRequest reset = Frame("", 3, pose);
                reset.set_reset(true);
                EXPECT_EQ(s.Deform(reset).status().code(), absl::StatusCode::kInvalidArgument);
                EXPECT_EQ(s.checkpoints(), 1u);
                for (uint64_t f = 4; f <= 5; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
              }).ok());
  EXPECT_THAT(refusing.states_set, ::testing::ElementsAre("s2 <- s1@2"));
  EXPECT_THAT(refusing.frames,
              ::testing::ElementsAre("s1:1", "s1:2", "s1:3 reset", "s1:4", "s1:5", "s2:4", "s2:5"));
}

// Before the first checkpoint the history is the session's frames since its creation: the first
// one sent again starts the new session from rest (reset), as the first did.
TEST(RecoveringSession, BeforeTheFirstCheckpointTheFramesAreSentAgainFromRest) {
  ScriptedServer service(OkThen(2, {grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed"), NotFound("s1")}));
  ASSERT_TRUE(PlayThrough(service, {.checkpoint_every = 10}, [&](client::RecoveringSession& s, const Pose& pose) {
                for (uint64_t f = 1; f <= 3; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                EXPECT_EQ(s.frames_replayed(), 2u);
                EXPECT_EQ(s.frames_redone(), 1u);
                EXPECT_EQ(s.checkpoints(), 0u);
              }).ok());
  EXPECT_TRUE(service.states_set.empty());
  EXPECT_THAT(service.frames,
              ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:3", "s2:1 reset", "s2:2", "s2:3"));
}

// A server restarted with --state-dir after a crash reopens the session from rest: the frame sent
// again after the outage is answered `from_rest` although the session had a history, and it is
// sent once more after the kept history is set again on the session; after a blip (the history
// kept) it is answered as it is. (Until 2026-12-04 the first went on from rest, silently.)
TEST(RecoveringSession, ASessionReopenedFromRestAfterACrashGetsItsHistoryBack) {
  const grpc::Status lost(grpc::StatusCode::UNAVAILABLE, "Socket closed");
  for (const bool crashed : {true, false}) {
    ScriptedServer service(OkThen(3, {lost}));
    if (crashed) service.forget = {3};
    ASSERT_TRUE(PlayThrough(service, {.checkpoint_every = 2}, [&](client::RecoveringSession& s, const Pose& pose) {
                  for (uint64_t f = 1; f <= 4; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                  EXPECT_EQ(s.sessions_recreated(), 0u);
                  EXPECT_EQ(s.frames_replayed(), crashed ? 1u : 0u);
                  EXPECT_EQ(s.frames_redone(), 1u);
                }).ok());
    if (crashed) {
      EXPECT_THAT(service.states_set, ::testing::ElementsAre("s1 <- s1@2"));
      EXPECT_THAT(service.frames, ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:4", "s1:4", "s1:3", "s1:4"));
    } else {
      EXPECT_TRUE(service.states_set.empty());
      EXPECT_THAT(service.frames, ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:4", "s1:4"));
    }
  }
}

// A frame answered from rest on the call's last attempt (a crash between two calls, max_attempts
// 1) comes back UNAVAILABLE, not as a frame of the wrong history (nor as an OK status with no
// frame, which a review found the first version returned), and the next call sets the history
// again and sends it.
TEST(RecoveringSession, AFrameAnsweredFromRestOnTheLastAttemptIsSentAgainByTheNextCall) {
  ScriptedServer service({});
  service.forget_before = {2};
  ASSERT_TRUE(PlayThrough(service, {.max_attempts = 1, .checkpoint_every = 1},
                          [&](client::RecoveringSession& s, const Pose& pose) {
                            for (uint64_t f = 1; f <= 2; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                            auto third = s.Deform(Frame("", 3, pose));
                            EXPECT_EQ(third.status().code(), absl::StatusCode::kUnavailable) << third.status();
                            EXPECT_THAT(std::string(third.status().message()), ::testing::HasSubstr("from rest"));
                            auto again = s.Deform(Frame("", 3, pose));
                            ASSERT_TRUE(again.ok()) << again.status();
                            EXPECT_FALSE(again->from_rest());
                          }).ok());
  EXPECT_THAT(service.states_set, ::testing::ElementsAre("s1 <- s1@2"));
  EXPECT_THAT(service.frames, ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:3"));
}

// A frame applied whose answer was lost comes back "already applied" when sent again: with
// checkpoints, the session is brought back to its checkpoint and the frames since, and the frame
// is answered. Without, the refusal comes back (the behaviour before checkpoints). A frame the
// caller numbered at or below the last one is its own error either way.
TEST(RecoveringSession, AFrameWhoseAnswerWasLostIsAnsweredFromTheCheckpoint) {
  const grpc::Status lost(grpc::StatusCode::UNAVAILABLE, "Socket closed");
  const grpc::Status applied(grpc::StatusCode::FAILED_PRECONDITION,
                             "frame: 4 was already applied (or failed after it was); this stateful session applies "
                             "frames strictly in increasing order of their numbers (set reset to start again)");
  for (const int every : {2, 0}) {
    ScriptedServer service(OkThen(3, {lost, applied}));
    service.applied = {3};
    ASSERT_TRUE(PlayThrough(service, {.checkpoint_every = every}, [&](client::RecoveringSession& s, const Pose& pose) {
                  for (uint64_t f = 1; f <= 3; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                  auto frame = s.Deform(Frame("", 4, pose));
                  if (every == 0) {
                    EXPECT_EQ(frame.status().code(), absl::StatusCode::kFailedPrecondition) << frame.status();
                    return;
                  }
                  ASSERT_TRUE(frame.ok()) << frame.status();
                  EXPECT_EQ(frame->frame(), 4u);
                  EXPECT_EQ(s.sessions_recreated(), 0u);
                  EXPECT_EQ(s.frames_replayed(), 1u);
                }).ok());
    if (every == 0) {
      EXPECT_TRUE(service.states_set.empty());
      EXPECT_THAT(service.frames, ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:4", "s1:4"));
    } else {
      EXPECT_THAT(service.states_set, ::testing::ElementsAre("s1 <- s1@2"));
      EXPECT_THAT(service.frames, ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:4", "s1:4", "s1:3", "s1:4"));
    }
  }
  ScriptedServer twice(OkThen(2, {grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                               "frame: 2 was already applied (or failed after it was); ...")}));
  ASSERT_TRUE(PlayThrough(twice, {.checkpoint_every = 1}, [&](client::RecoveringSession& s, const Pose& pose) {
                for (uint64_t f = 1; f <= 2; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                EXPECT_EQ(s.Deform(Frame("", 2, pose)).status().code(), absl::StatusCode::kFailedPrecondition);
              }).ok());
  EXPECT_TRUE(twice.states_set.empty());
}

// A state the new server refuses (another backend kind): the frame starts the history again
// from rest, counted. A stateless session (empty state) stops checkpointing and keeps nothing.
TEST(RecoveringSession, ARefusedStateStartsFromRestAndStatelessSessionsKeepNothing) {
  ScriptedServer refusing(OkThen(3, {NotFound("s1")}));
  refusing.refuse_states = true;
  ASSERT_TRUE(PlayThrough(refusing, {.checkpoint_every = 2}, [&](client::RecoveringSession& s, const Pose& pose) {
                for (uint64_t f = 1; f <= 5; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                EXPECT_EQ(s.histories_lost(), 1u);
                EXPECT_EQ(s.frames_replayed(), 0u);
              }).ok());
  EXPECT_THAT(refusing.states_set, ::testing::ElementsAre("s2 <- s1@2"));
  EXPECT_THAT(refusing.frames, ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:4", "s2:4 reset", "s2:5"));

  ScriptedServer stateless(OkThen(6, {NotFound("s1")}));
  stateless.stateless = true;
  ASSERT_TRUE(PlayThrough(stateless, {.checkpoint_every = 2}, [&](client::RecoveringSession& s, const Pose& pose) {
                for (uint64_t f = 1; f <= 8; ++f) ASSERT_TRUE(s.Deform(Frame("", f, pose)).ok()) << f;
                EXPECT_EQ(s.checkpoints(), 1u);
                EXPECT_EQ(s.histories_lost(), 0u);
              }).ok());
  EXPECT_EQ(stateless.states_got, 1);
  EXPECT_TRUE(stateless.states_set.empty());
  EXPECT_THAT(stateless.frames,
              ::testing::ElementsAre("s1:1", "s1:2", "s1:3", "s1:4", "s1:5", "s1:6", "s1:7", "s2:7", "s2:8"));
}

// Errors that say nothing about the server or the session come back at once; attempts are
// bounded (and at least one).
TEST(RecoveringSession, OtherErrorsComeBackAndAttemptsAreBounded) {
  ScriptedServer refused({grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "pose: 3 joints; the rig has 4")});
  Played p = PlayOne(refused);
  EXPECT_EQ(p.frame.status().code(), absl::StatusCode::kInvalidArgument) << p.frame.status();
  EXPECT_THAT(refused.framed, ::testing::ElementsAre("s1"));
  ScriptedServer down(std::vector<grpc::Status>(10, grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed")));
  p = PlayOne(down, {.max_attempts = 3});
  EXPECT_EQ(p.frame.status().code(), absl::StatusCode::kUnavailable) << p.frame.status();
  EXPECT_EQ(down.framed.size(), 3u);
  ScriptedServer none({});
  p = PlayOne(none, {.checkpoint_every = -1});
  EXPECT_EQ(p.frame.status().code(), absl::StatusCode::kInvalidArgument) << p.frame.status();
  EXPECT_THAT(std::string(p.frame.status().message()), ::testing::HasSubstr("checkpoint_every"));
  p = PlayOne(none, {.max_attempts = 0});
  EXPECT_EQ(p.frame.status().code(), absl::StatusCode::kInvalidArgument) << p.frame.status();
  EXPECT_THAT(std::string(p.frame.status().message()), ::testing::HasSubstr("max_attempts"));
  EXPECT_EQ(none.created, 0);
}

}  // namespace
}  // namespace sinew::testing
