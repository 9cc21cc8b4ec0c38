// The UTS step: the sandbox's own hostname in its own UTS namespace.
//
// Thread safety: UtsChild runs only in the freshly cloned child.
#pragma once

#include <string>

#include "sandbox/child_status.h"

namespace flashroll::sandbox {

ChildStatus UtsChild(const std::string& hostname);

}  // namespace flashroll::sandbox
