// Base64 (RFC 4648 section 4: the standard alphabet A-Z a-z 0-9 + /, padded
// with '=' to a multiple of four characters), for binary data carried in
// JSON strings, such as MoE routing over HTTP (engine/server/openai_server.h).
//
// The decoder takes only the canonical encoding of some bytes, what
// Base64Encode (or Python's base64.b64encode) writes: no whitespace, no
// line breaks, no URL-safe alphabet, padding required, and the unused low
// bits of the last character zero. Anything else is refused, so a corrupted
// or truncated string is an error rather than other bytes.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace flashroll {

// The base64 text of `bytes`: 4 * ceil(n / 3) characters.
std::string Base64Encode(std::span<const uint8_t> bytes);

// The bytes `text` encodes. Errors (InvalidArgument), naming the offset:
// "length 7 is not a multiple of 4", "invalid character '!' at offset 5",
// "padding '=' at offset 2 before the end", "nonzero bits after the last
// byte at offset 3".
Result<std::vector<uint8_t>> Base64Decode(std::string_view text);

}  // namespace flashroll
