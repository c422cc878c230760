#include "server/fallback_deformer.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"

namespace sinew::server {
namespace {

class FallbackDeformer final : public Deformer {
 public:
  FallbackDeformer(std::shared_ptr<StoredRig> rig, const MethodInfo& method, DeformerConfig config,
                   std::unique_ptr<Deformer> fallback, std::string_view fallback_name)
      : rig_(std::move(rig)),
        method_(method),
        config_(std::move(config)),
        key_(PreparationKey(method_, config_)),
        fallback_(std::move(fallback)),
        fallback_name_(fallback_name) {}

  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) override {
    return Active().Deform(frame, out, pool);
  }
  absl::Status Extras(const FrameExtras& extras) const override {
    return (own_ ? *own_ : *fallback_).Extras(extras);
  }
  // Asked before the frame, so it asks whichever will run it (until 2026-12-04 the fallback's
  // answer stood for a frame that went over to the method).
  absl::Status Offers(const FrameExtras& wanted) const override { return Active().Offers(wanted); }
  void Reset() override { (own_ ? *own_ : *fallback_).Reset(); }
  size_t StateBytes() const override { return fallback_->StateBytes() + (own_ ? own_->StateBytes() : 0); }
  std::string_view produced_by() const override { return own_ ? std::string_view() : fallback_name_; }
  // Goes over to the method first where it is prepared: a client that stopped sending frames
  // to save the session's state gets it (the method's, from rest), not UNAVAILABLE for ever.
  absl::StatusOr<std::string> SaveState() const override {
    if (Active(); own_) return own_->SaveState();
    return Unavailable("saved");
  }
  absl::Status LoadState(std::string_view bytes) override {
    if (Active(); own_) return own_->LoadState(bytes);
    return Unavailable("restored");
  }
  // Given to the method's deformer where it is prepared, else checked against the rig as the
  // session's creation checks them and kept for the deformer when it is made. Until 2026-12-04
  // they were kept unchecked: parameters the method refuses (pbs's jiggle without its attribute)
  // were accepted and then made the method fail at its creation, and the session served the
  // fallback for good.
  absl::Status SetParams(const DeformerConfig& config) override {
    if (Active(); own_) {
      if (auto st = own_->SetParams(config); !st.ok()) return st;
    } else if (!gave_up_ && method_.check != nullptr) {
      if (auto st = method_.check(*rig_->rig, config); !st.ok()) return st;
    }
    config_ = config;
    return absl::OkStatus();
  }

 private:
  absl::Status Unavailable(std::string_view done) const {
    const std::string name(method_.name);
    if (gave_up_) {
      return absl::FailedPreconditionError(absl::StrCat("the session serves ", fallback_name_, " because ", name,
                                                        " could not be made (its preparation failed): no ", name,
                                                        " state to be ", std::string(done)));
    }
    return absl::UnavailableError(absl::StrCat("the session serves ", fallback_name_, " while ", name,
                                               " prepares (RigInfo.preparations); its state can be ", std::string(done),
                                               " once ", name, " serves"));
  }

  // The method itself once its preparation is done (checked without waiting), else the fallback.
  // Made by the first call that finds it prepared, SaveState's too: the host calls a session's
  // deformer under the session's lock, one call at a time.
  Deformer& Active() const {
    if (own_ || gave_up_) return own_ ? *own_ : *fallback_;
    auto prepared = rig_->PreparedIfDone(key_);  // no allocation while it waits
    if (prepared.ok() && *prepared) {
      auto d = method_.create(rig_->rig, *prepared, config_);
      if (d.ok()) {
        own_ = std::move(*d);
      } else {
        gave_up_ = true;
        std::fprintf(stderr, "sinew-server: rig %.12s: %s stays on %s: %s\n", rig_->id.c_str(),
                     std::string(method_.name).c_str(), fallback_name_.c_str(), std::string(d.status().message()).c_str());
      }
    } else if (!prepared.ok()) {
      gave_up_ = true;  // the preparation failed: keep serving the fallback
    }
    return own_ ? *own_ : *fallback_;
  }

  std::shared_ptr<StoredRig> rig_;
  const MethodInfo& method_;
  DeformerConfig config_;
  std::string key_;
  std::unique_ptr<Deformer> fallback_;
  mutable std::unique_ptr<Deformer> own_;  // made by Active
  std::string fallback_name_;
  mutable bool gave_up_ = false;
};

}  // namespace

std::unique_ptr<Deformer> MakeFallbackDeformer(std::shared_ptr<StoredRig> rig, const MethodInfo& method,
                                               DeformerConfig config, std::unique_ptr<Deformer> fallback,
                                               std::string_view fallback_name) {
  return std::make_unique<FallbackDeformer>(std::move(rig), method, std::move(config), std::move(fallback),
                                            fallback_name);
}

}  // namespace sinew::server
