#include "sandbox/uts.h"

#include <unistd.h>

namespace flashroll::sandbox {

ChildStatus UtsChild(const std::string& hostname) {
  if (::sethostname(hostname.data(), hostname.size()) != 0) {
    return ChildStatus::Errno("uts", "sethostname", hostname.c_str());
  }
  return ChildStatus::Ok();
}

}  // namespace flashroll::sandbox
