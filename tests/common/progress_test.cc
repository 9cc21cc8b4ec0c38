#include "common/progress.h"

#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// A clock the test moves by hand.
struct FakeClock {
  Clock::time_point now = Clock::time_point() + seconds(1000);
  std::function<Clock::time_point()> Fn() {
    return [this] { return now; };
  }
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

ProgressOptions PlainOptions(std::ostream* out, FakeClock* clock) {
  ProgressOptions options;
  options.mode = ProgressOptions::Mode::kPlain;
  options.out = out;
  options.unit = "files";
  options.clock = clock->Fn();
  return options;
}

TEST(Progress, PlainModePrintsALineEveryIntervalWithCounts) {
  std::ostringstream out;
  FakeClock clock;
  Progress progress("import", 10, PlainOptions(&out, &clock));
  EXPECT_FALSE(progress.tty());

  progress.Advance(2);
  clock.now += seconds(4);
  progress.Advance();
  EXPECT_EQ(out.str(), "") << "no line before the 5 s interval";

  clock.now += seconds(1);  // 5 s since start: 3 files in 5 s
  progress.Advance(2);
  std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "import: 5/10 files (50.0%), 1.0 files/s, ETA 5.0s");

  clock.now += seconds(2);
  progress.Advance();
  EXPECT_EQ(Lines(out.str()).size(), 1u) << "next line only 5 s after the last";

  clock.now += seconds(3);  // 10 s since start
  progress.Advance();
  lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "import: 7/10 files (70.0%), 0.7 files/s, ETA 4.3s");

  clock.now += seconds(2);
  progress.Advance(3);
  progress.Finish();
  lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2], "import: finished 10/10 files in 12s (0.8 files/s)");
  EXPECT_EQ(out.str().find('\r'), std::string::npos);

  progress.Finish();
  progress.Advance();
  EXPECT_EQ(Lines(out.str()).size(), 3u) << "nothing after Finish";
}

TEST(Progress, ShortJobPrintsOnlyTheFinalLineFromTheDestructor) {
  std::ostringstream out;
  FakeClock clock;
  {
    Progress progress("scan", 0, PlainOptions(&out, &clock));
    for (int i = 0; i < 42; ++i) progress.Advance();
    clock.now += milliseconds(500);
  }
  EXPECT_EQ(out.str(), "scan: finished 42 files in 0.5s (84.0 files/s)\n");
}

TEST(Progress, UnknownTotalHasNoPercentOrEta) {
  std::ostringstream out;
  FakeClock clock;
  Progress progress("walk", 0, PlainOptions(&out, &clock));
  clock.now += seconds(5);
  progress.Advance(1000);
  EXPECT_EQ(Lines(out.str()).at(0), "walk: 1000 files, 200 files/s");
}

TEST(Progress, TtyModeRedrawsInPlace) {
  std::ostringstream out;
  FakeClock clock;
  ProgressOptions options = PlainOptions(&out, &clock);
  options.mode = ProgressOptions::Mode::kTty;
  Progress progress("load", 4, options);
  EXPECT_TRUE(progress.tty());

  clock.now += seconds(1);
  progress.Advance();
  EXPECT_EQ(out.str(),
            "\rload [#######.......................] 1/4 files 25.0% 1.0 files/s ETA 3.0s\x1b[K");
  progress.Advance();  // within 100 ms of the last draw: no redraw
  EXPECT_EQ(out.str().find('\r', 1), std::string::npos);
  clock.now += milliseconds(100);
  progress.Advance(2);
  progress.Finish();
  std::string s = out.str();
  EXPECT_NE(s.find("\rload [##############################] 4/4 files 100.0%"), std::string::npos)
      << s;
  EXPECT_EQ(s.substr(s.rfind('\r')), "\rload: finished 4/4 files in 1.1s (3.6 files/s)\x1b[K\n");
}

TEST(Progress, AutoModeWithInjectedStreamIsPlain) {
  std::ostringstream out;
  ProgressOptions options;
  options.out = &out;
  Progress progress("x", 1, options);
  EXPECT_FALSE(progress.tty());
}

TEST(Progress, ConcurrentAdvanceCountsEverything) {
  std::ostringstream out;
  ProgressOptions options;
  options.mode = ProgressOptions::Mode::kPlain;
  options.out = &out;
  options.plain_interval = milliseconds(1);
  Progress progress("par", 80000, options);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) progress.Advance();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(progress.count(), 80000u);
  progress.Finish();
  std::vector<std::string> lines = Lines(out.str());
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("par: finished 80000/80000 items in ", 0), 0u) << lines.back();
  // Lines were written whole, never interleaved.
  for (const std::string& line : lines) EXPECT_EQ(line.rfind("par: ", 0), 0u) << line;
}

TEST(Progress, FormatDurationIsShort) {
  EXPECT_EQ(FormatDuration(milliseconds(4200)), "4.2s");
  EXPECT_EQ(FormatDuration(seconds(42)), "42s");
  EXPECT_EQ(FormatDuration(seconds(185)), "3m05s");
  EXPECT_EQ(FormatDuration(seconds(3720)), "1h02m");
}

}  // namespace
}  // namespace flashroll
