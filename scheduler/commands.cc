#include "scheduler/commands.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/flags.h"
#include "scheduler/job_config.h"
#include "scheduler/rl_job.h"

namespace flashroll {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

int RunJob(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  std::string resume;
  bool json = false;
  FlagParser flags("flashroll run CONFIG [--resume JOB]",
                   "Runs an RL job described by a `kind: rl_job` YAML file: samples every task x effort x G in\n"
                   "sandboxes on the embedded engine, scores them, writes each to the store as it finishes and\n"
                   "hands complete groups to a trainer (trainer API) unless `training: none`. Prints `job: ID`\n"
                   "first, a status line every few seconds, and a summary table. Ctrl-C pauses the job;\n"
                   "--resume continues it without losing or repeating a finished sample.");
  flags.Positional("CONFIG", &files, "the job's YAML config, e.g. configs/quickstart.yaml");
  flags.String("--resume", &resume, "resume the job of this name or id from the config's store");
  flags.Bool("--json", &json, "print the summary as JSON");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (files.size() != 1) return ReportFailure(Status::InvalidArgument("run: expected exactly one CONFIG"));

  auto file = LoadYamlFile(files[0]);
  if (!file.ok()) return ReportFailure(file.status());
  auto config = ParseJobConfig(*file);
  if (!config.ok()) return ReportFailure(config.status());
  std::ifstream in(files[0]);
  std::stringstream yaml;
  yaml << in.rdbuf();

  RlJobOptions options;
  options.config_yaml = yaml.str();
  options.resume = resume;
  options.stop = &g_stop;
  options.on_started = [](int64_t id) {
    std::printf("job: %lld\n", static_cast<long long>(id));
    std::fflush(stdout);
  };
  const bool tty = isatty(STDERR_FILENO);
  options.status_interval = std::chrono::milliseconds(tty ? 1000 : 10000);
  options.on_status = [tty](const std::string& line) {
    std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", line.c_str());
  };
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto summary = RunRlJob(*config, options);
  if (tty) std::fputc('\n', stderr);
  if (!summary.ok()) return ReportFailure(summary.status());
  if (json) {
    std::printf("%s\n", summary->ToJson().dump(2).c_str());
  } else {
    std::fputs(summary->ToText().c_str(), stdout);
  }
  if (summary->status != "completed") {
    std::fprintf(stderr, "paused: resume with `flashroll run %s --resume %lld`\n", files[0].c_str(),
                 static_cast<long long>(summary->job_id));
    return 130;
  }
  return 0;
}

}  // namespace

void RegisterSchedulerCommands(Registry& registry) {
  registry.AddCommand({"run", "run an RL job from a YAML config", RunJob});
  registry.AddConfigKind("rl_job", [](const ConfigFile& file) { return ParseJobConfig(file).status(); });
}

}  // namespace flashroll
