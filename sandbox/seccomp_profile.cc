#include "sandbox/seccomp_profile.h"

#include <seccomp.h>

#include <string_view>
#include <utility>

namespace flashroll::sandbox {

namespace {

constexpr int64_t kMaxErrno = 4095;

Result<int> ErrnoField(const JsonView& view, std::string_view key, int64_t fallback) {
  FR_ASSIGN_OR_RETURN(int64_t value, view.GetInt(key, fallback));
  if (value < 0 || value > kMaxErrno) {
    return Status::InvalidArgument(view.path() + (view.path().empty() ? "" : ".") + std::string(key) +
                                   ": must be in 0.." + std::to_string(kMaxErrno));
  }
  return static_cast<int>(value);
}

// `errno_ret` applies to SCMP_ACT_ERRNO only, as in Docker.
Result<uint32_t> ParseAction(const JsonView& view, int errno_ret) {
  FR_ASSIGN_OR_RETURN(std::string name, view.AsString());
  if (name == "SCMP_ACT_ALLOW") return uint32_t{SCMP_ACT_ALLOW};
  if (name == "SCMP_ACT_ERRNO") return uint32_t{SCMP_ACT_ERRNO(static_cast<uint32_t>(errno_ret))};
  if (name == "SCMP_ACT_KILL" || name == "SCMP_ACT_KILL_THREAD") return uint32_t{SCMP_ACT_KILL_THREAD};
  if (name == "SCMP_ACT_KILL_PROCESS") return uint32_t{SCMP_ACT_KILL_PROCESS};
  if (name == "SCMP_ACT_TRAP") return uint32_t{SCMP_ACT_TRAP};
  if (name == "SCMP_ACT_LOG") return uint32_t{SCMP_ACT_LOG};
  return Status::InvalidArgument(view.path() + ": unknown action '" + name + "'");
}

Result<int> ParseOp(const JsonView& view) {
  FR_ASSIGN_OR_RETURN(std::string name, view.AsString());
  static constexpr std::pair<std::string_view, int> kOps[] = {
      {"SCMP_CMP_NE", SCMP_CMP_NE}, {"SCMP_CMP_LT", SCMP_CMP_LT}, {"SCMP_CMP_LE", SCMP_CMP_LE},
      {"SCMP_CMP_EQ", SCMP_CMP_EQ}, {"SCMP_CMP_GE", SCMP_CMP_GE}, {"SCMP_CMP_GT", SCMP_CMP_GT},
      {"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ},
  };
  for (const auto& [op_name, op] : kOps) {
    if (name == op_name) return op;
  }
  return Status::InvalidArgument(view.path() + ": unknown operator '" + name + "'");
}

Result<SeccompArg> ParseArg(const JsonView& view) {
  FR_RETURN_IF_ERROR(view.ExpectOnlyKeys({"index", "value", "valueTwo", "op"}));
  SeccompArg arg;
  FR_ASSIGN_OR_RETURN(uint64_t index, view.GetUint("index"));
  if (index > 5) return Status::InvalidArgument(view.path() + ".index: must be in 0..5");
  arg.index = static_cast<unsigned>(index);
  FR_ASSIGN_OR_RETURN(arg.value, view.GetUint("value"));
  FR_ASSIGN_OR_RETURN(arg.value_two, view.GetUint("valueTwo", 0));
  FR_ASSIGN_OR_RETURN(JsonView op, view.Get("op"));
  FR_ASSIGN_OR_RETURN(arg.op, ParseOp(op));
  return arg;
}

Result<SeccompRule> ParseRule(const JsonView& view) {
  FR_RETURN_IF_ERROR(view.ExpectOnlyKeys({"names", "action", "errnoRet", "args", "comment"}));
  SeccompRule rule;
  FR_ASSIGN_OR_RETURN(JsonView names, view.Get("names"));
  FR_ASSIGN_OR_RETURN(std::vector<JsonView> items, names.AsArray());
  if (items.empty()) return Status::InvalidArgument(names.path() + ": must name at least one system call");
  for (const JsonView& item : items) {
    FR_ASSIGN_OR_RETURN(std::string name, item.AsString());
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) {
      return Status::InvalidArgument(item.path() + ": unknown system call '" + name + "'");
    }
    rule.syscalls.push_back(nr);
  }
  FR_ASSIGN_OR_RETURN(int errno_ret, ErrnoField(view, "errnoRet", EPERM));
  FR_ASSIGN_OR_RETURN(JsonView action, view.Get("action"));
  FR_ASSIGN_OR_RETURN(rule.action, ParseAction(action, errno_ret));
  if (view.Has("args") && !view.value()["args"].is_null()) {
    FR_ASSIGN_OR_RETURN(std::vector<JsonView> args, view.GetArray("args"));
    for (const JsonView& arg : args) {
      FR_ASSIGN_OR_RETURN(SeccompArg parsed, ParseArg(arg));
      rule.args.push_back(parsed);
    }
  }
  return rule;
}

}  // namespace

Result<SeccompProfile> ParseSeccompProfile(const Json& root) {
  if (!root.is_object()) return Status::InvalidArgument("expected a JSON object at the top level");
  const JsonView view(root, "");
  for (const auto& [key, value] : root.items()) {
    if (key != "defaultAction" && key != "defaultErrnoRet" && key != "allowUnlisted" && key != "syscalls") {
      return Status::InvalidArgument("unknown field \"" + key + "\"");
    }
  }
  SeccompProfile profile;
  // Without a defaultAction the profile denies what it does not list, with
  // ENOSYS as a kernel without the call would; an explicit SCMP_ACT_ERRNO
  // keeps Docker's EPERM.
  const bool has_default = view.Has("defaultAction");
  FR_ASSIGN_OR_RETURN(int default_errno, ErrnoField(view, "defaultErrnoRet", has_default ? EPERM : ENOSYS));
  profile.default_action = SCMP_ACT_ERRNO(static_cast<uint32_t>(default_errno));
  FR_ASSIGN_OR_RETURN(bool allow_unlisted, view.GetBool("allowUnlisted", false));
  if (has_default) {
    FR_ASSIGN_OR_RETURN(JsonView default_action, view.Get("defaultAction"));
    FR_ASSIGN_OR_RETURN(profile.default_action, ParseAction(default_action, default_errno));
    // A default that lets calls through lets through every call the profile
    // forgot and every call a later kernel adds; it has to be asked for.
    if ((profile.default_action == SCMP_ACT_ALLOW || profile.default_action == SCMP_ACT_LOG) && !allow_unlisted) {
      FR_ASSIGN_OR_RETURN(std::string name, default_action.AsString());
      return Status::InvalidArgument("defaultAction: " + name +
                                     " lets through every system call not listed, new ones too; "
                                     "set \"allowUnlisted\": true to mean it");
    }
  }
  if (view.Has("syscalls") && !root["syscalls"].is_null()) {
    FR_ASSIGN_OR_RETURN(std::vector<JsonView> rules, view.GetArray("syscalls"));
    for (const JsonView& rule : rules) {
      FR_ASSIGN_OR_RETURN(SeccompRule parsed, ParseRule(rule));
      profile.rules.push_back(std::move(parsed));
    }
  }
  return profile;
}

Result<SeccompProfile> ReadSeccompProfile(const std::string& path) {
  FR_ASSIGN_OR_RETURN(Json root, ReadJsonFile(path));
  auto profile = ParseSeccompProfile(root);
  if (!profile.ok()) return profile.status().Wrap(path);
  return profile;
}

}  // namespace flashroll::sandbox
