#include "scheduler/scheduler_benchmark.h"

#include <algorithm>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

namespace flashroll {
namespace {

std::string WriteTrajectories(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(SchedulerBenchmarkTest, BothModesRunTheSameWorkload) {
  SchedulerBenchmarkOptions options;
  options.trajectories_path = WriteTrajectories("traj.txt", "# tool ms, then tokens per turn\n10 3 2\n0 4\n");
  options.groups = 3;
  options.group_size = 2;
  options.in_flight = 4;
  options.threads = 1;
  options.repeats = 3;
  options.tools = BenchTools::kSleep;
  auto result = RunSchedulerBenchmark(options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const Json& r = *result;
  EXPECT_GT(r["seconds_sync"].get<double>(), 0);
  EXPECT_GT(r["seconds_async"].get<double>(), 0);
  // Interleaved, three runs of each (issue 22, item 6): the speedup is the
  // median of the paired ratios, with their range.
  EXPECT_EQ(r["repeats"], 3);
  EXPECT_EQ(r["order"], Json({"sync", "async", "async", "sync", "sync", "async"}));
  ASSERT_EQ(r["runs_seconds_sync"].size(), 3u);
  ASSERT_EQ(r["runs_seconds_async"].size(), 3u);
  std::vector<double> ratios;
  for (size_t i = 0; i < 3; ++i) {
    ratios.push_back(r["runs_seconds_sync"][i].get<double>() / r["runs_seconds_async"][i].get<double>());
  }
  std::sort(ratios.begin(), ratios.end());
  EXPECT_DOUBLE_EQ(r["speedup"].get<double>(), ratios[1]);
  EXPECT_DOUBLE_EQ(r["speedup_min"].get<double>(), ratios[0]);
  EXPECT_DOUBLE_EQ(r["speedup_max"].get<double>(), ratios[2]);
  // Busy is running-sequence-seconds over capacity, not "anything ran": it
  // cannot exceed the mean running batch over the in-flight capacity, and
  // the tool waits of this workload keep sequences idle.
  for (const char* mode : {"_async", "_sync"}) {
    const double busy = r[std::string("busy_fraction") + mode].get<double>();
    const double batch = r[std::string("mean_batch") + mode].get<double>();
    EXPECT_GT(busy, 0) << mode;
    EXPECT_LE(busy, batch / 4 + 1e-9) << mode;
    EXPECT_LT(busy, 0.9) << mode;
  }
  EXPECT_EQ(r["groups"], 3);
  EXPECT_EQ(r["group_size"], 2);
  EXPECT_EQ(r["in_flight"], 4);
}

// The default tools are commands in a sandbox of each sample's own: every
// tool call of the workload runs there, and none returns before its share
// of the recorded tool time.
TEST(SchedulerBenchmarkTest, ToolCallsRunInTheSamplesSandboxes) {
  if (::geteuid() != 0) GTEST_SKIP() << "sandboxed tools need root";
  SchedulerBenchmarkOptions options;
  // Every sample: three turns, so two tool calls of 150 ms each.
  options.trajectories_path = WriteTrajectories("tools.txt", "300 2 2 2\n");
  options.groups = 2;
  options.group_size = 2;
  options.in_flight = 4;
  options.threads = 1;
  options.repeats = 1;
  auto result = RunSchedulerBenchmark(options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const Json& r = *result;
  EXPECT_EQ(r["tools"], "sandbox");
  for (const char* mode : {"_sync", "_async"}) {
    EXPECT_EQ(r[std::string("runs_tool_calls") + mode], Json({8.0})) << mode;
    EXPECT_GE(r[std::string("tool_seconds") + mode].get<double>(), 0.15) << mode;
  }
  EXPECT_EQ(r["runs_tool_calls_sync"], r["runs_tool_calls_async"]);  // the same workload
}

TEST(SchedulerBenchmarkTest, BadTrajectoryLinesNameFileAndLine) {
  SchedulerBenchmarkOptions options;
  options.trajectories_path = WriteTrajectories("bad1.txt", "10 3\n-1 4\n");
  EXPECT_EQ(RunSchedulerBenchmark(options).status().message(), options.trajectories_path + ":2: want TOOL_MS TOKENS...");
  options.trajectories_path = WriteTrajectories("bad2.txt", "10 3 0\n");
  EXPECT_EQ(RunSchedulerBenchmark(options).status().message(), options.trajectories_path + ":1: a turn of 0 tokens");
  options.trajectories_path = WriteTrajectories("bad3.txt", "10\n");
  EXPECT_EQ(RunSchedulerBenchmark(options).status().message(), options.trajectories_path + ":1: no turns");
  options.trajectories_path = WriteTrajectories("bad4.txt", "# only a comment\n");
  EXPECT_EQ(RunSchedulerBenchmark(options).status().message(), options.trajectories_path + ": no trajectories");
  options.trajectories_path = "/nonexistent/traj.txt";
  EXPECT_EQ(RunSchedulerBenchmark(options).status().code(), Code::kNotFound);
  options.trajectories_path = WriteTrajectories("ok.txt", "1 1\n");
  options.in_flight = 2;
  options.group_size = 4;
  EXPECT_EQ(RunSchedulerBenchmark(options).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace flashroll
