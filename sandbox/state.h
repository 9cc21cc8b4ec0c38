// The states of a sandbox and which verbs each allows.
//
//   Create -> kRunning <-> kFrozen (Freeze / Thaw)
//   any state -> kDestroyed (Destroy, TTL expiry, init death)
//
// Thread safety: stateless functions.
#pragma once

#include <string>

#include "common/status.h"

namespace flashroll::sandbox {

enum class State { kRunning, kFrozen, kDestroyed };

enum class Verb { kExec, kFreeze, kThaw, kFiles, kDestroy };

const char* StateName(State state);
const char* VerbName(Verb verb);

// OK when `verb` is allowed in `state`; otherwise kFailedPrecondition
// ("sandbox <id> is frozen: exec not allowed"), or kNotFound once destroyed.
Status CheckVerb(State state, Verb verb, const std::string& id);

}  // namespace flashroll::sandbox
