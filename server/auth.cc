#include "server/auth.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sinew/v1/rig_id.h"

namespace sinew::server {

absl::StatusOr<std::shared_ptr<const TokenTable::Table>> TokenTable::Parse(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--token-file: cannot read ", path));
  auto table = std::make_shared<Table>();
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file ", path, ":", number, ": expected \"TOKEN TENANT\", got ", fields.size(), " fields"));
    }
    if (fields[0].size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file ", path, ":", number, ": the token is shorter than 16 characters"));
    }
    if (!table->emplace(v1::Sha256Hex(std::string(fields[0])), std::string(fields[1])).second) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file ", path, ":", number, ": the token appears twice"));
    }
  }
  return std::shared_ptr<const Table>(std::move(table));
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
  return absl::OkStatus();
}

size_t TokenTable::size() const {
  std::lock_guard lock(mu_);
  return table_ ? table_->size() : 0;
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
  if (!absl::ConsumePrefix(&token, "Bearer ")) {
    return absl::UnauthenticatedError("authorization: expected \"Bearer TOKEN\"");
  }
  std::shared_ptr<const Table> table;
  {
    std::lock_guard lock(mu_);
    table = table_;
  }
  // Looked up by the token's hash: no comparison of the secret itself.
  auto found = table->find(v1::Sha256Hex(std::string(token)));
  if (found == table->end()) return absl::UnauthenticatedError("authorization: unknown token");
  return found->second;
}

}  // namespace sinew::server
