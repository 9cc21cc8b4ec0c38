#include "sandbox/state.h"

namespace flashroll::sandbox {

const char* StateName(State state) {
  switch (state) {
    case State::kRunning:
      return "running";
    case State::kFrozen:
      return "frozen";
    case State::kDestroyed:
      return "destroyed";
  }
  return "unknown";
}

const char* VerbName(Verb verb) {
  switch (verb) {
    case Verb::kExec:
      return "exec";
    case Verb::kFreeze:
      return "freeze";
    case Verb::kThaw:
      return "thaw";
    case Verb::kFiles:
      return "file access";
    case Verb::kDestroy:
      return "destroy";
  }
  return "unknown";
}

Status CheckVerb(State state, Verb verb, const std::string& id) {
  if (state == State::kDestroyed) return Status::NotFound("sandbox " + id + " was destroyed");
  bool allowed = false;
  switch (verb) {
    case Verb::kExec:
    case Verb::kFreeze:
      allowed = state == State::kRunning;
      break;
    case Verb::kThaw:
      allowed = state == State::kFrozen;
      break;
    case Verb::kFiles:
    case Verb::kDestroy:
      allowed = true;
      break;
  }
  if (allowed) return Status::Ok();
  return Status::FailedPrecondition("sandbox " + id + " is " + StateName(state) + ": " + VerbName(verb) +
                                    " not allowed");
}

}  // namespace flashroll::sandbox
