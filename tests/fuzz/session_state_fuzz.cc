// Fuzz target: the bytes a client gives SetSessionState.method_state (or --state-dir's kept
// states), loaded as the server does (Deformer::LoadState) by the stateful session the first byte
// chooses (elastic implicit skinning, pbs with jiggle, SuperCages, swing-twist with unwrapping, an
// elastic -> LBS pipeline; tests/fuzz/session_states.h); its high bit: the trailing checksum made
// good first. Each input starts from the session's state after two frames. A refused state must
// leave the session as it was (its saved bytes before and after are equal); a state that loads
// must be one the session can go on from: a frame is deformed from it (its positions
// range-checked as the server checks them) and what the session then saves loads again. Abort
// otherwise.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/finite.h"
#include "core/util/state_bytes.h"
#include "tests/fuzz/session_states.h"
#include "tests/fuzz/verbose.h"

namespace {

using namespace sinew;

struct Context {
  std::vector<fuzz::StatefulSession> sessions = fuzz::MakeStatefulSessions();
  std::vector<std::string> played;  // each session's state after two frames: where inputs start
  std::vector<float> out;
};

Context& Ctx() {
  static Context* c = [] {
    auto* c = new Context;
    for (fuzz::StatefulSession& s : c->sessions) {
      c->out.assign(s.rig->positions.size(), 0.f);
      for (double t : {0.1, 0.2}) {
        const Pose pose = fuzz::StatefulSessionPose(*s.rig, t);
        FrameInput frame;
        frame.pose = &pose;
        if (!s.deformer->Deform(frame, c->out, nullptr).ok()) abort();
      }
      auto bytes = s.deformer->SaveState();
      if (!bytes.ok()) abort();
      c->played.push_back(std::move(*bytes));
    }
    return c;
  }();
  return *c;
}

}  // namespace

// The sessions are made before the first input (implicit skinning's composition operators take
// a minute under the sanitizers, beyond an input's timeout).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Ctx();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Context& c = Ctx();
  const size_t k = (data[0] & 0x7f) % c.sessions.size();
  fuzz::StatefulSession& s = c.sessions[k];
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  // The first byte's high bit: the trailing checksum made good over the rest, as a client may
  // (else mutations would rarely get past it to the checks of the values).
  if ((data[0] & 0x80) && bytes.size() >= 8) {
    const uint64_t sum = Fnv1a64(std::string_view(bytes).substr(0, bytes.size() - 8));
    std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  }
  // From a played state, so that a refusal that changed part of it would show.
  if (!s.deformer->LoadState(c.played[k]).ok()) abort();
  const auto before = s.deformer->SaveState();
  if (!before.ok()) abort();
  const absl::Status loaded = s.deformer->LoadState(bytes);
  fuzz::Say(s.name, loaded);
  if (!loaded.ok()) {
    const auto after = s.deformer->SaveState();
    if (!after.ok() || *after != *before) abort();  // a refusal changed the session
    return 0;
  }
  const Pose pose = fuzz::StatefulSessionPose(*s.rig, 0.4);
  c.out.assign(s.rig->positions.size(), 0.f);
  FrameInput frame;
  frame.pose = &pose;
  const absl::Status deformed = s.deformer->Deform(frame, c.out, nullptr);
  fuzz::Say("frame", deformed);
  if (deformed.ok()) (void)FirstBeyond(c.out, std::numeric_limits<float>::max());
  const auto saved = s.deformer->SaveState();
  if (!saved.ok()) abort();
  const absl::Status again = s.deformer->LoadState(*saved);
  fuzz::Say("saved again", again);
  if (!again.ok()) abort();  // the session saved bytes it cannot load
  return 0;
}
