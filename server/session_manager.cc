#include "server/session_manager.h"
#include "server/echo_id.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sinew::server {
namespace {

std::string NewSessionId() {
  std::random_device rd;
  uint64_t a = (uint64_t{rd()} << 32) | rd(), b = (uint64_t{rd()} << 32) | rd();
  return absl::StrFormat("s-%016x%016x", a, b);
}

}  // namespace

void Session::ToProto(v1::Session& out, uint32_t idle_ttl_seconds) const {
  out.set_session_id(id);
  out.set_rig_id(rig->id);
  {
    std::lock_guard lock(config_mu);
    *out.mutable_deformer() = config;
  }
  if (has_frame.load()) out.set_last_frame(last_frame.load());
  out.set_backend(backend);
  out.set_encoding(encoding);
  out.set_vertex_count(static_cast<uint32_t>(rig->rig->vertex_count()));
  out.set_joint_count(static_cast<uint32_t>(rig->rig->joint_count()));
  out.set_frames(frames.load());
  out.set_created_unix_ms(created_ms);
  out.set_last_used_unix_ms(last_used_ms.load());
  out.set_idle_ttl_seconds(idle_ttl_seconds);
  out.set_state_bytes(state_bytes.load());
  out.set_latest_pose_wins(latest_pose_wins);
  for (const std::string& key : preparation_keys) out.add_preparations(key);
  if (encoding == v1::OUTPUT_ENCODING_DELTA) {
    out.set_max_error(max_error);
    out.set_key_frame_interval(key_frame_interval);
  }
}

absl::Status HistoryHeld(const std::string& session_id, absl::string_view then) {
  return absl::AbortedError(absl::StrCat("session_id: a DeformClip batch is playing session \"", EchoId(session_id),
                                         "\" (a history-dependent session has one writer at a time); ", then));
}

SessionManager::~SessionManager() {
  std::lock_guard lock(mu_);
  for (auto& [id, s] : sessions_) ReleaseLocked(*s);
}

absl::Status SessionManager::RoomLocked(const std::string& tenant, size_t tenant_max, size_t held) const {
  const auto it = pending_.find(tenant);
  const size_t creating = (it == pending_.end() ? 0 : it->second) - held;
  if (tenant_max > 0) {
    size_t own = 0;
    for (auto& [id, other] : sessions_) own += other->tenant == tenant;
    if (own + creating >= tenant_max) {
      return absl::ResourceExhaustedError(absl::StrCat("quota max_sessions=", tenant_max, " of tenant ", tenant,
                                                       ": ", own, " open", creating ? absl::StrCat(", ", creating, " being created") : "",
                                                       "; close sessions you no longer use"));
    }
  }
  if (sessions_.size() + pending_total_ - held >= max_sessions_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sessions: ", sessions_.size(), " open", pending_total_ - held ? absl::StrCat(", ", pending_total_ - held, " being created") : "",
        ", the limit is ", max_sessions_, " (--max-sessions); close sessions you no longer use"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionManager::Reservation> SessionManager::Reserve(const std::string& tenant, size_t tenant_max) {
  std::lock_guard lock(mu_);
  if (auto st = RoomLocked(tenant, tenant_max); !st.ok()) return st;
  ++pending_[tenant];
  ++pending_total_;
  return Reservation(this, tenant);
}

void SessionManager::Unreserve(const std::string& tenant) {
  std::lock_guard lock(mu_);
  UnreserveLocked(tenant);
}

void SessionManager::UnreserveLocked(const std::string& tenant) {
  auto it = pending_.find(tenant);
  if (it == pending_.end()) return;
  if (--it->second == 0) pending_.erase(it);
  --pending_total_;
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Add(std::unique_ptr<Session> session, size_t tenant_max,
                                                              const std::string& id, Reservation* held) {
  std::shared_ptr<Session> s = std::move(session);
  std::lock_guard lock(mu_);
  const size_t own = held != nullptr && held->manager_ == this && held->tenant_ == s->tenant ? 1 : 0;
  if (auto st = RoomLocked(s->tenant, tenant_max, own); !st.ok()) return st;
  if (!id.empty()) {
    if (sessions_.contains(id)) return absl::AlreadyExistsError(absl::StrCat("session ", EchoId(id), " is open already"));
    s->id = id;
  } else {
    do {
      s->id = NewSessionId();
    } while (sessions_.contains(s->id));
  }
  s->rig->Hold(s->tenant);
  sessions_.emplace(s->id, s);
  if (own) {  // the session takes its reservation's place
    UnreserveLocked(s->tenant);
    held->manager_ = nullptr;
  }
  return s;
}

std::shared_ptr<Session> SessionManager::Find(const std::string& id, int64_t now_ms, const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->tenant != tenant) return nullptr;
  it->second->last_used_ms = now_ms;
  it->second->rig->last_used_ms = now_ms;
  return it->second;
}

bool SessionManager::Has(const std::string& id, const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  return it != sessions_.end() && it->second->tenant == tenant;
}

void SessionManager::ReleaseLocked(Session& s) {
  s.rig->LetGo(s.tenant);
  s.open = false;
}

absl::StatusOr<uint64_t> SessionManager::Close(const std::string& id, const std::string& tenant) {
  std::shared_ptr<Session> closed;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second->tenant != tenant) {
      return absl::NotFoundError(absl::StrCat("session_id: no session \"", EchoId(id), "\" (closed or expired)"));
    }
    ReleaseLocked(*it->second);
    closed = std::move(it->second);
    sessions_.erase(it);
  }
  if (on_removed_) on_removed_(*closed);
  return closed->frames.load();
}

std::vector<std::shared_ptr<Session>> SessionManager::List(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Session>> out;
  for (auto& [id, s] : sessions_) {
    if (s->tenant == tenant) out.push_back(s);
  }
  return out;
}

std::vector<std::shared_ptr<Session>> SessionManager::All() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Session>> out;
  out.reserve(sessions_.size());
  for (auto& [id, s] : sessions_) out.push_back(s);
  return out;
}

size_t SessionManager::CountOn(const std::string& rig_id, const std::string& tenant) const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (auto& [id, s] : sessions_) n += s->tenant == tenant && s->rig->id == rig_id;
  return n;
}

size_t SessionManager::ExpireIdle(int64_t now_ms) {
  std::vector<std::shared_ptr<Session>> expired;
  {
    std::lock_guard lock(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      // A session whose lock is held is in use: a frame running (an elastic frame may outlast
      // the TTL), or waiting behind one, or its state being read or written. Until 2026-12-03
      // such a session was closed under its own frame, which answered OK and the next NOT_FOUND.
      // So is one with a frame on a device (Session::device_frames).
      std::unique_lock busy(it->second->mu, std::try_to_lock);
      if (busy.owns_lock() && it->second->batches.load() == 0 && it->second->device_frames.load() == 0 &&
          now_ms - it->second->last_used_ms.load() > idle_ttl_ms_) {
        ReleaseLocked(*it->second);  // under its lock: a frame waiting for it sees it closed
        expired.push_back(std::move(it->second));
        sessions_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  if (on_removed_) {
    for (const auto& s : expired) on_removed_(*s);
  }
  return expired.size();
}

size_t SessionManager::count() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

size_t SessionManager::state_bytes() const {
  std::lock_guard lock(mu_);
  size_t b = 0;
  for (auto& [id, s] : sessions_) b += s->state_bytes;
  return b;
}

}  // namespace sinew::server
