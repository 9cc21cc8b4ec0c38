#include "scheduler/training_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <vector>

namespace flashroll {
namespace {

double Number(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::nan("");
}

// The keys of an object keyed by effort, in numeric order ("1", "50", "100").
std::vector<std::string> EffortKeys(const Json& by_effort) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : by_effort.items()) keys.push_back(key);
  std::sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return keys;
}

// "1:0.52 100:0.31" from {"1": 0.52, "100": 0.31}.
std::string PerEffort(const Json& j, const char* key, const char* format) {
  std::string out;
  if (!j.contains(key) || !j[key].is_object()) return "-";
  for (const std::string& effort : EffortKeys(j[key])) {
    const Json& value = j[key][effort];
    if (!value.is_number()) continue;
    char cell[48];
    std::snprintf(cell, sizeof(cell), format, value.get<double>());
    out += (out.empty() ? "" : " ") + effort + ":" + cell;
  }
  return out.empty() ? "-" : out;
}

std::string Row(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Row(const char* format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof(line), format, args);
  va_end(args);
  return line;
}

}  // namespace

std::string TrainingStepsTable(const std::string& log_path) {
  std::ifstream in(log_path);
  if (!in) return "";
  std::string text = Row("%5s %7s %7s %8s  %-26s %-26s %9s %6s %8s\n", "step", "version", "samples", "success",
                         "reward by effort", "reasoning tokens by effort", "|dlogp|", "clip", "tok/s");
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    const Json r = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object()) continue;
    ++rows;
    // Missing or null numbers (the mismatch on steps with no tokens of the
    // weights the trainer held) are shown as "-".
    const auto cell = [&](const char* key, const char* format, double scale = 1) {
      const double v = Number(r, key);
      return std::isnan(v) ? std::string("-") : Row(format, scale * v);
    };
    text += Row("%5s %7s %7s %8s  %-26s %-26s %9s %6s %8s\n", cell("step", "%.0f").c_str(), cell("version", "%.0f").c_str(),
                cell("samples", "%.0f").c_str(), cell("success", "%.1f%%", 100).c_str(),
                PerEffort(r, "reward_by_effort", "%.2f").c_str(), PerEffort(r, "reasoning_tokens_by_effort", "%.0f").c_str(),
                cell("mismatch_abs", "%.2e").c_str(), cell("clip_fraction", "%.3f").c_str(), cell("tokens_per_s", "%.0f").c_str());
  }
  return rows ? text : "";
}

std::string EvalComparison(const Json& eval) {
  if (!eval.contains("before") || !eval.contains("after")) return "";
  const Json& before = eval["before"];
  const Json& after = eval["after"];
  std::string text = Row("%-8s %8s %8s %8s %16s   %9s %9s %9s %22s\n", "effort", "episodes", "success", "-> after",
                         "change (SE)", "reasoning", "-> after", "change", "95% interval");
  auto row = [&](const std::string& name, const Json& b, const Json& a) {
    const double n0 = Number(b, "episodes"), n1 = Number(a, "episodes");
    const double p0 = Number(b, "success_rate"), p1 = Number(a, "success_rate");
    const double se = std::sqrt(p0 * (1 - p0) / n0 + p1 * (1 - p1) / n1);
    const double r0 = Number(b, "mean_reasoning_tokens"), r1 = Number(a, "mean_reasoning_tokens");
    const double s0 = Number(b, "sd_reasoning_tokens"), s1 = Number(a, "sd_reasoning_tokens");
    const double rse = std::sqrt(s0 * s0 / n0 + s1 * s1 / n1);
    const double d = r1 - r0;
    text += Row("%-8s %8.0f %7.1f%% %7.1f%% %+7.1f%% (%4.1f%%)   %9.1f %9.1f %+9.1f   [%+8.1f, %+8.1f]\n", name.c_str(),
                n1, 100 * p0, 100 * p1, 100 * (p1 - p0), 100 * se, r0, r1, d, d - 1.96 * rse, d + 1.96 * rse);
  };
  if (before.contains("by_effort") && after.contains("by_effort")) {
    for (const std::string& effort : EffortKeys(before["by_effort"])) {
      if (after["by_effort"].contains(effort)) row("b=" + effort, before["by_effort"][effort], after["by_effort"][effort]);
    }
  }
  if (before.contains("total") && after.contains("total")) row("total", before["total"], after["total"]);
  return text;
}

}  // namespace flashroll
