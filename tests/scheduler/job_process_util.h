// Test helpers for driving `flashroll run` as a process: start it with its
// output discarded, and wait until its store holds enough finished samples.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/store.h"

namespace flashroll::scheduler_test {

// The whole of a file the job or its trainer wrote ("" when it is missing).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Forks `flashroll run CONFIG`, stdout and stderr to /dev/null.
inline pid_t StartRunQuietly(const std::string& config) {
  const pid_t child = fork();
  if (child == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(FLASHROLL_BIN, FLASHROLL_BIN, "run", config.c_str(), nullptr);
    _exit(127);
  }
  return child;
}

// Polls the store until `count(*) FROM samples WHERE <where>` reaches
// `want`, for up to 2 minutes (under ASan beside other tests a sample can
// take 15 s); returns the last count.
inline int64_t WaitForSamples(const std::string& store_path, const std::string& where, int64_t want) {
  int64_t count = 0;
  for (int i = 0; i < 2400 && count < want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!std::filesystem::exists(store_path)) continue;
    auto db = store::OpenStore(store_path);
    if (!db.ok()) continue;
    auto stmt = (*db)->Prepare("SELECT count(*) FROM samples WHERE " + where);
    if (stmt.ok() && *stmt->Step()) count = stmt->ColumnInt64(0);
  }
  return count;
}

}  // namespace flashroll::scheduler_test
