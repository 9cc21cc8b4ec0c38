#include "scheduler/training_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <map>
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

std::string LastStepStatus(const std::string& log_path, int64_t steps) {
  std::ifstream in(log_path);
  Json last;
  for (std::string line; std::getline(in, line);) {
    Json r = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (r.is_object()) last = std::move(r);
  }
  if (!last.is_object() || std::isnan(Number(last, "step"))) return "step 0/" + std::to_string(steps);
  std::string text = Row("step %.0f/", Number(last, "step")) + std::to_string(steps);
  for (const char* key : {"loss", "reverse_kl", "clip_fraction", "kl"}) {
    if (const double v = Number(last, key); !std::isnan(v)) text += Row(" %s %.4g", key, v);
  }
  return text;
}

namespace {

// The change in success and in reasoning tokens between two evaluations of
// one set of episodes, over the episodes of `effort` (any effort when < 0)
// present in both: means of the per-episode differences, with their
// standard errors. Pairing removes the spread between tasks, which the
// independent-samples formula counts twice.
// The median of the reasoning differences and how many episodes got shorter
// or longer do not move with one runaway episode, which the mean does.
struct PairedChange {
  double n = 0, p0 = 0, p1 = 0, success_se = 0, r0 = 0, r1 = 0, reasoning_se = 0;
  double reasoning_median = 0;
  int shorter = 0, longer = 0;
};

PairedChange Paired(const Json& before, const Json& after, int effort) {
  std::map<int64_t, const Json*> first;
  for (const Json& e : before) first[e.value("index", int64_t{-1})] = &e;
  std::vector<double> ds, dr;
  PairedChange c;
  for (const Json& e : after) {
    if (effort >= 0 && e.value("effort", -1) != effort) continue;
    auto it = first.find(e.value("index", int64_t{-1}));
    if (it == first.end()) continue;
    const Json& b = *it->second;
    const double s0 = b.value("success", false) ? 1 : 0, s1 = e.value("success", false) ? 1 : 0;
    const double r0 = b.value("reasoning_tokens", 0.0), r1 = e.value("reasoning_tokens", 0.0);
    c.p0 += s0;
    c.p1 += s1;
    c.r0 += r0;
    c.r1 += r1;
    ds.push_back(s1 - s0);
    dr.push_back(r1 - r0);
  }
  c.n = static_cast<double>(ds.size());
  if (c.n == 0) return c;
  c.p0 /= c.n;
  c.p1 /= c.n;
  c.r0 /= c.n;
  c.r1 /= c.n;
  const auto se = [&](const std::vector<double>& d, double mean) {
    if (d.size() < 2) return 0.0;
    double sq = 0;
    for (double x : d) sq += (x - mean) * (x - mean);
    return std::sqrt(sq / (c.n - 1) / c.n);
  };
  c.success_se = se(ds, c.p1 - c.p0);
  c.reasoning_se = se(dr, c.r1 - c.r0);
  c.shorter = static_cast<int>(std::count_if(dr.begin(), dr.end(), [](double d) { return d < 0; }));
  c.longer = static_cast<int>(std::count_if(dr.begin(), dr.end(), [](double d) { return d > 0; }));
  std::sort(dr.begin(), dr.end());
  const size_t mid = dr.size() / 2;
  c.reasoning_median = dr.size() % 2 ? dr[mid] : (dr[mid - 1] + dr[mid]) / 2;
  return c;
}

}  // namespace

namespace {

std::string EvalTable(const Json& before, const Json& after) {
  const bool paired = before.contains("episodes") && after.contains("episodes") && before["episodes"].is_array() &&
                      after["episodes"].is_array();
  std::string text = Row("%-8s %8s %8s %8s %16s   %9s %9s %9s %22s%s\n", "effort", "episodes", "success", "-> after",
                         paired ? "change (paired SE)" : "change (SE)", "reasoning", "-> after", "change",
                         "95% interval", paired ? "    median  shorter/longer" : "");
  auto line = [&](const std::string& name, const PairedChange& c) {
    const double d = c.r1 - c.r0;
    text += Row("%-8s %8.0f %7.1f%% %7.1f%% %+7.1f%% (%4.1f%%)   %9.1f %9.1f %+9.1f   [%+8.1f, %+8.1f]", name.c_str(),
                c.n, 100 * c.p0, 100 * c.p1, 100 * (c.p1 - c.p0), 100 * c.success_se, c.r0, c.r1, d,
                d - 1.96 * c.reasoning_se, d + 1.96 * c.reasoning_se);
    text += paired ? Row("  %+8.1f  %7d/%-7d\n", c.reasoning_median, c.shorter, c.longer) : std::string("\n");
  };
  // Without per-episode outcomes: two independent samples.
  auto unpaired = [&](const Json& b, const Json& a) {
    PairedChange c;
    const double n0 = Number(b, "episodes");
    c.n = Number(a, "episodes");
    c.p0 = Number(b, "success_rate");
    c.p1 = Number(a, "success_rate");
    c.success_se = std::sqrt(c.p0 * (1 - c.p0) / n0 + c.p1 * (1 - c.p1) / c.n);
    c.r0 = Number(b, "mean_reasoning_tokens");
    c.r1 = Number(a, "mean_reasoning_tokens");
    const double s0 = Number(b, "sd_reasoning_tokens"), s1 = Number(a, "sd_reasoning_tokens");
    c.reasoning_se = std::sqrt(s0 * s0 / n0 + s1 * s1 / c.n);
    return c;
  };
  if (before.contains("by_effort") && after.contains("by_effort")) {
    for (const std::string& effort : EffortKeys(before["by_effort"])) {
      if (!after["by_effort"].contains(effort)) continue;
      line("b=" + effort, paired ? Paired(before["episodes"], after["episodes"], std::stoi(effort))
                                 : unpaired(before["by_effort"][effort], after["by_effort"][effort]));
    }
  }
  if (before.contains("total") && after.contains("total")) {
    line("total", paired ? Paired(before["episodes"], after["episodes"], -1) : unpaired(before["total"], after["total"]));
  }
  return text;
}

std::string AtTemperature(double t) { return t > 0 ? Row(" at T = %g", t) : std::string(" greedy (T = 0)"); }

// The table of one set, then its table at each other temperature both
// sides have ("at_temperature_T", job_evaluation.h).
std::string SetComparison(const std::string& name, const Json& before, const Json& after) {
  std::string text = name + (before.contains("temperature") ? AtTemperature(Number(before, "temperature")) : "") +
                     ":\n" + EvalTable(before, after);
  static constexpr char kPrefix[] = "at_temperature_";
  for (const auto& [key, report] : before.items()) {
    if (key.rfind(kPrefix, 0) != 0 || !after.contains(key)) continue;
    text += name + AtTemperature(std::stod(key.substr(sizeof(kPrefix) - 1))) + ":\n" + EvalTable(report, after[key]);
  }
  return text;
}

}  // namespace

namespace {

std::string OverviewLine(const std::string& name, const Json& report) {
  const Json& total = report.value("total", Json::object());
  const double n = Number(total, "episodes"), p = Number(total, "success_rate");
  std::string text = Row("%s: success %.1f%% of %.0f (SE %.1f%%), reasoning %.1f tokens;", name.c_str(), 100 * p, n,
                         n > 0 ? 100 * std::sqrt(p * (1 - p) / n) : 0.0, Number(total, "mean_reasoning_tokens"));
  if (report.contains("by_effort")) {
    for (const std::string& effort : EffortKeys(report["by_effort"])) {
      text += Row(" b=%s %.1f%%", effort.c_str(), 100 * Number(report["by_effort"][effort], "success_rate"));
    }
  }
  return text + "\n";
}

std::string SetOverview(const std::string& name, const Json& report) {
  std::string text =
      OverviewLine(name + (report.contains("temperature") ? AtTemperature(Number(report, "temperature")) : ""), report);
  for (const auto& [key, other] : report.items()) {
    if (key.rfind("at_temperature_", 0) != 0) continue;
    text += OverviewLine(name + AtTemperature(std::stod(key.substr(std::string("at_temperature_").size()))), other);
  }
  return text;
}

}  // namespace

std::string EvalOverview(const Json& side) {
  if (!side.is_object() || !side.contains("total")) return "";
  std::string text = SetOverview("tuning set (training.eval_seed)", side);
  if (side.contains("test")) text += SetOverview("held-out test set (training.test_seed)", side["test"]);
  return text;
}

std::string EvalComparison(const Json& eval) {
  if (!eval.contains("before") || !eval.contains("after")) return "";
  const Json& before = eval["before"];
  const Json& after = eval["after"];
  std::string text = SetComparison("tuning set (training.eval_seed)", before, after);
  if (before.contains("test") && after.contains("test")) {
    text += SetComparison("held-out test set (training.test_seed)", before["test"], after["test"]);
  }
  return text;
}

}  // namespace flashroll
