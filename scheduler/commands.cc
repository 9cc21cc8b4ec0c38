#include "scheduler/commands.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "common/flags.h"
#include "common/store.h"
#include "scheduler/export.h"
#include "scheduler/job_config.h"
#include "scheduler/rl_job.h"
#include "scheduler/scheduler_benchmark.h"

namespace flashroll {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

constexpr char kDefaultStore[] = "runs/quickstart.db";

// The job to resume and its config: from the store (--store, else CONFIG's
// `store:`, else runs/quickstart.db). A CONFIG given as well must be the
// tree the job was started with.
Result<JobConfig> ResumedJobConfig(const std::vector<std::string>& files, const std::string& resume,
                                   std::string store_path) {
  std::optional<ConfigFile> given;
  if (!files.empty()) {
    FR_ASSIGN_OR_RETURN(given, LoadYamlFile(files[0]));
    FR_ASSIGN_OR_RETURN(JobConfig config, ParseJobConfig(*given));
    if (store_path.empty()) store_path = config.store_path;
    if (store_path != config.store_path) {
      return Status::InvalidArgument("--store: " + store_path + ", but " + files[0] + " keeps its jobs in " +
                                     config.store_path);
    }
  }
  if (store_path.empty()) store_path = kDefaultStore;
  std::error_code ec;
  if (!std::filesystem::exists(store_path, ec)) return Status::NotFound("--store: no such file: " + store_path);
  std::string name, yaml;
  {
    FR_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Database> db, store::OpenStore(store_path));
    auto job_id = FindJob(*db, resume);
    if (!job_id.ok()) return job_id.status().Wrap("--resume (store " + store_path + ")");
    FR_ASSIGN_OR_RETURN(sqlite::Statement stmt, db->Prepare("SELECT name, config_yaml FROM jobs WHERE id = ?1"));
    FR_RETURN_IF_ERROR(stmt.Bind(1, *job_id));
    FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return Status::NotFound("--resume: job " + resume + " vanished from " + store_path);
    name = stmt.ColumnText(0);
    yaml = stmt.ColumnText(1);
  }
  FR_ASSIGN_OR_RETURN(ConfigFile stored, ParseYaml(yaml, "the config of job '" + name + "' in " + store_path));
  if (given) FR_RETURN_IF_ERROR(CheckSameJobConfig(*given, stored, name));
  FR_ASSIGN_OR_RETURN(JobConfig config, ParseJobConfig(given ? *given : stored));
  // The store it was found in, wherever its config says (a moved store).
  config.store_path = store_path;
  return config;
}

int RunJob(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  std::string resume, store_path;
  bool json = false;
  FlagParser flags("flashroll run CONFIG [--evaluate-only [--weights DIR]] | flashroll run --resume JOB [--store PATH] [CONFIG]",
                   "Runs an RL job described by a `kind: rl_job` YAML file: samples every task x effort x G in\n"
                   "sandboxes on the embedded engine, scores them, writes each to the store as it finishes and\n"
                   "hands complete groups to a trainer (trainer API) unless `training: none`. With a `training:`\n"
                   "map the job starts the trainer (training.command, default the Python trainer of\n"
                   "training.algorithm), restarts it if it dies, swaps in each checkpoint it publishes mid-rollout,\n"
                   "and ends when it has taken its steps; training.eval_tasks runs a fixed evaluation set before\n"
                   "and after. A missing trainer_api.token_file is created (a fresh token, mode 0600); a distill\n"
                   "job serves its training.teacher.model itself on a free port. Prints `job: ID` first, a status\n"
                   "line every few seconds, and a summary table (with training: the per-step table and the\n"
                   "evaluation's change with its standard error). Ctrl-C pauses the job; --resume continues it\n"
                   "without losing or repeating a finished sample, on the last weights, with the config stored\n"
                   "with the job (a CONFIG given too must be the same, or the run is refused naming the first\n"
                   "key that differs).");
  flags.Positional("CONFIG", &files, "the job's YAML config, e.g. configs/quickstart.yaml (optional with --resume)");
  flags.String("--resume", &resume, "resume the job of this name or id, with the config stored with it");
  flags.String("--store", &store_path,
               std::string("with --resume: the job's store (default: CONFIG's `store:`, else ") + kDefaultStore + ")");
  flags.Bool("--json", &json, "print the summary as JSON");
  bool evaluate_only = false;
  std::string weights;
  flags.Bool("--evaluate-only", &evaluate_only,
             "run only the fixed evaluation (training.eval_tasks, at training.eval_temperatures) on model.path: "
             "no sample, no trainer");
  flags.String("--weights", &weights,
               "with --evaluate-only: also evaluate this checkpoint beneath training.checkpoint_dir (e.g. "
               "runs/quickstart-checkpoints/v000020) and print the change from model.path, paired by episode");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (files.size() > 1) return ReportFailure(Status::InvalidArgument("run: expected at most one CONFIG"));
  if (!weights.empty() && !evaluate_only) {
    return ReportFailure(Status::InvalidArgument("--weights: only with --evaluate-only"));
  }
  if (evaluate_only && !resume.empty()) {
    return ReportFailure(Status::InvalidArgument("--evaluate-only: a new job only, not with --resume"));
  }
  if (resume.empty() && files.empty()) {
    return ReportFailure(Status::InvalidArgument("run: expected a CONFIG, or --resume JOB"));
  }
  if (resume.empty() && !store_path.empty()) {
    return ReportFailure(Status::InvalidArgument("--store: only with --resume (a new job's store is CONFIG's `store:`)"));
  }

  std::string yaml;
  Result<JobConfig> config = Status::Internal("unset");
  if (!resume.empty()) {
    config = ResumedJobConfig(files, resume, store_path);
  } else {
    auto file = LoadYamlFile(files[0]);
    if (!file.ok()) return ReportFailure(file.status());
    config = ParseJobConfig(*file);
    std::ifstream in(files[0]);
    std::stringstream text;
    text << in.rdbuf();
    yaml = text.str();
  }
  if (!config.ok()) return ReportFailure(config.status());
  if (evaluate_only && (!config->training.enabled || config->training.eval_tasks == 0)) {
    return ReportFailure(Status::InvalidArgument("--evaluate-only: " + files[0] +
                                                 " has no evaluation (a training: map with eval_tasks above 0)"));
  }

  RlJobOptions options;
  options.evaluate_only = evaluate_only;
  options.evaluate_weights = weights;
  options.config_yaml = yaml;
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
    std::fprintf(stderr, "paused: resume with `flashroll run --resume %lld --store %s`\n",
                 static_cast<long long>(summary->job_id), config->store_path.c_str());
    return 130;
  }
  return 0;
}

int Export(const std::vector<std::string>& args) {
  std::string store_path = kDefaultStore, job, format = "jsonl", output;
  bool all_attempts = false;
  FlagParser flags("flashroll export --job JOB [--store PATH] [--format jsonl] [--output FILE] [--all-attempts]",
                   "Writes a job's finished samples, one JSON object per line and one line per (group, slot):\n"
                   "sample_id, task_id, group_id, slot, effort, token_ids, logprobs, versions, loss_mask (the\n"
                   "mask it was trained with, once trained), reward, reward_parts, advantage, trained_at_version,\n"
                   "status.");
  flags.Bool("--all-attempts", &all_attempts, "also the superseded attempts (warm-up drops, interrupted samples)");
  flags.String("--job", &job, "the job's name or id");
  flags.String("--store", &store_path, "the job's store (the config's `store:`), default runs/quickstart.db");
  flags.String("--format", &format, "jsonl (the only format)");
  flags.String("--output", &output, "write here instead of stdout (replaced whole, never half-written)");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (job.empty()) return ReportFailure(Status::InvalidArgument("export: --job is required"));
  if (format != "jsonl") return ReportFailure(Status::InvalidArgument("--format: unknown format '" + format + "' (known: jsonl)"));
  if (!std::filesystem::exists(store_path)) {
    return ReportFailure(Status::NotFound("--store: no such file: " + store_path));
  }
  auto db = store::OpenStore(store_path);
  if (!db.ok()) return ReportFailure(db.status());
  auto job_id = FindJob(**db, job);
  if (!job_id.ok()) return ReportFailure(job_id.status().Wrap("--job"));
  Result<int64_t> written = 0;
  if (output.empty()) {
    written = ExportJsonl(**db, *job_id, std::cout, all_attempts);
    std::cout.flush();
  } else {
    const std::string temp = output + ".tmp";
    {
      std::ofstream out(temp, std::ios::trunc);
      if (!out) return ReportFailure(Status::IoError("--output: cannot write " + temp));
      written = ExportJsonl(**db, *job_id, out, all_attempts);
      out.close();
      if (written.ok() && !out) written = Status::IoError("--output: write failed: " + temp);
    }
    if (written.ok() && std::rename(temp.c_str(), output.c_str()) != 0) {
      written = Status::IoError("--output: rename " + temp + " to " + output + " failed");
    }
    if (!written.ok()) std::remove(temp.c_str());
  }
  if (!written.ok()) return ReportFailure(written.status());
  std::fprintf(stderr, "exported %lld samples of job %lld\n", static_cast<long long>(*written),
               static_cast<long long>(*job_id));
  return 0;
}

int BenchScheduler(const std::vector<std::string>& args) {
  SchedulerBenchmarkOptions options;
  int64_t threads = 0, seed = 1;
  bool json = false;
  FlagParser flags("flashroll bench scheduler [--model PATH] [--groups N] [--group-size G] [--in-flight K] [--repeats R] [--json]",
                   "Times sample-level asynchronous against synchronous batch-level dispatch on the same engine\n"
                   "and the same workload: N groups of G agent trajectories whose turn lengths and tool times\n"
                   "are drawn from a measured quickstart run, each mode R times, interleaved, under the job's\n"
                   "staleness gate, each tool call a command in the sample's own sandbox. Prints the median wall-clock speedup with its range, and per mode the\n"
                   "engine's busy fraction (running-sequence-seconds over capacity) and mean running batch.");
  flags.String("--model", &options.model_path, "model directory or GGUF file (default models/default)");
  flags.String("--trajectories", &options.trajectories_path, "per-sample tool ms and turn lengths (default bench/data/quickstart_trajectories.txt)");
  flags.Int("--groups", &options.groups, "groups to complete (default 32)");
  flags.Int("--group-size", &options.group_size, "samples per group G (default 8, the quickstart's)");
  flags.Int("--in-flight", &options.in_flight, "samples in flight (default 16)");
  flags.Int("--repeats", &options.repeats, "runs of each mode, interleaved (default 3)");
  flags.Int("--threads", &threads, "engine threads (default all cores)");
  flags.Int("--seed", &seed, "workload seed (default 1)");
  std::string tools = "sandbox";
  flags.String("--tools", &tools, "sandbox: each sample a sandbox, each tool call python3 in it (default); sleep: waits");
  flags.Bool("--json", &json, "print JSON");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (tools != "sandbox" && tools != "sleep") {
    return ReportFailure(Status::InvalidArgument("--tools: '" + tools + "' is not one of sandbox, sleep"));
  }
  options.tools = tools == "sandbox" ? BenchTools::kSandbox : BenchTools::kSleep;
  options.threads = static_cast<int>(threads);
  options.seed = static_cast<uint64_t>(seed);
  std::fprintf(stderr, "bench scheduler: %lld groups x %lld, %lld in flight: synchronous and asynchronous, %lld times each...\n",
               static_cast<long long>(options.groups), static_cast<long long>(options.group_size),
               static_cast<long long>(options.in_flight), static_cast<long long>(options.repeats));
  auto result = RunSchedulerBenchmark(options);
  if (!result.ok()) return ReportFailure(result.status());
  if (json) {
    std::printf("%s\n", result->dump().c_str());
  } else {
    std::printf("async %.1f s, sync %.1f s (medians): speedup %.2fx [%.2f, %.2f]; busy %.1f%% vs %.1f%%; mean batch %.1f vs %.1f\n",
                (*result)["seconds_async"].get<double>(), (*result)["seconds_sync"].get<double>(),
                (*result)["speedup"].get<double>(), (*result)["speedup_min"].get<double>(),
                (*result)["speedup_max"].get<double>(), 100 * (*result)["busy_fraction_async"].get<double>(),
                100 * (*result)["busy_fraction_sync"].get<double>(), (*result)["mean_batch_async"].get<double>(),
                (*result)["mean_batch_sync"].get<double>());
  }
  return 0;
}

}  // namespace

void RegisterSchedulerCommands(Registry& registry) {
  registry.AddCommand({"run", "run an RL job from a YAML config", RunJob});
  registry.AddCommand({"export", "write a job's samples as JSON Lines", Export});
  registry.AddCommand({"bench scheduler", "asynchronous vs synchronous dispatch on one workload (JSON with --json)",
                       BenchScheduler});
  registry.AddConfigKind("rl_job", [](const ConfigFile& file) { return ParseJobConfig(file).status(); });
}

}  // namespace flashroll
