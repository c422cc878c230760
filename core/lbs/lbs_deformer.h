#pragma once

#include "core/deformer/deformer.h"

namespace sinew {
absl::StatusOr<std::unique_ptr<Deformer>> CreateLbsDeformer(std::shared_ptr<const Rig> rig,
                                                            std::shared_ptr<const Prepared> prepared,
                                                            const DeformerConfig& config);
}
