// GetServerInfo and rig descriptions: what the server can do, from core's registry.
#include <map>

#include "absl/strings/str_cat.h"
#include "server/convert.h"
#include "server/service.h"
#include "server/version.h"

namespace sinew::server {
namespace {

void DescribeParams(std::span<const ParamSpec> specs, google::protobuf::RepeatedPtrField<v1::ParamInfo>& out) {
  for (const ParamSpec& p : specs) {
    v1::ParamInfo* pi = out.Add();
    pi->set_name(std::string(p.name));
    pi->set_type(std::string(ParamTypeName(p.type)));
    pi->set_default_value(std::string(p.default_value));
    pi->set_description(std::string(p.description));
    for (std::string_view c : p.choices) pi->add_choices(std::string(c));
    DescribeParams(p.items, *pi->mutable_items());
  }
}

}  // namespace

grpc::ServerUnaryReactor* Service::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                 const v1::GetServerInfoRequest*,
                                                 v1::ServerInfo* resp) {
  if (draining()) return Done(ctx, "GetServerInfo", ShuttingDown());
  const auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "GetServerInfo", tenant.status());
  resp->set_version(kVersion);
  resp->set_api_version("sinew.v1");
  const auto* svc = v1::DeformRequest::descriptor()->file()->FindServiceByName("Sinew");
  for (int i = 0; i < svc->method_count(); ++i) resp->add_rpcs(svc->method(i)->name());
  for (const MethodInfo& m : Methods()) {
    v1::MethodInfo* mi = resp->add_methods();
    mi->set_method(static_cast<v1::Method>(m.id));
    mi->set_name(std::string(m.name));
    mi->set_description(std::string(m.description));
    mi->set_stateful(m.stateful);
    mi->set_params_field(std::string(m.params_field));
    DescribeParams(m.params, *mi->mutable_params());
    for (std::string_view in : FrameInputNames(m.inputs)) mi->add_inputs(std::string(in));
    mi->set_vertex_states(m.vertex_states);
    mi->set_follows(std::string(StageInputName(m.follows)));
    mi->set_fallback(std::string(m.fallback));
    mi->add_backends(v1::BACKEND_CPU);
    if (gpu_ && m.device_stage) mi->add_backends(v1::BACKEND_GPU);
  }
  v1::BackendInfo* cpu = resp->add_backends();
  cpu->set_backend(v1::BACKEND_CPU);
  cpu->set_available(true);
  cpu->set_description(absl::StrCat("CPU, ", pool_.workers(), " worker threads"));
  v1::BackendInfo* gpu = resp->add_backends();
  gpu->set_backend(v1::BACKEND_GPU);
  gpu->set_available(gpu_ != nullptr);
  if (gpu_) {
    // With tokens, a device's rigs and sessions are the caller's own, as the totals below (until
    // 2026-12-03 they were the server's: a tenant could watch another's work come and go).
    std::map<int, uint32_t> own_rigs, own_sessions;
    if (tokens_.enabled()) {
      for (const auto& s : sessions_.List(*tenant)) {
        if (s->gpu) ++own_sessions[s->gpu->device()];  // set at creation, before the session is listed
      }
      for (const auto& r : rigs_.List(*tenant)) {
        std::lock_guard lock(r->prep_mu);
        if (r->gpu_rig) ++own_rigs[r->gpu_rig->device()];
      }
    }
    std::string d;
    for (const gpu::DeviceInfo& dev : gpu_->Devices()) {
      v1::DeviceInfo* di = resp->add_devices();
      di->set_index(dev.index);
      di->set_name(dev.name);
      di->set_total_bytes(dev.total_bytes);
      di->set_limit_bytes(dev.limit_bytes);
      di->set_used_bytes(dev.used_bytes);
      di->set_utilisation(dev.utilisation);
      di->set_queued_frames(dev.queued_frames);
      di->set_failed(dev.failed);
      di->set_running_frames(dev.running_frames);
      di->set_rigs(tokens_.enabled() ? own_rigs[dev.index] : dev.rigs);
      di->set_sessions(tokens_.enabled() ? own_sessions[dev.index] : dev.sessions);
      absl::StrAppend(&d, d.empty() ? "" : ", ", dev.name);
    }
    gpu->set_description(d);
  } else {
    gpu->set_description(gpu_unavailable_reason_);
  }
  resp->add_encodings(v1::OUTPUT_ENCODING_FLOAT32);
  resp->add_encodings(v1::OUTPUT_ENCODING_FLOAT16);
  resp->add_encodings(v1::OUTPUT_ENCODING_QUANTIZED16);
  resp->add_encodings(v1::OUTPUT_ENCODING_DELTA);
  v1::Limits* l = resp->mutable_limits();
  l->set_max_vertices_per_rig(static_cast<uint32_t>(options_.max_vertices));
  l->set_max_rig_bytes(options_.max_rig_bytes);
  l->set_max_sessions(static_cast<uint32_t>(options_.max_sessions));
  l->set_session_idle_ttl_seconds(options_.session_idle_ttl_seconds);
  l->set_worker_threads(static_cast<uint32_t>(pool_.workers()));
  l->set_max_joints(65535);
  l->set_max_message_bytes(options_.max_message_bytes);
  // With tokens, the caller's own (another tenant's are not its business).
  resp->set_sessions(static_cast<uint32_t>(tokens_.enabled() ? sessions_.List(*tenant).size() : sessions_.count()));
  resp->set_rigs(static_cast<uint32_t>(tokens_.enabled() ? rigs_.List(*tenant).size() : rigs_.count()));
  return Done(ctx, "GetServerInfo", absl::OkStatus());
}

uint32_t Service::SessionCount(const StoredRig& stored, const std::string& tenant) const {
  // A rig of one tenant counts every session on it, those being created included (the number
  // DeleteRig goes by); a shared one only the caller's own, so that no tenant learns of another.
  if (rigs_.TenantCount(stored) <= 1) return static_cast<uint32_t>(stored.sessions.load());
  return static_cast<uint32_t>(sessions_.CountOn(stored.id, tenant));
}

void Service::DescribeRig(StoredRig& stored, v1::RigInfo& info, bool with_joints, const std::string& tenant) {
  info.set_rig_id(stored.id);
  FillRigInfo(*stored.rig, info);
  if (!with_joints) info.clear_joints();
  info.set_session_count(SessionCount(stored, tenant));
  info.set_resident_bytes(stored.TotalBytes());
  std::lock_guard lock(stored.prep_mu);
  const int64_t now = NowMs();
  for (const auto& [key, p] : stored.preparations) {
    if (stored.VisibleLocked(key, tenant)) DescribePreparation(*p, now, *info.add_preparations());
  }
}

void Service::DescribePreparation(const Preparation& p, int64_t now_ms, v1::Preparation& out) {
  out.set_key(p.key);
  out.set_progress(p.progress.load());
  out.set_done(p.done);
  if (!p.status.ok()) out.set_error(std::string(p.status.message()));
  if (p.result) {
    out.set_bytes(p.result->Bytes());
    out.set_summary(p.result->Summary());
  }
  out.set_from_cache(p.from_cache);
  out.set_seconds(double((p.done ? p.finished_ms : now_ms) - p.started_ms) / 1000);
}

}  // namespace sinew::server
