// The trainer API's bearer token (trainer_api.token_file): read when the
// file exists, else made fresh, so a job runs with nothing prepared.
//
// Thread safety: plain function.
#pragma once

#include <string>

#include "common/status.h"

namespace flashroll {

// The token in `path` (LoadTokenFile's checks). When there is no such file,
// writes 32 random hex digits (getrandom) to a new file of mode 0600 —
// created exclusively, so a concurrent creator's token is read, never
// overwritten — and returns them. Errors name the path.
Result<std::string> LoadOrCreateTokenFile(const std::string& path);

}  // namespace flashroll
