#include "scheduler/scheduler_benchmark.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "sandbox/sandbox.h"
#include "scheduler/sample_scheduler.h"
#include "tasks/rng.h"

namespace flashroll {
namespace {

using Clock = std::chrono::steady_clock;

struct Trajectory {
  int64_t tool_ms = 0;
  std::vector<int64_t> turn_tokens;
};

Result<std::vector<Trajectory>> LoadTrajectories(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("--trajectories: cannot read " + path);
  std::vector<Trajectory> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Trajectory t;
    int64_t tokens = 0;
    if (!(fields >> t.tool_ms) || t.tool_ms < 0) {
      return Status::InvalidArgument(path + ":" + std::to_string(number) + ": want TOOL_MS TOKENS...");
    }
    while (fields >> tokens) {
      if (tokens < 1) return Status::InvalidArgument(path + ":" + std::to_string(number) + ": a turn of " + std::to_string(tokens) + " tokens");
      t.turn_tokens.push_back(tokens);
    }
    if (t.turn_tokens.empty()) return Status::InvalidArgument(path + ":" + std::to_string(number) + ": no turns");
    out.push_back(std::move(t));
  }
  if (out.empty()) return Status::InvalidArgument(path + ": no trajectories");
  return out;
}

struct ModeResult {
  double seconds = 0, busy_fraction = 0, mean_batch = 0;
  std::vector<double> tool_seconds;  // each tool call's wall clock
};

constexpr int64_t kPromptTokens = 120;  // about the scaffold's system prompt and a task
constexpr int64_t kToolTokens = 40;     // a typical tool result

// A tool call of `ms`: python3 started in the sample's sandbox that returns
// once `ms` have passed since the call was sent (the host's clock: a
// sandbox has no time namespace), so a call costs the recorded time or
// what starting it costs, whichever is more.
Status RunTool(sandbox::Manager& manager, const std::string& id, int64_t ms) {
  const double deadline =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() +
      static_cast<double>(ms) / 1000.0;
  sandbox::ExecRequest request;
  request.argv = {"python3", "-c", "import sys, time; time.sleep(max(0.0, float(sys.argv[1]) - time.time()))",
                  std::to_string(deadline)};
  request.timeout = std::chrono::milliseconds(ms + 60'000);
  FR_ASSIGN_OR_RETURN(sandbox::ExecResult result, manager.Exec(id, request));
  if (result.exit_code != 0) {
    return Status::Internal("bench scheduler: the tool exited with " + std::to_string(result.exit_code) + ": " +
                            result.stderr_data);
  }
  return Status::Ok();
}

// Runs the workload under one dispatch mode on a fresh engine.
// `sandboxes`: where the tools run; null for sleeping tools.
Result<ModeResult> RunMode(const engine::Model& model, const SchedulerBenchmarkOptions& options,
                           const std::vector<Trajectory>& pool, bool synchronous, sandbox::Manager* sandboxes) {
  engine::EngineOptions engine_options;
  engine_options.threads = options.threads;
  engine_options.max_running = options.in_flight;
  engine_options.kv_memory_bytes = 512ll << 20;
  FR_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine, engine::Engine::Start(model, nullptr, engine_options));

  SchedulerPolicy policy;
  policy.group_size = options.group_size;
  policy.max_in_flight = options.in_flight;
  policy.max_per_task = options.group_size;
  policy.staleness_gate = true;
  policy.max_staleness = options.max_staleness;
  policy.batch_groups = options.batch_groups;
  policy.synchronous = synchronous;
  std::vector<GroupPlan> plan;
  for (int64_t g = 0; g < options.groups; ++g) plan.push_back({g + 1, g, "bench", 100, {}});
  const auto start = Clock::now();
  SampleScheduler scheduler(policy, plan, start);

  std::mutex mu;
  std::condition_variable cv;
  Status first_error;
  std::vector<double> tool_seconds;  // guarded by mu
  const int32_t vocab = static_cast<int32_t>(model.config().vocab_size);
  auto run_sample = [&](const SampleTicket& t) -> Status {
    // The same (group, slot) draws the same trajectory in both modes.
    TaskRng rng(options.seed * 1'000'003ull + static_cast<uint64_t>(t.group_id) * 131 + static_cast<uint64_t>(t.slot));
    const Trajectory& traj = pool[rng.Next() % pool.size()];
    std::vector<int32_t> conversation;
    for (int64_t i = 0; i < kPromptTokens; ++i) conversation.push_back(static_cast<int32_t>(rng.Next() % static_cast<uint64_t>(vocab)));
    std::string sandbox_id;
    if (sandboxes != nullptr) {
      FR_ASSIGN_OR_RETURN(sandbox_id, sandboxes->Create(sandbox::SandboxSpec()));
    }
    struct DestroyOnExit {
      sandbox::Manager* manager;
      const std::string& id;
      ~DestroyOnExit() {
        if (manager != nullptr) (void)manager->Destroy(id);
      }
    } destroy{sandboxes, sandbox_id};
    for (size_t turn = 0; turn < traj.turn_tokens.size(); ++turn) {
      engine::GenerationRequest request;
      request.prompt = conversation;
      request.max_tokens = traj.turn_tokens[turn];
      request.ignore_eos = true;
      request.sampling.temperature = 1.0;
      request.sampling.seed = rng.Next();
      FR_ASSIGN_OR_RETURN(std::vector<engine::Choice> choices, engine->Generate(std::move(request)));
      conversation.insert(conversation.end(), choices[0].tokens.begin(), choices[0].tokens.end());
      if (turn + 1 < traj.turn_tokens.size()) {
        const int64_t share = traj.tool_ms / static_cast<int64_t>(traj.turn_tokens.size() - 1);
        const auto called = Clock::now();
        if (sandboxes != nullptr) {
          FR_RETURN_IF_ERROR(RunTool(*sandboxes, sandbox_id, share));
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(share));
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          tool_seconds.push_back(std::chrono::duration<double>(Clock::now() - called).count());
        }
        for (int64_t i = 0; i < kToolTokens; ++i) conversation.push_back(static_cast<int32_t>(rng.Next() % static_cast<uint64_t>(vocab)));
      }
    }
    return Status::Ok();
  };

  // Running sequences integrated over time, sampled every 5 ms: each
  // sample's count holds until the next.
  std::atomic<bool> done{false};
  double running_seconds = 0, active_seconds = 0, monitored_seconds = 0;
  std::thread monitor([&] {
    Clock::time_point last = Clock::now();
    int64_t running = 0;
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      const Clock::time_point now = Clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      running_seconds += static_cast<double>(running) * dt;
      if (running > 0) active_seconds += dt;
      monitored_seconds += dt;
      running = engine->Stats().running;
      last = now;
    }
  });
  int64_t finished_unconsumed = 0;
  std::vector<std::thread> workers;
  for (int64_t w = 0; w < options.in_flight; ++w) {
    workers.emplace_back([&] {
      while (true) {
        std::optional<SampleTicket> ticket;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return !first_error.ok() || scheduler.done() || (ticket = scheduler.Next(Clock::now())); });
          if (!ticket) return;
        }
        Status s = run_sample(*ticket);
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok() && first_error.ok()) first_error = s;
        scheduler.Finish(*ticket, 0, !s.ok());
        // An instant trainer: each full batch of finished groups is consumed
        // at once, so the staleness gate bounds what may open as in a job.
        finished_unconsumed += static_cast<int64_t>(scheduler.TakeFinishedGroups().size());
        while (finished_unconsumed >= options.batch_groups) {
          scheduler.Consumed(options.batch_groups);
          finished_unconsumed -= options.batch_groups;
        }
        cv.notify_all();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  ModeResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  done = true;
  monitor.join();
  FR_RETURN_IF_ERROR(first_error);
  result.busy_fraction =
      monitored_seconds > 0 ? running_seconds / (static_cast<double>(options.in_flight) * monitored_seconds) : 0.0;
  result.mean_batch = active_seconds > 0 ? running_seconds / active_seconds : 0.0;
  result.tool_seconds = std::move(tool_seconds);
  return result;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

}  // namespace

Result<Json> RunSchedulerBenchmark(const SchedulerBenchmarkOptions& options) {
  if (options.groups < 1 || options.group_size < 1 || options.in_flight < options.group_size ||
      options.repeats < 1 || options.batch_groups < 1 || options.max_staleness < 0) {
    return Status::InvalidArgument(
        "bench scheduler: need groups >= 1, group size >= 1, in-flight >= group size, repeats >= 1, batch groups >= 1 "
        "and max staleness >= 0");
  }
  FR_ASSIGN_OR_RETURN(std::vector<Trajectory> pool, LoadTrajectories(options.trajectories_path));
  FR_ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> model, engine::Model::Load(options.model_path));
  std::unique_ptr<sandbox::Manager> sandboxes;
  if (options.tools == BenchTools::kSandbox) {
    FR_ASSIGN_OR_RETURN(sandboxes, sandbox::Manager::Open());
  }
  std::vector<ModeResult> sync, async;
  Json order = Json::array();
  for (int64_t r = 0; r < options.repeats; ++r) {
    // ABBA: sync first in even rounds, async first in odd ones.
    for (bool synchronous : {r % 2 == 0, r % 2 != 0}) {
      FR_ASSIGN_OR_RETURN(ModeResult result, RunMode(*model, options, pool, synchronous, sandboxes.get()));
      (synchronous ? sync : async).push_back(result);
      order.push_back(synchronous ? "sync" : "async");
    }
  }
  std::vector<double> ratios;
  for (size_t r = 0; r < sync.size(); ++r) ratios.push_back(sync[r].seconds / async[r].seconds);
  Json out = {{"speedup", Median(ratios)},
              {"speedup_min", *std::min_element(ratios.begin(), ratios.end())},
              {"speedup_max", *std::max_element(ratios.begin(), ratios.end())},
              {"groups", options.groups},
              {"group_size", options.group_size},
              {"in_flight", options.in_flight},
              {"repeats", options.repeats},
              {"tools", options.tools == BenchTools::kSandbox ? "sandbox" : "sleep"},
              {"order", order}};
  for (const auto& [suffix, runs] : {std::pair{"_sync", &sync}, std::pair{"_async", &async}}) {
    std::vector<double> seconds, busy, batch, tools, calls;
    for (const ModeResult& m : *runs) {
      seconds.push_back(m.seconds);
      busy.push_back(m.busy_fraction);
      batch.push_back(m.mean_batch);
      tools.insert(tools.end(), m.tool_seconds.begin(), m.tool_seconds.end());
      calls.push_back(static_cast<double>(m.tool_seconds.size()));
    }
    out[std::string("tool_seconds") + suffix] = tools.empty() ? 0.0 : Median(tools);
    out[std::string("runs_tool_calls") + suffix] = calls;
    out[std::string("seconds") + suffix] = Median(seconds);
    out[std::string("busy_fraction") + suffix] = Median(busy);
    out[std::string("mean_batch") + suffix] = Median(batch);
    out[std::string("runs_seconds") + suffix] = seconds;
  }
  return out;
}

}  // namespace flashroll
