// A session whose method needs a long per-rig preparation (MethodInfo::fallback, e.g.
// swing-twist's weights) is served at once: frames go to the fallback method (e.g. DQS) while the
// preparation runs on the worker pool, and to the method itself from the first frame after it is
// done. Each frame says which method produced it (Deformer::produced_by). If the preparation
// fails, the session keeps the fallback.
#pragma once

#include <memory>

#include "core/deformer/deformer.h"
#include "server/rig_store.h"

namespace sinew::server {

std::unique_ptr<Deformer> MakeFallbackDeformer(std::shared_ptr<StoredRig> rig, const MethodInfo& method,
                                               DeformerConfig config, std::unique_ptr<Deformer> fallback,
                                               std::string_view fallback_name);

}  // namespace sinew::server
