#include "engine/device/device.h"

#include <charconv>

namespace flashroll::engine {

Result<DeviceSpec> ParseDevice(const std::string& text) {
  if (text == "cpu") return DeviceSpec{};
  if (text == "cuda") return DeviceSpec{DeviceSpec::Kind::kCuda, 0};
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    int ordinal = -1;
    const char* begin = text.data() + 5;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(begin, end, ordinal);
    if (ec == std::errc() && ptr == end && ordinal >= 0) return DeviceSpec{DeviceSpec::Kind::kCuda, ordinal};
  }
  return Status::InvalidArgument("'" + text + "' is not a device (expected cpu, cuda or cuda:N)");
}

std::string DeviceName(const DeviceSpec& device) {
  return device.is_cuda() ? "cuda:" + std::to_string(device.ordinal) : "cpu";
}

}  // namespace flashroll::engine
