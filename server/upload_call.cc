// UploadRig: header, then chunks; hashed, parsed and validated on the upload threads
// (Service::uploads_), not on the frame pool: a large rig takes a thread for seconds.
#include <algorithm>
#include <cstdio>
#include <malloc.h>

#include "absl/strings/str_cat.h"
#include "core/cage/cage_check.h"
#include "server/convert.h"
#include "server/echo_id.h"
#include "server/service.h"
#include "server/upload_assembler.h"
#include "sinew/v1/rig_id.h"

namespace sinew::server {


class Service::UploadCall final : public grpc::ServerReadReactor<v1::UploadRigRequest> {
 public:
  UploadCall(Service* svc, grpc::CallbackServerContext* ctx, v1::UploadRigResponse* resp,
             absl::StatusOr<std::string> tenant)
      : svc_(svc), resp_(resp), upload_(svc->options_.max_rig_bytes) {
    svc_->active_calls_.fetch_add(1);
    {
      std::lock_guard lock(svc_->watch_mu_);
      svc_->upload_watch_[this] = {ctx, NowMs(), false};
    }
    if (svc_->draining()) {
      Fail(ShuttingDown());
      return;
    }
    if (!tenant.ok()) {
      Fail(tenant.status());
      return;
    }
    tenant_ = std::move(*tenant);
    StartRead(&req_);
  }

  void OnReadDone(bool ok) override {
    bool idle = false;  // cancelled by CancelIdleUploads
    {
      std::lock_guard lock(svc_->watch_mu_);
      auto it = svc_->upload_watch_.find(this);
      idle = it->second.cancelled;
      // Progress is a header or bytes: empty chunks do not hold an upload's reservation past
      // --upload-idle-timeout (until 2026-12-07 one every few seconds held it for good).
      if (ok && (req_.has_header() || !req_.chunk().empty())) it->second.last_ms = NowMs();
      if (!ok) svc_->upload_watch_.erase(it);  // nothing more to receive: not watched while it is parsed
    }
    if (!ok) {  // the client finished sending (or went away, or stalled and was cancelled)
      if (idle) {
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            "UploadRig received nothing for ", svc_->options_.upload_idle_seconds,
            " s (--upload-idle-timeout): cancelled, its announced bytes given back; send the rig again")));
      }
      if (auto st = upload_.Finish(); !st.ok()) return Fail(st);
      svc_->uploads_.Submit(&UploadCall::Finalize, this);
      return;
    }
    const bool header = !upload_.has_header();
    if (auto st = upload_.Add(req_); !st.ok()) return Fail(st);
    if (header && !upload_.sha256().empty()) {
      // Only a rig this tenant holds is skipped: another tenant's copy is not revealed, so its
      // bytes are received (and hashed) like any upload, then shared (FinalizeImpl). Before the
      // buffer is reserved and the quota checked: a rig already held is answered at once however
      // full the buffer is, and whatever the quota now (it holds the rig; until 2026-12-07 a quota
      // lowered since refused it).
      if (auto stored = svc_->rigs_.Find(upload_.sha256(), NowMs(), tenant_)) return Respond(*stored, true);
    }
    if (header) {
      // A rig announcing far more than the tenant's max_rig_bytes is refused before its bytes are
      // received, so that a tenant with a small quota cannot make the server buffer and hash up
      // to --max-rig-bytes. Far more: the quota counts resident bytes, which can be fewer than
      // the wire's (zero weights are dropped; a fixed-count weight table with one weight of 8
      // non-zero is about 3 wire bytes to 1 resident). Until 2026-12-07 anything past the quota
      // itself was refused here: a 20 000-vertex limb of 8 influences, 2.3 MB on the wire and
      // 1.45 MB resident, at a quota of 2 MB. Below the factor the exact check follows the parse.
      const uint64_t quota = svc_->tokens_.Quotas(tenant_).max_rig_bytes;
      if (quota > 0 && upload_.total() / kWireToResident > quota) {
        return Fail(absl::ResourceExhaustedError(
            absl::StrCat("quota max_rig_bytes=", quota, " of tenant ", tenant_, ": header.total_bytes announces ",
                         upload_.total(), ", more than ", kWireToResident,
                         " times the quota, refused before its bytes are sent (a rig is rarely that much larger on "
                         "the wire than in memory; one whose weight table is padded with zero weights is: leave "
                         "them out)")));
      }
    }
    if (header) {
      // Every upload in progress buffers what it announced: together bounded (--max-upload-bytes),
      // and a named tenant's to its share.
      const uint64_t max_rig = svc_->options_.max_rig_bytes;
      const uint64_t limit = svc_->options_.max_upload_bytes > 0 ? svc_->options_.max_upload_bytes : 2 * max_rig;
      const uint64_t share = std::max(limit / 2, std::min(limit, max_rig));
      const uint64_t total = upload_.total();
      std::lock_guard lock(svc_->upload_mu_);
      const uint64_t held = svc_->upload_bytes_;
      if (held + total > limit) {
        return Fail(absl::ResourceExhaustedError(absl::StrCat(
            "header.total_bytes: ", total, " more bytes would pass the ", limit,
            " that uploads in progress may buffer together (--max-upload-bytes; ", held,
            " held now): send it again once others are done")));
      }
      if (!tenant_.empty()) {
        const auto it = svc_->tenant_upload_bytes_.find(tenant_);
        const uint64_t own = it == svc_->tenant_upload_bytes_.end() ? 0 : it->second;
        if (own + total > share) {
          return Fail(absl::ResourceExhaustedError(absl::StrCat(
              "header.total_bytes: ", total, " more bytes would pass the ", share, " that tenant ", tenant_,
              "'s uploads in progress may buffer together (", own, " held now; a tenant's share of --max-upload-bytes ",
              limit, "): send it again once your others are done")));
        }
        svc_->tenant_upload_bytes_[tenant_] += total;
      }
      svc_->upload_bytes_ += total;
      reserved_ = total;
    }
    if (!header) {
      received_ += req_.chunk().size();
      svc_->metrics_.upload_bytes().Increment(static_cast<double>(req_.chunk().size()));
    }
    StartRead(&req_);
  }

  void OnDone() override {
    {
      std::lock_guard lock(svc_->watch_mu_);
      svc_->upload_watch_.erase(this);  // a call failed before its reads ended
    }
    const bool large = received_ >= kTrimBytes;
    if (reserved_ > 0) {
      std::lock_guard lock(svc_->upload_mu_);
      svc_->upload_bytes_ -= reserved_;
      if (!tenant_.empty()) {
        auto it = svc_->tenant_upload_bytes_.find(tenant_);
        if ((it->second -= reserved_) == 0) svc_->tenant_upload_bytes_.erase(it);
      }
    }
    svc_->active_calls_.fetch_sub(1);
    delete this;
    // The parse of a large upload leaves freed heap that glibc keeps (a failed 10 MB upload held
    // its process at 1.2 GB before entries were capped): give it back.
    if (large) malloc_trim(0);
  }

 private:
  static void Finalize(void* arg) {
    auto* self = static_cast<UploadCall*>(arg);
    self->FinalizeImpl();
  }

  void FinalizeImpl() {
    std::string& data = upload_.data();
    const std::string id = v1::Sha256Hex(data);
    if (auto st = upload_.CheckDigest(id); !st.ok()) return Fail(st);
    if (auto held = svc_->rigs_.Find(id, NowMs(), tenant_)) return Respond(*held, true);
    // The tenant's rig quotas, counted before the bytes are parsed where that is known: the count
    // of rigs, and the resident size of the copy another tenant holds, if one does (a rig of many
    // joints is larger in memory than on the wire: until 2026-12-03 the serialized size was
    // counted). A new rig's size is known once parsed (below): the serialized size does not
    // bound it from below (until 2026-12-07 it was taken to, refusing rigs whose resident size fit).
    std::unique_lock quota(svc_->quota_mu_);  // the check and the taking in one step
    // Held already (the same bytes uploaded at once by this tenant, the other one first): not a
    // new rig for its quota.
    if (auto held = svc_->rigs_.Find(id, NowMs(), tenant_)) {
      quota.unlock();
      return Respond(*held, true);
    }
    // Being kept by another of this tenant's uploads of these bytes: in its quota already.
    const bool counted = svc_->rigs_.Holds(id, tenant_);
    const size_t shared = svc_->rigs_.ResidentBytesOf(id);
    if (!counted) {
      if (auto st = CheckQuota(shared); !st.ok()) return Fail(st);
    }
    bool had = false;
    auto adopted = svc_->rigs_.Adopt(id, NowMs(), tenant_, &had);
    quota.unlock();
    if (auto stored = adopted) {
      // Newly this tenant's, and acknowledged (and visible to it: StoredRig::unsaved) only once
      // kept, with the bytes while no upload has kept them yet; else the hold is given back
      // (until 2026-12-03 the tenant kept holding a rig --state-dir did not have).
      if (!had) {
        const bool bytes = !stored->bytes_kept.load();
        if (auto st = svc_->KeepRig(id, bytes ? &data : nullptr); !st.ok()) {
          svc_->rigs_.ReleaseUnsaved(id, tenant_);
          (void)svc_->KeepRig(id, nullptr);  // the tenants list without this hold (or no files)
          return Fail(st);
        }
        if (bytes) stored->bytes_kept = true;
        svc_->rigs_.Saved(id, tenant_);
      }
      return Respond(*stored, had);
    }
    auto rig = svc_->RigFromBytes(data);
    if (!rig.ok()) return Fail(rig.status());
    // As the proto says: each precomputed entry names a method, and every sphere of a sphere-mesh
    // is in some bone (BuildRig checks the bones there are); and every cage vertex is on some
    // triangle (core/cage/cage_check.h). Checked at upload only: a rig kept in --state-dir before
    // these checks (2026-12-03, 2026-12-07) still loads.
    if (rig->sphere_mesh.sphere_count() > 0 && rig->sphere_mesh.bone_count() == 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("rig.sphere_mesh.bones: none, but ",
                                                          rig->sphere_mesh.sphere_count(),
                                                          " spheres (every sphere is in some bone)")));
    }
    for (size_t c = 0; c < rig->cages.size(); ++c) {
      if (auto st = CheckCageVerticesOnFaces(rig->cages[c], absl::StrCat("rig.cages[", c, "]")); !st.ok()) return Fail(st);
    }
    for (size_t p = 0; p < rig->precomputed.size(); ++p) {
      if (FindMethod(rig->precomputed[p].deformer) == nullptr) {
        return Fail(absl::InvalidArgumentError(absl::StrCat("rig.precomputed[", p, "].deformer: \"",
                                                            EchoId(rig->precomputed[p].deformer),
                                                            "\" names no method (GetServerInfo lists them)")));
      }
    }
    quota.lock();
    if (auto held = svc_->rigs_.Find(id, NowMs(), tenant_)) {  // as above
      quota.unlock();
      return Respond(*held, true);
    }
    if (!svc_->rigs_.Holds(id, tenant_)) {
      if (auto st = CheckQuota(rig->ResidentBytes()); !st.ok()) return Fail(st);
    }
    std::vector<std::string> evicted;
    // Another upload of the same bytes may have stored it meanwhile (Insert then returns that one).
    bool inserted = false;
    auto stored = svc_->rigs_.Insert(id, std::move(*rig), NowMs(), tenant_, &evicted, &inserted);
    if (stored.ok() && inserted && svc_->state_.HasRig(id)) {
      // Kept in --state-dir but not loaded at this start (no room under --max-store-bytes): the
      // tenants its file names hold it again with the uploader's, as a start that had room would
      // have loaded it; KeepRig then writes them all. Until 2026-12-07 the file was rewritten with
      // the uploader alone, and at the next start the others had lost the rig and their sessions.
      const int64_t now = NowMs();
      for (const std::string& t : svc_->state_.ReadTenants(id)) {
        if (t == tenant_) continue;
        bool had = false;
        svc_->rigs_.Adopt(id, now, t, &had);
        svc_->rigs_.Saved(id, t);
      }
    }
    quota.unlock();
    // Rigs evicted to make room leave --state-dir too (unless uploaded again meanwhile: KeepRig
    // writes what the store holds): a restart must not bring back more than the budget holds,
    // and evict rigs whose sessions it is about to restore.
    for (const std::string& gone : evicted) {
      if (auto st = svc_->KeepRig(gone, nullptr); !st.ok()) {
        std::fprintf(stderr, "sinew-server: --state-dir: evicted rig %s: %s\n", gone.c_str(), std::string(st.message()).c_str());
      }
    }
    if (!stored.ok()) return Fail(stored.status());
    // Acknowledged, and seen by GetRig and CreateSession, only once kept (--state-dir): a restart
    // must not lose a rig the client was told it has. If it cannot be kept, the upload fails and
    // the store lets go of it, unless another of this tenant's uploads kept it meanwhile (a
    // failure here deleted it under that upload until 2026-12-03).
    if (auto st = svc_->KeepRig(id, &data); !st.ok()) {
      svc_->rigs_.ReleaseUnsaved(id, tenant_);
      (void)svc_->KeepRig(id, nullptr);  // the tenants list without this hold (or no files)
      return Fail(st);
    }
    (*stored)->bytes_kept = true;
    svc_->rigs_.Saved(id, tenant_);
    std::string().swap(data);
    svc_->UpdateGauges();
    Respond(**stored, false);
  }

  void Respond(const StoredRig& stored, bool already) {
    resp_->set_rig_id(stored.id);
    resp_->set_already_resident(already);
    resp_->set_bytes_received(received_);
    v1::RigInfo* info = resp_->mutable_info();
    info->set_rig_id(stored.id);
    FillRigInfo(*stored.rig, *info);
    info->set_session_count(svc_->SessionCount(stored, tenant_));
    Finish(grpc::Status::OK);
  }

  void Fail(const absl::Status& st) { Finish(svc_->ToGrpc("UploadRig", st)); }

  // Whether one more rig of `bytes` fits the tenant's max_rigs and max_rig_bytes.
  // The tenant's rigs with one more of `bytes`.
  absl::Status CheckQuota(uint64_t bytes) const {
    const TenantQuotas q = svc_->tokens_.Quotas(tenant_);
    if (q.max_rigs == 0 && q.max_rig_bytes == 0) return absl::OkStatus();
    uint64_t rigs = 0, held = 0;
    for (const auto& r : svc_->rigs_.List(tenant_, /*unsaved=*/true)) {
      ++rigs;
      held += r->bytes;
    }
    if (q.max_rigs > 0 && rigs + 1 > q.max_rigs) {
      return absl::ResourceExhaustedError(absl::StrCat("quota max_rigs=", q.max_rigs, " of tenant ", tenant_, ": ",
                                                       rigs, " held; delete rigs you no longer use"));
    }
    if (q.max_rig_bytes > 0 && held + bytes > q.max_rig_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("quota max_rig_bytes=", q.max_rig_bytes, " of tenant ", tenant_,
                                                       ": ", held, " bytes held, this rig ", bytes));
    }
    return absl::OkStatus();
  }

  static constexpr uint64_t kTrimBytes = uint64_t{8} << 20;
  // The most wire bytes per resident byte the header check allows before refusing (above).
  static constexpr uint64_t kWireToResident = 4;

  Service* svc_;
  v1::UploadRigResponse* resp_;
  std::string tenant_;
  UploadAssembler upload_;
  v1::UploadRigRequest req_;
  uint64_t received_ = 0;
  uint64_t reserved_ = 0;  // of Service::upload_bytes_, given back in OnDone
};

grpc::ServerReadReactor<v1::UploadRigRequest>* Service::UploadRig(grpc::CallbackServerContext* ctx,
                                                                  v1::UploadRigResponse* resp) {
  return new UploadCall(this, ctx, resp, tokens_.Tenant(*ctx));
}

}  // namespace sinew::server
