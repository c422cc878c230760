// The client library's own rules against an in-process server on a loopback port chosen at run
// time (no sinew-server): a server_name without TLS is refused, a FrameStream is not used after
// Close, and RecoveringSession's waits back off with jitter within a total time.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clients/lib/client.h"
#include "clients/lib/recovering_session.h"

namespace sinew {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

// Answers every StreamDeform frame with its number; has every rig; creates sessions "s1", ...;
// answers Deform UNAVAILABLE (a server out of reach) while `unavailable`, counting the calls.
class EchoServer final : public v1::Sinew::Service {
 public:
  grpc::Status StreamDeform(grpc::ServerContext*,
                            grpc::ServerReaderWriter<v1::DeformResponse, v1::DeformRequest>* stream) override {
    v1::DeformRequest req;
    while (stream->Read(&req)) {
      v1::DeformResponse resp;
      resp.set_frame(req.frame());
      if (!stream->Write(resp)) break;
    }
    return grpc::Status::OK;
  }
  grpc::Status GetRig(grpc::ServerContext*, const v1::GetRigRequest* req, v1::RigInfo* info) override {
    info->set_rig_id(req->rig_id());
    return grpc::Status::OK;
  }
  grpc::Status CreateSession(grpc::ServerContext*, const v1::CreateSessionRequest*, v1::Session* s) override {
    s->set_session_id("s" + std::to_string(++created));
    return grpc::Status::OK;
  }
  grpc::Status Deform(grpc::ServerContext*, const v1::DeformRequest* req, v1::DeformResponse* resp) override {
    ++deforms;
    if (unavailable) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed");
    resp->set_frame(req->frame());
    return grpc::Status::OK;
  }
  std::atomic<int> created{0}, deforms{0};
  std::atomic<bool> unavailable{false};
};

class ClientInProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr && port_ > 0) << "no in-process server";
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

  EchoServer service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// The name is checked against the server's certificate: without TLS there is none. Until
// 2026-12-07 the client ignored it and connected in plaintext (the programs refused
// --tls-server-name without --tls already).
TEST(ClientOptions, AServerNameWithoutTlsIsRefused) {
  client::ClientOptions named;
  named.server_name = "localhost";
  client::Client plaintext("127.0.0.1:1", named);
  EXPECT_EQ(plaintext.status().code(), absl::StatusCode::kInvalidArgument) << plaintext.status();
  EXPECT_THAT(std::string(plaintext.status().message()), HasSubstr("server_name: "));
  EXPECT_THAT(std::string(plaintext.status().message()), HasSubstr("goes with tls"));
  // Every call fails with it, before any connection.
  EXPECT_EQ(plaintext.GetServerInfo().status(), plaintext.status());
  named.tls = true;
  EXPECT_TRUE(client::Client("127.0.0.1:1", named).status().ok());
}

// Close finishes the call: gRPC's stream is not written or read after it (until 2026-12-07 Write
// and Read used it all the same).
TEST_F(ClientInProcess, AClosedFrameStreamIsNotUsedAgain) {
  client::Client c(target());
  auto stream = c.OpenStream();
  v1::DeformRequest req;
  req.set_session_id("s");
  req.set_frame(3);
  ASSERT_TRUE(stream->Write(req));
  v1::DeformResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.frame(), 3u);
  ASSERT_TRUE(stream->Write(req));  // answered, and drained by Close
  size_t unread = 99;
  ASSERT_TRUE(stream->Close(&unread).ok());
  EXPECT_EQ(unread, 1u);
  EXPECT_FALSE(stream->Write(req));
  EXPECT_FALSE(stream->Read(&resp));
  stream->WritesDone();
  unread = 99;
  EXPECT_TRUE(stream->Close(&unread).ok()) << "the same final status again";
  EXPECT_EQ(unread, 0u);
}

// Exponential backoff with jitter: 50 ms doubling to 2 s, each wait within ±25 %.
TEST(RecoveringSessionRetries, WaitsDoubleUpToTheirCapWithJitter) {
  const client::RecoveringSession::Options o;
  EXPECT_EQ(o.retry_delay, milliseconds(50));
  EXPECT_EQ(o.max_retry_delay, milliseconds(2000));
  EXPECT_EQ(o.retry_timeout, milliseconds(30000));
  auto backoff = [&](int retry, double unit) {
    return std::chrono::duration<double, std::milli>(client::RecoveringSession::RetryBackoff(o, retry, unit)).count();
  };
  const double nominal[] = {50, 100, 200, 400, 800, 1600, 2000, 2000};
  for (int retry = 1; retry <= 8; ++retry) {
    EXPECT_NEAR(backoff(retry, 0.5), nominal[retry - 1], 1e-6) << retry;
    EXPECT_NEAR(backoff(retry, 0.0), 0.75 * nominal[retry - 1], 1e-6) << retry;
    EXPECT_NEAR(backoff(retry, 1.0), 1.25 * nominal[retry - 1], 1e-6) << retry;
  }
  EXPECT_NEAR(backoff(1000000, 0.5), 2000, 1e-6);  // no overflow far out
  // Within the default 30 s a server gets far more than the old 4 s (40 × 100 ms).
  double total = 0;
  int attempts = 1;
  while (total + backoff(attempts, 1.0) <= 30000) total += backoff(attempts++, 1.0);
  EXPECT_GT(total, 25000);
  // The budget of a frame's attempts: retry_timeout, or what a caller asked for before the
  // backoff (max_attempts × retry_delay) where longer.
  EXPECT_EQ(client::RecoveringSession::RetryBudget(o), milliseconds(30000));
  EXPECT_EQ(client::RecoveringSession::RetryBudget({.max_attempts = 1200, .retry_delay = milliseconds(100)}),
            milliseconds(120000));
  EXPECT_EQ(client::RecoveringSession::RetryBudget({.retry_timeout = milliseconds(0)}), milliseconds(0));
}

TEST(RecoveringSessionRetries, BadRetryOptionsAreRefusedBeforeAnyCall) {
  client::Client c("127.0.0.1:1");  // nothing there: Open fails on its options first
  v1::Rig rig;
  for (auto bad : {client::RecoveringSession::Options{.retry_delay = milliseconds(-1)},
                   client::RecoveringSession::Options{.max_retry_delay = milliseconds(-1)},
                   client::RecoveringSession::Options{.retry_timeout = milliseconds(-1)}}) {
    auto s = client::RecoveringSession::Open(c, rig, {}, bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("retry_timeout"));
  }
}

// A server out of reach for good: the frame's attempts end at their budget (here 5 s: 1000 × 5 ms,
// longer than retry_timeout's 300 ms, which then does not count), before max_attempts (every wait
// but the first two is at least 7.5 ms, so at most 669 attempts fit), with the last error; the
// budget is wide enough that a slow first call on a loaded machine still leaves a second attempt.
// (Asserted: that it returns, and the count; no time.)
TEST_F(ClientInProcess, ARecoveringSessionsAttemptsEndAtTheRetryTimeout) {
  client::Client c(target());
  auto s = client::RecoveringSession::Open(
      c, v1::Rig(), {},
      {.max_attempts = 1000, .retry_delay = milliseconds(5), .max_retry_delay = milliseconds(10),
       .retry_timeout = milliseconds(300)});
  ASSERT_TRUE(s.ok()) << s.status();
  service_.unavailable = true;
  v1::DeformRequest req;
  req.set_frame(0);
  auto frame = (*s)->Deform(req);
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kUnavailable) << frame.status();
  EXPECT_THAT(std::string(frame.status().message()), HasSubstr("Socket closed"));
  EXPECT_GT(service_.deforms.load(), 1);
  EXPECT_LT(service_.deforms.load(), 1000) << "the budget did not end it before max_attempts";
  EXPECT_EQ((*s)->frames_redone(), 1u);
  // And once the server answers again, frames go on.
  service_.unavailable = false;
  req.set_frame(1);
  auto next = (*s)->Deform(req);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->frame(), 1u);
}

}  // namespace
}  // namespace sinew
