#include "server/auth.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sinew/v1/rig_id.h"

namespace sinew::server {

absl::StatusOr<std::shared_ptr<const TokenTable::Parsed>> TokenTable::Parse(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--token-file: cannot read ", path));
  auto table = std::make_shared<Parsed>();
  absl::flat_hash_map<std::string, int> quota_line;  // per tenant, the first line giving quotas
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    const std::string at = absl::StrCat("--token-file ", path, ":", number, ": ");
    std::vector<absl::string_view> fields = absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(at, "expected \"TOKEN TENANT [QUOTA=N ...]\", got ", fields.size(),
                                                     " field"));
    }
    if (fields[0].size() < 16) return absl::InvalidArgumentError(absl::StrCat(at, "the token is shorter than 16 characters"));
    const std::string tenant(fields[1]);
    if (!table->tenant_of.emplace(v1::Sha256Hex(std::string(fields[0])), tenant).second) {
      return absl::InvalidArgumentError(absl::StrCat(at, "the token appears twice"));
    }
    TenantQuotas q;
    std::vector<absl::string_view> named;  // a quota given twice on a line is refused (until
                                           // 2026-12-07 the last won: max_rigs=5 max_rigs=0 lifted it)
    for (size_t k = 2; k < fields.size(); ++k) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(fields[k], absl::MaxSplits('=', 1));
      if (std::find(named.begin(), named.end(), kv.first) != named.end()) {
        return absl::InvalidArgumentError(absl::StrCat(at, "quota \"", kv.first, "\" is given twice"));
      }
      named.push_back(kv.first);
      double value = 0;
      if (!absl::SimpleAtod(kv.second, &value) || !(value >= 0) || value > 1e18) {
        return absl::InvalidArgumentError(absl::StrCat(at, "\"", fields[k], "\": expected QUOTA=N with N >= 0"));
      }
      const bool known = kv.first == "max_rigs" || kv.first == "max_rig_bytes" || kv.first == "max_sessions" ||
                         kv.first == "max_frames_per_second" || kv.first == "max_shared_memory_bytes";
      // Counts and bytes are whole: a fraction was cut to 0, which is no limit (until 2026-12-07
      // max_rigs=0.5 let a tenant upload without bound). An unknown name is named as such below.
      if (known && kv.first != "max_frames_per_second" && value != std::floor(value)) {
        return absl::InvalidArgumentError(absl::StrCat(at, "\"", fields[k], "\": ", kv.first,
                                                       " is a whole number (0: no limit)"));
      }
      if (kv.first == "max_rigs") {
        q.max_rigs = uint64_t(value);
      } else if (kv.first == "max_rig_bytes") {
        q.max_rig_bytes = uint64_t(value);
      } else if (kv.first == "max_sessions") {
        q.max_sessions = uint64_t(value);
      } else if (kv.first == "max_frames_per_second") {
        q.max_frames_per_second = value;
      } else if (kv.first == "max_shared_memory_bytes") {
        q.max_shared_memory_bytes = uint64_t(value);
      } else {
        return absl::InvalidArgumentError(absl::StrCat(at, "unknown quota \"", kv.first,
                                                       "\" (max_rigs, max_rig_bytes, max_sessions, "
                                                       "max_frames_per_second, max_shared_memory_bytes)"));
      }
    }
    // A tenant on several lines (a token per machine, or an old and a new one while rotating):
    // the quotas are the tenant's, given on any of its lines, and lines that give them agree
    // (until 2026-12-07 the last line's replaced them, and a second token line without quotas
    // lifted every limit).
    if (fields.size() > 2) {
      if (auto it = quota_line.find(tenant); it != quota_line.end()) {
        const TenantQuotas& before = table->quotas[tenant];
        if (before.max_rigs != q.max_rigs || before.max_rig_bytes != q.max_rig_bytes ||
            before.max_sessions != q.max_sessions || before.max_frames_per_second != q.max_frames_per_second ||
            before.max_shared_memory_bytes != q.max_shared_memory_bytes) {
          return absl::InvalidArgumentError(absl::StrCat(at, "tenant ", tenant, "'s quotas differ from those on line ",
                                                         it->second, " (give them once, or the same on every line)"));
        }
      }
      quota_line.emplace(tenant, number);
      table->quotas[tenant] = q;
    } else {
      table->quotas.try_emplace(tenant);
    }
  }
  // A file of comments only refused every call (until 2026-12-03), also when a reload met it
  // half written.
  if (table->tenant_of.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token-file ", path, ": no \"TOKEN TENANT\" line (every call "
                                                   "would be refused)"));
  }
  return std::shared_ptr<const Parsed>(std::move(table));
}

absl::Status TokenTable::Load(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  auto table = Parse(path);
  if (!table.ok()) return table.status();
  std::lock_guard lock(mu_);
  path_ = path;
  table_ = *table;
  return absl::OkStatus();
}

absl::Status TokenTable::Reload() {
  if (!enabled()) return absl::OkStatus();
  auto table = Parse(path_);
  if (!table.ok()) return table.status();
  std::lock_guard lock(mu_);
  table_ = *table;
  generation_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

bool TokenTable::StillHolds(const grpc::CallbackServerContext& ctx, const std::string& tenant, uint64_t* seen) const {
  if (!enabled()) return true;
  const uint64_t now = generation_.load(std::memory_order_acquire);
  if (now == *seen) return true;
  *seen = now;
  auto t = Tenant(ctx);
  return t.ok() && *t == tenant;
}

size_t TokenTable::size() const {
  std::lock_guard lock(mu_);
  return table_ ? table_->tenant_of.size() : 0;
}

absl::StatusOr<std::string> TokenTable::Tenant(const grpc::CallbackServerContext& ctx) const {
  if (!enabled()) return std::string();
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("authorization: this server needs a bearer token (metadata \"authorization: Bearer TOKEN\")");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  absl::string_view token = value;
  // The scheme is case-insensitive (RFC 7235 2.1; until 2026-12-07 "bearer TOKEN" was refused).
  if (token.size() < 7 || !absl::EqualsIgnoreCase(token.substr(0, 7), "Bearer ")) {
    return absl::UnauthenticatedError("authorization: expected \"Bearer TOKEN\"");
  }
  token.remove_prefix(7);
  std::shared_ptr<const Parsed> table;
  {
    std::lock_guard lock(mu_);
    table = table_;
  }
  // Looked up by the token's hash: no comparison of the secret itself.
  auto found = table->tenant_of.find(v1::Sha256Hex(std::string(token)));
  if (found == table->tenant_of.end()) return absl::UnauthenticatedError("authorization: unknown token");
  return found->second;
}

TenantQuotas TokenTable::Quotas(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  if (!table_) return {};
  auto it = table_->quotas.find(tenant);
  return it == table_->quotas.end() ? TenantQuotas{} : it->second;
}

absl::Status TokenTable::TakeFrame(const std::string& tenant) {
  double wait = 0;
  if (TakeFrameOrWait(tenant, &wait)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("quota max_frames_per_second=", Quotas(tenant).max_frames_per_second,
                                                   " of tenant ", tenant, " is spent; send fewer frames"));
}

bool TokenTable::TakeFrameOrWait(const std::string& tenant, double* wait_seconds) {
  *wait_seconds = 0;
  if (!enabled()) return true;  // every frame passes here: no lock without tokens
  const double rate = Quotas(tenant).max_frames_per_second;
  if (rate <= 0) return true;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  auto [it, fresh] = buckets_.try_emplace(tenant);
  Bucket& b = it->second;
  const double burst = std::max(rate, 1.0);  // a second's frames, and at least one
  if (fresh) {
    b.tokens = burst;
  } else {
    b.tokens = std::min(burst, b.tokens + rate * std::chrono::duration<double>(now - b.last).count());
  }
  b.last = now;
  if (b.tokens < 1) {
    *wait_seconds = (1 - b.tokens) / rate;
    return false;
  }
  b.tokens -= 1;
  return true;
}

}  // namespace sinew::server
