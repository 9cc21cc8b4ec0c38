#include "common/reasoning_effort.h"

#include <array>
#include <charconv>
#include <utility>

namespace flashroll {
namespace {

constexpr std::array<std::pair<std::string_view, int>, 3> kPresets = {{{"low", 50}, {"high", 75}, {"max", 100}}};

}  // namespace

std::string ReasoningEffortValues() {
  std::string values;
  for (const auto& [name, effort] : kPresets) {
    values += "\"" + std::string(name) + "\" (" + std::to_string(effort) + "), ";
  }
  return values.substr(0, values.size() - 2) + " or an integer " + std::to_string(kMinReasoningEffort) + "-" +
         std::to_string(kMaxReasoningEffort);
}

Result<int> ParseReasoningEffort(std::string_view text) {
  for (const auto& [name, effort] : kPresets) {
    if (text == name) return effort;
  }
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (!text.empty() && error == std::errc() && end == text.data() + text.size() && value >= kMinReasoningEffort &&
      value <= kMaxReasoningEffort) {
    return value;
  }
  return Status::InvalidArgument("reasoning effort \"" + std::string(text) + "\" is not one of " +
                                 ReasoningEffortValues());
}

std::string ReasoningEffortLine(int effort) { return "Reasoning Effort: " + std::to_string(effort); }

std::string WithReasoningEffort(std::string_view system, int effort) {
  std::string text(system);
  if (!text.empty()) text += "\n";
  return text + ReasoningEffortLine(effort);
}

}  // namespace flashroll
