#include "engine/device/device.h"

#include <charconv>
#include <filesystem>
#include <system_error>

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

int64_t ModelFileBytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return static_cast<int64_t>(fs::file_size(path, ec));
  if (!fs::is_directory(path, ec)) return 0;
  int64_t total = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) {
      total += static_cast<int64_t>(e.file_size(ec));
    }
  }
  return total;
}

}  // namespace flashroll::engine
