// Small string helpers shared across modules.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace flashroll {

// `s` without leading and trailing whitespace (space, \t, \r, \n, \f, \v).
std::string_view TrimWhitespace(std::string_view s);

// Splits on `separator`, dropping empty items: "a,,b," -> {"a", "b"}; "" -> {}.
std::vector<std::string> SplitNonEmpty(std::string_view text, char separator);

// `v` with `digits` digits after the point ("%.*f"): FixedPoint(2.345, 1) -> "2.3".
std::string FixedPoint(double v, int digits);

}  // namespace flashroll
