#include "scheduler/scheduler_benchmark.h"

#include <fstream>

#include <gtest/gtest.h>

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
  auto result = RunSchedulerBenchmark(options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const Json& r = *result;
  EXPECT_GT(r["seconds_sync"].get<double>(), 0);
  EXPECT_GT(r["seconds_async"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(r["speedup"].get<double>(), r["seconds_sync"].get<double>() / r["seconds_async"].get<double>());
  for (const char* key : {"busy_fraction_async", "busy_fraction_sync"}) {
    EXPECT_GE(r[key].get<double>(), 0) << key;
    EXPECT_LE(r[key].get<double>(), 1) << key;
  }
  EXPECT_EQ(r["groups"], 3);
  EXPECT_EQ(r["group_size"], 2);
  EXPECT_EQ(r["in_flight"], 4);
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
