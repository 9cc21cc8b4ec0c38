#include "scheduler/job_config.h"

namespace flashroll {

Schema JobConfigSchema() {
  return Schema::Map()
      .Required("kind", Schema::Enum({"rl_job"}))
      .Required("name", Schema::String())
      .Optional("store", Schema::String())
      .Required("model", Schema::Map()
                             .Required("path", Schema::String())
                             .Optional("threads", Schema::Int(1, 256)))
      .Required("tasks", Schema::Map()
                             .Required("families", Schema::List(Schema::String(), 1))
                             .Optional("count", Schema::Int(1, 10'000'000))
                             .Optional("seed", Schema::Int()))
      .Optional("rollout", Schema::Map()
                               .Optional("scaffold", Schema::Enum({"bash_block", "json_tools", "xml_tools"}))
                               .Optional("max_turns", Schema::Int(1, 1000))
                               .Optional("max_tokens", Schema::Int(1, 1'000'000))
                               .Optional("temperature", Schema::Float(0, 10))
                               .Optional("efforts", Schema::List(Schema::Int(1, 100), 1)))
      .Optional("sandbox", Schema::Map()
                               .Optional("image", Schema::String())
                               .Optional("net", Schema::Enum({"none", "policy"}))
                               .Optional("memory", Schema::ByteSize(4ull << 20))
                               .Optional("pids", Schema::Int(1, 1'000'000))
                               .Optional("cpus", Schema::Float(0.01, 1024))
                               .Optional("timeout", Schema::Duration(1)))
      .Optional("scheduler", Schema::Map()
                                 .Optional("group_size", Schema::Int(1, 1024))
                                 .Optional("max_in_flight", Schema::Int(1, 1'000'000))
                                 .Optional("max_per_task", Schema::Int(1, 1'000'000))
                                 .Optional("max_staleness", Schema::Int(0, 1000))
                                 .Optional("batch_groups", Schema::Int(1, 100'000)))
      .Optional("rewards", Schema::Map()
                               .Optional("k0", Schema::Float(0, 100))
                               .Optional("c_max", Schema::Float(0, 100))
                               .Optional("l_norm", Schema::Float(1, 1e9))
                               .Optional("lambda", Schema::Float(0.001, 1000)))
      .Optional("training", Schema::Map().Optional("steps", Schema::Int(1, 1'000'000)));
}

Result<JobConfig> ParseJobConfig(const ConfigFile& file) {
  FR_RETURN_IF_ERROR(JobConfigSchema().Validate(file.root, file.path));
  const YAML::Node& root = file.root;
  JobConfig c;
  c.name = ReadString(root, "name", c.name);
  c.store_path = ReadString(root, "store", "runs/" + c.name + ".db");

  const YAML::Node model = root["model"];
  c.model.path = ReadString(model, "path", c.model.path);
  c.model.threads = ReadInt(model, "threads", c.model.threads);

  const YAML::Node tasks = root["tasks"];
  c.tasks.families = ReadStringList(tasks, "families");
  c.tasks.count = ReadInt(tasks, "count", c.tasks.count);
  c.tasks.seed = ReadInt(tasks, "seed", c.tasks.seed);

  if (const YAML::Node r = root["rollout"]; r.IsDefined() && r.IsMap()) {
    c.rollout.scaffold = ReadString(r, "scaffold", c.rollout.scaffold);
    c.rollout.max_turns = ReadInt(r, "max_turns", c.rollout.max_turns);
    c.rollout.max_tokens = ReadInt(r, "max_tokens", c.rollout.max_tokens);
    c.rollout.temperature = ReadFloat(r, "temperature", c.rollout.temperature);
    if (r["efforts"].IsDefined() && r["efforts"].IsSequence()) {
      c.rollout.efforts.clear();
      for (const auto& e : r["efforts"]) c.rollout.efforts.push_back(e.as<int64_t>());
    }
  }
  if (const YAML::Node s = root["sandbox"]; s.IsDefined() && s.IsMap()) {
    c.sandbox.image = ReadString(s, "image", c.sandbox.image);
    c.sandbox.net = ReadString(s, "net", c.sandbox.net);
    c.sandbox.memory_bytes = ReadByteSize(s, "memory", c.sandbox.memory_bytes);
    c.sandbox.pids = ReadInt(s, "pids", c.sandbox.pids);
    c.sandbox.cpus = ReadFloat(s, "cpus", c.sandbox.cpus);
    c.sandbox.exec_timeout = ReadDuration(s, "timeout", c.sandbox.exec_timeout);
  }
  if (const YAML::Node s = root["scheduler"]; s.IsDefined() && s.IsMap()) {
    c.scheduler.group_size = ReadInt(s, "group_size", c.scheduler.group_size);
    c.scheduler.max_in_flight = ReadInt(s, "max_in_flight", c.scheduler.max_in_flight);
    c.scheduler.max_per_task = ReadInt(s, "max_per_task", c.scheduler.max_per_task);
    c.scheduler.max_staleness = ReadInt(s, "max_staleness", c.scheduler.max_staleness);
    c.scheduler.batch_groups = ReadInt(s, "batch_groups", c.scheduler.batch_groups);
  }
  if (const YAML::Node r = root["rewards"]; r.IsDefined() && r.IsMap()) {
    c.rewards.k0 = ReadFloat(r, "k0", c.rewards.k0);
    c.rewards.c_max = ReadFloat(r, "c_max", c.rewards.c_max);
    c.rewards.l_norm = ReadFloat(r, "l_norm", c.rewards.l_norm);
    c.rewards.lambda = ReadFloat(r, "lambda", c.rewards.lambda);
  }
  if (const YAML::Node t = root["training"]; t.IsDefined() && t.IsMap()) {
    c.training.steps = ReadInt(t, "steps", c.training.steps);
  }

  // Cross-field rules the schema cannot express.
  if (c.scheduler.max_per_task < c.scheduler.group_size) {
    return file.ErrorAt(root["scheduler"]["max_per_task"], "scheduler.max_per_task",
                        "must be at least scheduler.group_size (" +
                            std::to_string(c.scheduler.group_size) + ") or no group can complete");
  }
  return c;
}

}  // namespace flashroll
