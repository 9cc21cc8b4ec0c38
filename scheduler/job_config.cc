#include "scheduler/job_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/reasoning_effort.h"
#include "engine/device/device.h"
#include "tasks/instance.h"
#include "tasks/task.h"
#include "rollout/sandbox_workspace.h"
#include "tasks/task_file.h"

namespace flashroll {

namespace {

Schema TrainingSchema() {
  return Schema::Map()
      .Optional("algorithm", Schema::Enum({"grpo", "distill"}))
      .Optional("steps", Schema::Int(1, 10'000'000))
      .Optional("learning_rate", Schema::Float(0, 1))
      .Optional("clip", Schema::Float(0, 10))
      .Optional("ratio_bound", Schema::Enum({"dual_clip", "truncated_is", "none"}))
      .Optional("ratio_cap", Schema::Float(1, 1000))
      .Optional("kl", Schema::Float(0, 1000))
      .Optional("negative_weight", Schema::Float(0, 1))
      .Optional("entropy_weight", Schema::Float(-10, 10))
      .Optional("grad_clip", Schema::Float(0, 1e6))
      .Optional("loss_agg", Schema::Enum({"token_mean", "dr_grpo"}))
      .Optional("command", Schema::List(Schema::String(), 1))
      .Optional("checkpoint_dir", Schema::String())
      .Optional("restarts", Schema::Int(0, 100))
      .Optional("teacher", Schema::Map()
                               .Optional("model", Schema::String())
                               .Optional("threads", Schema::Int(1, 256))
                               .Optional("kv_memory", Schema::ByteSize(1ull << 20))
                               .Optional("url", Schema::String())
                               .Optional("name", Schema::String())
                               .Optional("token_file", Schema::String()))
      .Optional("eval_tasks", Schema::Int(0, 100'000))
      .Optional("eval_seed", Schema::Int(0, tasks::kMaxSetSeed))
      .Optional("test_seed", Schema::Int(0, tasks::kMaxSetSeed))
      .Optional("test_tasks", Schema::Int(1, 100'000))
      .Optional("eval_temperatures", Schema::List(Schema::Float(0, 10), 1));
}

}  // namespace

Schema JobConfigSchema(bool training_map) {
  return Schema::Map()
      .Required("kind", Schema::Enum({"rl_job"}))
      .Required("name", Schema::String())
      .Optional("store", Schema::String())
      .Required("model", Schema::Map()
                             .Required("path", Schema::String())
                             .Optional("threads", Schema::Int(1, 256))
                             .Optional("kv_memory", Schema::ByteSize(1ull << 20))
                             .Optional("device", Schema::String())
                             .Optional("sessions", Schema::Bool())
                             .Optional("reprefill_older_than", Schema::Int(-1, 1'000'000)))
      .Optional("policy", Schema::Map()
                              .Required("url", Schema::String())
                              .Required("model", Schema::String())
                              .Optional("api_key_file", Schema::String()))
      .Required("tasks", Schema::Map()
                             .Optional("files", Schema::List(Schema::String(), 1))
                             .Optional("families", Schema::List(Schema::String(), 1))
                             .Optional("count", Schema::Int(1, 10'000'000))
                             .Optional("seed", Schema::Int(0, tasks::kMaxSetSeed))
                             .Optional("min_difficulty", Schema::Int(1, kMaxDifficulty))
                             .Optional("max_difficulty", Schema::Int(1, kMaxDifficulty)))
      .Optional("rollout", Schema::Map()
                               .Optional("scaffold", Schema::Enum({"bash_block", "json_tools", "xml_tools"}))
                               .Optional("max_turns", Schema::Int(1, 1000))
                               .Optional("max_tokens", Schema::Int(1, 1'000'000))
                               .Optional("temperature", Schema::Float(0, 10))
                               // Presets or integers, read by ParseReasoningEffort below.
                               .Optional("efforts", Schema::List(Schema::Any(), 1))
                               // Named so that asking for them gets a reason, not "unknown key".
                               .Optional("top_k", Schema::Any())
                               .Optional("top_p", Schema::Any())
                               .Optional("min_p", Schema::Any())
                               .Optional("repetition_penalty", Schema::Any())
                               .Optional("presence_penalty", Schema::Any())
                               .Optional("frequency_penalty", Schema::Any()))
      .Optional("sandbox", Schema::Map()
                               .Optional("image", Schema::String())
                               .Optional("net", Schema::Enum({"none", "policy"}))
                               .Optional("memory", Schema::ByteSize(4ull << 20))
                               .Optional("disk", Schema::ByteSize(1ull << 20))
                               .Optional("pids", Schema::Int(1, 1'000'000))
                               .Optional("cpus", Schema::Float(0.01, 1024))
                               .Optional("timeout", Schema::Duration(1))
                               .Optional("allow_unenforced_limits", Schema::Bool())
                               // USER[:GROUP] or :GROUP, read by ParseUserGroup below.
                               .Optional("user", Schema::String())
                               .Optional("max", Schema::Map()
                                                    .Optional("memory", Schema::ByteSize(4ull << 20))
                                                    .Optional("disk", Schema::ByteSize(1ull << 20))
                                                    .Optional("pids", Schema::Int(1, 1'000'000))
                                                    .Optional("cpus", Schema::Float(0.01, 4096))
                                                    .Optional("allow_rules", Schema::Int(0, 1024))))
      .Optional("scheduler", Schema::Map()
                                 .Optional("group_size", Schema::Int(1, 1024))
                                 .Optional("max_in_flight", Schema::Int(1, 1'000'000))
                                 .Optional("max_per_task", Schema::Int(1, 1'000'000))
                                 .Optional("max_staleness", Schema::Int(0, 1000))
                                 .Optional("batch_groups", Schema::Int(1, 100'000))
                                 .Optional("warmup_samples", Schema::Int(0, 10'000'000))
                                 .Optional("warmup_min_tokens", Schema::Int(0, 10'000'000))
                                 .Optional("rate_limits", Schema::Any())
                                 .Optional("sample_timeout", Schema::Duration(0))
                                 .Optional("stall_timeout", Schema::Duration(0))
                                 .Optional("infra_retries", Schema::Int(0, 100))
                                 .Optional("max_samples", Schema::Int(0, 1'000'000'000))
                                 .Optional("synchronous", Schema::Bool())
                                 .Optional("dynamic_sampling", Schema::Enum({"none", "reward", "verifier"}))
                                 .Optional("task_selection", Schema::Map()
                                                                 .Optional("min_pass_rate", Schema::Float(0, 1))
                                                                 .Optional("max_pass_rate", Schema::Float(0, 1))
                                                                 .Optional("window", Schema::Int(1, 1'000'000))
                                                                 .Optional("min_samples", Schema::Int(0, 1'000'000))
                                                                 .Optional("probe_every", Schema::Int(1, 1'000'000))))
      .Optional("rewards", Schema::Map()
                               .Optional("k0", Schema::Float(0, 100))
                               .Optional("c_max", Schema::Float(0, 100))
                               .Optional("l_norm", Schema::Float(1, 1e9))
                               .Optional("lambda", Schema::Float(0.001, 1000))
                               .Optional("length_penalty", Schema::Enum({"all", "success"}))
                               .Optional("advantage", Schema::Enum({"grpo", "dr_grpo"}))
                               .Optional("failed", Schema::Enum({"zero_advantage", "exclude"})))
      .Optional("training", training_map ? TrainingSchema() : Schema::Enum({"none"}))
      .Optional("trainer_api", Schema::Map()
                                   .Optional("listen", Schema::String())
                                   .Optional("token_file", Schema::String())
                                   .Optional("lease_timeout", Schema::Duration(100)));
}

namespace {

// The node to point at: the key itself when the file has it, else the
// section, else the top level, so every error has a line.
YAML::Node Where(const YAML::Node& root, const char* section, const char* key) {
  const YAML::Node s = root[section];
  if (s.IsDefined() && s.IsMap() && s[key].IsDefined()) return s[key];
  if (s.IsDefined()) return s;
  return root;
}

// The context length in a Hugging Face config.json, or 0 when unknown.
int64_t ModelContext(const std::string& model_path) {
  std::ifstream in(std::filesystem::path(model_path) / "config.json");
  if (!in) return 0;
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() || !config.contains("max_position_embeddings") ||
      !config["max_position_embeddings"].is_number_integer()) {
    return 0;
  }
  return config["max_position_embeddings"].get<int64_t>();
}

// A Hugging Face tokenizer file, parsed; null when absent or unreadable.
nlohmann::json ReadJsonFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// Why the teacher's tokenizer is not the student's, or "" when the two
// directories hold the same tokenizer.json and vocab_size. A GGUF file
// carries its tokenizer inside; the job compares those when it loads them.
std::string TokenizerDifference(const std::string& student, const std::string& teacher) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(student, ec) || !fs::is_directory(teacher, ec)) return "";
  const nlohmann::json a = ReadJsonFile(fs::path(student) / "tokenizer.json");
  const nlohmann::json b = ReadJsonFile(fs::path(teacher) / "tokenizer.json");
  if (a != b) {
    return teacher + "/tokenizer.json is not " + student + "/tokenizer.json (model.path's)";
  }
  const nlohmann::json ca = ReadJsonFile(fs::path(student) / "config.json");
  const nlohmann::json cb = ReadJsonFile(fs::path(teacher) / "config.json");
  const auto vocab = [](const nlohmann::json& config) -> nlohmann::json {
    return config.is_object() && config.contains("vocab_size") ? config["vocab_size"] : nlohmann::json(nullptr);
  };
  if (vocab(ca) != vocab(cb)) {
    return "its config.json has vocab_size " + vocab(cb).dump() + ", model.path's " + vocab(ca).dump();
  }
  return "";
}

// training.teacher: required by distill (a model the job serves, or a
// running server), with the student's tokenizer; unused by grpo.
Status CheckTeacher(const ConfigFile& file, const JobConfig& c) {
  const YAML::Node& root = file.root;
  const JobConfig::Training::Teacher& t = c.training.teacher;
  const YAML::Node node = Where(root, "training", "teacher");
  const bool named = root["training"]["teacher"].IsDefined();
  if (c.training.algorithm != "distill") {
    if (named) return file.ErrorAt(node, "training.teacher", "only training.algorithm distill has a teacher");
    return Status::Ok();
  }
  if (t.model.empty() == t.url.empty()) {
    return file.ErrorAt(node, "training.teacher",
                        "required when training.algorithm is distill: give model (a model directory the job "
                        "serves, e.g. {model: models/default-moe}) or url and name (a running `flashroll serve`), "
                        "not both");
  }
  if (!t.url.empty()) {
    if (t.name.empty()) {
      return file.ErrorAt(node, "training.teacher.name", "required with training.teacher.url (its served model name)");
    }
    return Status::Ok();
  }
  const YAML::Node model = node["model"];
  for (const char* key : {"name", "token_file"}) {
    if (node[key].IsDefined()) {
      return file.ErrorAt(node[key], std::string("training.teacher.") + key,
                          "only with training.teacher.url; the job names and guards the teacher it serves itself");
    }
  }
  std::error_code ec;
  if (!std::filesystem::exists(t.model, ec)) {
    return file.ErrorAt(model, "training.teacher.model", "no such file or directory: " + t.model);
  }
  if (const std::string why = TokenizerDifference(c.model.path, t.model); !why.empty()) {
    return file.ErrorAt(model, "training.teacher.model",
                        "the teacher must share the student's tokenizer (distillation compares their "
                        "distributions token by token): " + why);
  }
  return Status::Ok();
}

// Where two YAML trees first differ: the key path, the value on each side
// (undefined where the key is absent) and the node of `given` to point at.
struct YamlDifference {
  std::string key;
  YAML::Node given, stored, anchor;
};

std::optional<YamlDifference> FirstDifference(const YAML::Node& given, const YAML::Node& stored,
                                              const std::string& path) {
  const auto at = [&](const std::string& key) { return path.empty() ? key : path + "." + key; };
  const YAML::Node absent(YAML::NodeType::Undefined);
  if (given.Type() != stored.Type() || (given.IsScalar() && given.Scalar() != stored.Scalar())) {
    return YamlDifference{path, given, stored, given};
  }
  if (given.IsSequence()) {
    for (size_t i = 0; i < given.size() || i < stored.size(); ++i) {
      const std::string item = path + "[" + std::to_string(i) + "]";
      if (i >= given.size()) return YamlDifference{item, absent, stored[i], given};
      if (i >= stored.size()) return YamlDifference{item, given[i], absent, given[i]};
      if (auto d = FirstDifference(given[i], stored[i], item)) return d;
    }
  }
  if (given.IsMap()) {
    for (const auto& entry : given) {
      const std::string key = entry.first.Scalar();
      if (!stored[key].IsDefined()) return YamlDifference{at(key), entry.second, absent, entry.second};
      if (auto d = FirstDifference(entry.second, stored[key], at(key))) return d;
    }
    for (const auto& entry : stored) {
      const std::string key = entry.first.Scalar();
      if (!given[key].IsDefined()) return YamlDifference{at(key), absent, entry.second, given};
    }
  }
  return std::nullopt;
}

std::string Shown(const YAML::Node& node) {
  if (!node.IsDefined()) return "absent";
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

}  // namespace

Result<JobConfig> ParseJobConfig(const ConfigFile& file) {
  const YAML::Node& root = file.root;
  const YAML::Node training = root.IsMap() ? root["training"] : YAML::Node();
  if (training.IsDefined() && !training.IsMap() && !(training.IsScalar() && training.as<std::string>() == "none")) {
    return file.ErrorAt(training, "training", "must be `none` (rollouts only) or a map");
  }
  FR_RETURN_IF_ERROR(JobConfigSchema(training.IsDefined() && training.IsMap()).Validate(root, file.path));
  JobConfig c;
  c.name = ReadString(root, "name", c.name);
  c.store_path = ReadString(root, "store", "runs/" + c.name + ".db");

  const YAML::Node model = root["model"];
  c.model.path = ReadString(model, "path", c.model.path);
  c.model.threads = ReadInt(model, "threads", c.model.threads);
  c.model.kv_memory_bytes = ReadByteSize(model, "kv_memory", c.model.kv_memory_bytes);
  c.model.device = ReadString(model, "device", c.model.device);
  c.model.sessions = ReadBool(model, "sessions", c.model.sessions);
  c.model.reprefill_older_than = ReadInt(model, "reprefill_older_than", c.model.reprefill_older_than);
  if (Result<engine::DeviceSpec> device = engine::ParseDevice(c.model.device); !device.ok()) {
    return file.ErrorAt(model["device"], "model.device", device.status().message());
  }

  if (const YAML::Node p = root["policy"]; p.IsDefined() && p.IsMap()) {
    c.policy.url = ReadString(p, "url", "");
    c.policy.model = ReadString(p, "model", "");
    c.policy.api_key_file = ReadString(p, "api_key_file", "");
  }
  const YAML::Node tasks = root["tasks"];
  if (tasks["families"].IsDefined()) c.tasks.families = ReadStringList(tasks, "families");
  if (tasks["files"].IsDefined()) c.tasks.files = ReadStringList(tasks, "files");
  c.tasks.count = ReadInt(tasks, "count", c.tasks.count);
  c.tasks.seed = ReadInt(tasks, "seed", c.tasks.seed);
  c.tasks.min_difficulty = ReadInt(tasks, "min_difficulty", c.tasks.min_difficulty);
  c.tasks.max_difficulty = ReadInt(tasks, "max_difficulty", c.tasks.max_difficulty);

  if (const YAML::Node r = root["rollout"]; r.IsDefined() && r.IsMap()) {
    c.rollout.scaffold = ReadString(r, "scaffold", c.rollout.scaffold);
    c.rollout.max_turns = ReadInt(r, "max_turns", c.rollout.max_turns);
    c.rollout.max_tokens = ReadInt(r, "max_tokens", c.rollout.max_tokens);
    c.rollout.temperature = ReadFloat(r, "temperature", c.rollout.temperature);
    if (r["efforts"].IsDefined() && r["efforts"].IsSequence()) {
      c.rollout.efforts.clear();
      for (size_t i = 0; i < r["efforts"].size(); ++i) {
        const YAML::Node e = r["efforts"][i];
        Result<int> effort = e.IsScalar() ? ParseReasoningEffort(e.Scalar())
                                          : Result<int>(Status::InvalidArgument("expected " + ReasoningEffortValues()));
        if (!effort.ok()) {
          return file.ErrorAt(e, "rollout.efforts[" + std::to_string(i) + "]", effort.status().message());
        }
        c.rollout.efforts.push_back(*effort);
      }
    }
  }
  if (const YAML::Node r = root["rollout"]; r.IsDefined() && r.IsMap()) {
    for (const char* key : {"top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"}) {
      if (r[key].IsDefined()) {
        return file.ErrorAt(r[key], std::string("rollout.") + key,
                            "RL sampling is raw: the logprob of each token is log_softmax(logits / T), the policy the "
                            "trainer optimises; truncation and penalties (with processed logprobs recorded apart) are "
                            "not built for jobs");
      }
    }
  }
  if (const YAML::Node s = root["sandbox"]; s.IsDefined() && s.IsMap()) {
    c.sandbox.image = ReadString(s, "image", c.sandbox.image);
    c.sandbox.net = ReadString(s, "net", c.sandbox.net);
    c.sandbox.memory_bytes = ReadByteSize(s, "memory", c.sandbox.memory_bytes);
    c.sandbox.disk_bytes = ReadByteSize(s, "disk", c.sandbox.disk_bytes);
    c.sandbox.pids = ReadInt(s, "pids", c.sandbox.pids);
    c.sandbox.cpus = ReadFloat(s, "cpus", c.sandbox.cpus);
    c.sandbox.allow_unenforced_limits = ReadBool(s, "allow_unenforced_limits", c.sandbox.allow_unenforced_limits);
    c.sandbox.exec_timeout = ReadDuration(s, "timeout", c.sandbox.exec_timeout);
    if (s["user"].IsDefined()) {
      const std::string user = ReadString(s, "user", "");
      if (user.empty()) return file.ErrorAt(s["user"], "sandbox.user", "expected USER[:GROUP] or :GROUP, got an empty string");
      if (Status bad = sandbox::ParseUserGroup(user, &c.sandbox.user, &c.sandbox.group); !bad.ok()) {
        return file.ErrorAt(s["user"], "sandbox.user", bad.message());
      }
    }
    if (const YAML::Node m = s["max"]; m.IsDefined() && m.IsMap()) {
      TaskCeilings& max = c.sandbox.max;
      max.memory_bytes = ReadByteSize(m, "memory", max.memory_bytes);
      max.disk_bytes = ReadByteSize(m, "disk", max.disk_bytes);
      max.pids = ReadInt(m, "pids", max.pids);
      max.cpus = ReadFloat(m, "cpus", max.cpus);
      max.allow_rules = static_cast<size_t>(ReadInt(m, "allow_rules", static_cast<int64_t>(max.allow_rules)));
    }
    // The job's own sandbox within its ceilings, so a ceiling is one.
    const TaskCeilings& max = c.sandbox.max;
    const auto above = [&](const char* key, bool is_above) -> Status {
      if (!is_above) return Status::Ok();
      return file.ErrorAt(Where(root, "sandbox", key), std::string("sandbox.") + key,
                          std::string("is above sandbox.max.") + key);
    };
    FR_RETURN_IF_ERROR(above("memory", c.sandbox.memory_bytes > max.memory_bytes));
    FR_RETURN_IF_ERROR(above("disk", c.sandbox.disk_bytes > max.disk_bytes));
    FR_RETURN_IF_ERROR(above("pids", c.sandbox.pids > max.pids));
    FR_RETURN_IF_ERROR(above("cpus", c.sandbox.cpus > max.cpus));
  }
  if (const YAML::Node s = root["scheduler"]; s.IsDefined() && s.IsMap()) {
    c.scheduler.group_size = ReadInt(s, "group_size", c.scheduler.group_size);
    c.scheduler.max_in_flight = ReadInt(s, "max_in_flight", c.scheduler.max_in_flight);
    c.scheduler.max_per_task = ReadInt(s, "max_per_task", c.scheduler.max_per_task);
    c.scheduler.max_staleness = ReadInt(s, "max_staleness", c.scheduler.max_staleness);
    c.scheduler.batch_groups = ReadInt(s, "batch_groups", c.scheduler.batch_groups);
    c.scheduler.warmup_samples = ReadInt(s, "warmup_samples", c.scheduler.warmup_samples);
    c.scheduler.warmup_min_tokens = ReadInt(s, "warmup_min_tokens", c.scheduler.warmup_min_tokens);
    c.scheduler.infra_retries = ReadInt(s, "infra_retries", c.scheduler.infra_retries);
    c.scheduler.sample_timeout = ReadDuration(s, "sample_timeout", c.scheduler.sample_timeout);
    c.scheduler.stall_timeout = ReadDuration(s, "stall_timeout", c.scheduler.stall_timeout);
    c.scheduler.max_samples = ReadInt(s, "max_samples", c.scheduler.max_samples);
    c.scheduler.synchronous = ReadBool(s, "synchronous", c.scheduler.synchronous);
    c.scheduler.dynamic_sampling = ReadString(s, "dynamic_sampling", c.scheduler.dynamic_sampling);
    if (const YAML::Node t = s["task_selection"]; t.IsDefined() && t.IsMap()) {
      PassRateSelection& sel = c.scheduler.task_selection;
      sel.enabled = true;
      sel.min_pass_rate = ReadFloat(t, "min_pass_rate", sel.min_pass_rate);
      sel.max_pass_rate = ReadFloat(t, "max_pass_rate", sel.max_pass_rate);
      sel.window = ReadInt(t, "window", sel.window);
      sel.min_samples = ReadInt(t, "min_samples", sel.min_samples);
      sel.probe_every = ReadInt(t, "probe_every", sel.probe_every);
      if (sel.min_pass_rate >= sel.max_pass_rate) {
        return file.ErrorAt(t["min_pass_rate"].IsDefined() ? t["min_pass_rate"] : t, "scheduler.task_selection.min_pass_rate",
                            "must be below scheduler.task_selection.max_pass_rate (" + std::to_string(sel.max_pass_rate) +
                                "): no cell could open");
      }
      if (sel.min_samples > sel.window) {
        return file.ErrorAt(t["min_samples"].IsDefined() ? t["min_samples"] : t, "scheduler.task_selection.min_samples",
                            "must not exceed scheduler.task_selection.window (" + std::to_string(sel.window) +
                                "): a cell is measured over at most window samples");
      }
    }
    if (const YAML::Node limits = s["rate_limits"]; limits.IsDefined()) {
      if (!limits.IsMap()) return file.ErrorAt(limits, "scheduler.rate_limits", "must be a map of task family to samples per second");
      for (const auto& entry : limits) {
        const std::string family = entry.first.as<std::string>();
        const std::string key = "scheduler.rate_limits." + family;
        if (std::find(c.tasks.families.begin(), c.tasks.families.end(), family) == c.tasks.families.end()) {
          return file.ErrorAt(entry.first, key, "not one of tasks.families");
        }
        double rate = 0;
        if (!entry.second.IsScalar() || !YAML::convert<double>::decode(entry.second, rate) || !(rate > 0)) {
          return file.ErrorAt(entry.second, key, "must be a number of samples per second above 0");
        }
        c.scheduler.rate_limits[family] = rate;
      }
    }
  }
  if (const YAML::Node r = root["rewards"]; r.IsDefined() && r.IsMap()) {
    c.rewards.k0 = ReadFloat(r, "k0", c.rewards.k0);
    c.rewards.c_max = ReadFloat(r, "c_max", c.rewards.c_max);
    c.rewards.l_norm = ReadFloat(r, "l_norm", c.rewards.l_norm);
    c.rewards.lambda = ReadFloat(r, "lambda", c.rewards.lambda);
    c.rewards.length_penalty = ReadString(r, "length_penalty", c.rewards.length_penalty);
    c.rewards.advantage = ReadString(r, "advantage", c.rewards.advantage);
    c.rewards.failed = ReadString(r, "failed", c.rewards.failed);
  }
  if (training.IsDefined() && training.IsMap()) {
    JobConfig::Training& t = c.training;
    t.enabled = true;
    t.algorithm = ReadString(training, "algorithm", t.algorithm);
    t.steps = ReadInt(training, "steps", t.steps);
    t.learning_rate = ReadFloat(training, "learning_rate", t.learning_rate);
    t.clip = ReadFloat(training, "clip", t.clip);
    t.ratio_bound = ReadString(training, "ratio_bound", t.ratio_bound);
    t.ratio_cap = ReadFloat(training, "ratio_cap", t.ratio_cap);
    t.kl = ReadFloat(training, "kl", t.kl);
    t.negative_weight = ReadFloat(training, "negative_weight", t.negative_weight);
    t.entropy_weight = ReadFloat(training, "entropy_weight", t.entropy_weight);
    t.grad_clip = ReadFloat(training, "grad_clip", t.grad_clip);
    t.loss_agg = ReadString(training, "loss_agg", t.loss_agg);
    if (training["command"].IsDefined()) t.command = ReadStringList(training, "command");
    t.checkpoint_dir = ReadString(training, "checkpoint_dir",
                                  (std::filesystem::path(c.store_path).parent_path() / (c.name + "-checkpoints")).string());
    t.restarts = ReadInt(training, "restarts", t.restarts);
    if (const YAML::Node teacher = training["teacher"]; teacher.IsDefined() && teacher.IsMap()) {
      t.teacher.model = ReadString(teacher, "model", t.teacher.model);
      t.teacher.threads = ReadInt(teacher, "threads", t.teacher.threads);
      t.teacher.kv_memory_bytes = ReadByteSize(teacher, "kv_memory", t.teacher.kv_memory_bytes);
      t.teacher.url = ReadString(teacher, "url", t.teacher.url);
      t.teacher.name = ReadString(teacher, "name", t.teacher.name);
      t.teacher.token_file = ReadString(teacher, "token_file", t.teacher.token_file);
    }
    t.eval_tasks = ReadInt(training, "eval_tasks", t.eval_tasks);
    t.eval_seed = ReadInt(training, "eval_seed", t.eval_seed);
    if (training["test_seed"].IsDefined()) t.test_seed = ReadInt(training, "test_seed", 0);
    if (training["test_tasks"].IsDefined()) t.test_tasks = ReadInt(training, "test_tasks", 0);
    if (const YAML::Node temps = training["eval_temperatures"]; temps.IsDefined()) {
      for (size_t i = 0; i < temps.size(); ++i) {
        const double temperature = temps[i].as<double>();
        if (std::find(t.eval_temperatures.begin(), t.eval_temperatures.end(), temperature) != t.eval_temperatures.end()) {
          return file.ErrorAt(temps[i], "training.eval_temperatures[" + std::to_string(i) + "]",
                              "listed twice: each temperature is evaluated once");
        }
        t.eval_temperatures.push_back(temperature);
      }
    }
  }
  if (const YAML::Node a = root["trainer_api"]; a.IsDefined() && a.IsMap()) {
    c.trainer_api.listen = ReadString(a, "listen", c.trainer_api.listen);
    c.trainer_api.token_file = ReadString(a, "token_file", c.trainer_api.token_file);
    c.trainer_api.lease_timeout = ReadDuration(a, "lease_timeout", c.trainer_api.lease_timeout);
  }

  // What the schema cannot express.
  for (size_t i = 0; i < c.tasks.families.size(); ++i) {
    if (FindTaskFamily(c.tasks.families[i]) == nullptr) {
      std::string known;
      for (const TaskFamily* f : TaskFamilies()) known += (known.empty() ? "" : ", ") + std::string(f->name());
      return file.ErrorAt(tasks["families"][i], "tasks.families[" + std::to_string(i) + "]",
                          "unknown task family '" + c.tasks.families[i] + "' (known: " + known + ")");
    }
  }
  if (c.tasks.families.empty() && c.tasks.files.empty()) {
    return file.ErrorAt(tasks, "tasks", "needs families (generated tasks) or files (task files), or both");
  }
  for (size_t i = 0; i < c.tasks.files.size(); ++i) {
    const std::string key = "tasks.files[" + std::to_string(i) + "]";
    Result<std::vector<Task>> loaded = LoadTaskFile(c.tasks.files[i]);
    if (!loaded.ok()) return file.ErrorAt(tasks["files"][i], key, loaded.status().message());
    for (const Task& task : *loaded) {
      if (auto spec = TaskSandboxSpec(sandbox::SandboxSpec{}, task, c.sandbox.max); !spec.ok()) {
        return file.ErrorAt(tasks["files"][i], key, c.tasks.files[i] + ": " + spec.status().message());
      }
    }
  }
  if (c.training.eval_tasks > 0 && c.tasks.families.empty()) {
    return file.ErrorAt(Where(root, "training", "eval_tasks"), "training.eval_tasks",
                        "the evaluation set is generated from tasks.families, and there are none");
  }
  if (c.training.test_tasks && !c.training.test_seed) {
    return file.ErrorAt(Where(root, "training", "test_tasks"), "training.test_tasks",
                        "sizes the held-out set, and there is none (training.test_seed)");
  }
  if (c.tasks.min_difficulty > c.tasks.max_difficulty) {
    return file.ErrorAt(Where(root, "tasks", "min_difficulty"), "tasks.min_difficulty",
                        "must not exceed tasks.max_difficulty (" + std::to_string(c.tasks.max_difficulty) + ")");
  }
  std::error_code ec;
  if (!std::filesystem::exists(c.model.path, ec)) {
    return file.ErrorAt(model["path"], "model.path", "no such file or directory: " + c.model.path);
  }
  if (const int64_t context = ModelContext(c.model.path); context > 0 && c.rollout.max_tokens > context) {
    return file.ErrorAt(Where(root, "rollout", "max_tokens"), "rollout.max_tokens",
                        std::to_string(c.rollout.max_tokens) + " exceeds the model's context of " +
                            std::to_string(context) + " tokens (" + c.model.path + "/config.json)");
  }
  if (c.training.enabled && c.trainer_api.token_file.empty()) {
    return file.ErrorAt(Where(root, "trainer_api", "token_file"), "trainer_api.token_file",
                        "required when training is enabled (the trainer API needs a bearer token)");
  }
  if (!c.policy.url.empty() && c.training.enabled) {
    return file.ErrorAt(Where(root, "policy", "url"), "policy.url",
                        "training with an external policy is not built (the job cannot swap that server's weights); "
                        "use training: none, or the embedded engine");
  }
  if (c.training.enabled) FR_RETURN_IF_ERROR(CheckTeacher(file, c));
  if (c.training.enabled && c.training.ratio_bound == "dual_clip" && c.training.ratio_cap <= 1 + c.training.clip) {
    return file.ErrorAt(Where(root, "training", "ratio_cap"), "training.ratio_cap",
                        "must exceed 1 + training.clip (" + std::to_string(1 + c.training.clip) +
                            ") with ratio_bound dual_clip: the bound applies beyond the clipped range");
  }
  if (c.scheduler.max_per_task < c.scheduler.group_size) {
    return file.ErrorAt(Where(root, "scheduler", "max_per_task"), "scheduler.max_per_task",
                        "must be at least scheduler.group_size (" +
                            std::to_string(c.scheduler.group_size) + ") or no group can complete");
  }
  if (c.scheduler.max_in_flight < c.scheduler.group_size) {
    return file.ErrorAt(Where(root, "scheduler", "max_in_flight"), "scheduler.max_in_flight",
                        "must be at least scheduler.group_size (" + std::to_string(c.scheduler.group_size) +
                            "): a group's samples start together");
  }
  return c;
}

Status CheckSameJobConfig(const ConfigFile& given, const ConfigFile& stored, const std::string& job) {
  const std::optional<YamlDifference> d = FirstDifference(given.root, stored.root, "");
  if (!d) return Status::Ok();
  return given.ErrorAt(d->anchor, d->key.empty() ? "(the whole file)" : d->key,
                       "differs from the config job '" + job + "' was started with (" + Shown(d->given) + " here, " +
                           Shown(d->stored) + " there): resume without CONFIG to use the stored one, or start a "
                           "new job");
}

}  // namespace flashroll
