// The bytes of a stateful method's session snapshot (Deformer::SaveState): a magic string, plain
// values and arrays in host byte order, then an FNV-1a 64 of everything before it. StateWriter
// appends; StateReader checks the magic and the checksum once, then reads in the same order and
// answers DATA_LOSS when the bytes end early or run on. Header-only, allocation only in the
// writer's string.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sinew {

inline uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (char c : bytes) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

class StateWriter {
 public:
  explicit StateWriter(std::string_view magic) : out_(magic) {}
  template <class T>
  void Put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  template <class T>
  void PutArray(std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(values.data()), values.size_bytes());
  }
  // `bytes` zero bytes (an array that is not there, kept for a fixed layout).
  void PutZeros(size_t bytes) { out_.append(bytes, '\0'); }
  // The bytes with their checksum appended.
  std::string Finish() && {
    const uint64_t sum = Fnv1a64(out_);
    Put(sum);
    return std::move(out_);
  }

 private:
  std::string out_;
};

class StateReader {
 public:
  // `what` names the state in errors ("an elastic-implicit session state").
  StateReader(std::string_view bytes, std::string_view magic, std::string_view what)
      : bytes_(bytes), at_(magic.size()), what_(what) {
    if (bytes.substr(0, magic.size()) != magic) {
      status_ = absl::InvalidArgumentError(absl::StrCat("state: not ", std::string(what)));
      return;
    }
    if (bytes.size() < magic.size() + sizeof(uint64_t)) {
      status_ = absl::DataLossError(absl::StrCat("state: ", bytes.size(), " bytes: truncated"));
      return;
    }
    uint64_t sum;
    std::memcpy(&sum, bytes.data() + bytes.size() - sizeof sum, sizeof sum);
    if (sum != Fnv1a64(bytes.substr(0, bytes.size() - sizeof sum))) {
      status_ = absl::DataLossError("state: its checksum does not match its bytes (corrupted or truncated)");
      return;
    }
    end_ = bytes.size() - sizeof sum;
  }
  // OK until a read ran past the end (or the header was refused).
  const absl::Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

  template <class T>
  T Get() {
    T value{};
    Read(&value, sizeof value);
    return value;
  }
  template <class T>
  void GetArray(std::span<T> values) {
    static_assert(std::is_trivially_copyable_v<T>);
    Read(values.data(), values.size_bytes());
  }
  size_t remaining() const { return ok() ? end_ - at_ : 0; }
  // DATA_LOSS unless every byte before the checksum was read (call after the last Get).
  absl::Status Done() const {
    if (!ok()) return status_;
    if (at_ != end_) {
      return absl::DataLossError(absl::StrCat("state: ", end_ - at_, " bytes past what ", std::string(what_), " holds"));
    }
    return absl::OkStatus();
  }

 private:
  void Read(void* to, size_t n) {
    if (!ok() || n == 0) return;
    if (n > end_ - at_) {
      status_ = absl::DataLossError(absl::StrCat("state: ", bytes_.size(), " bytes end before what ", std::string(what_), " holds"));
      return;
    }
    std::memcpy(to, bytes_.data() + at_, n);
    at_ += n;
  }

  std::string_view bytes_;
  size_t at_ = 0, end_ = 0;
  std::string_view what_;
  absl::Status status_;
};

}  // namespace sinew
