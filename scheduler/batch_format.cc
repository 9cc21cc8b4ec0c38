#include "scheduler/batch_format.h"

#include <bit>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace flashroll {
namespace {

// The binary form is the host's memory layout of the arrays; a big-endian
// host would need byte swapping, which nothing Flashroll runs on needs.
static_assert(std::endian::native == std::endian::little,
              "the binary batch format is little-endian; add byte swapping for this host");
static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559);

int64_t ToUnixMillis(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

Json SampleToJson(const TrainingSample& s, bool with_arrays) {
  Json j = {{"sample_id", s.sample_id},
            {"prompt_tokens", s.prompt_tokens},
            {"reward", s.reward},
            {"reward_parts", s.reward_parts},
            {"advantage", s.advantage},
            {"reasoning_tokens", s.reasoning_tokens},
            {"status", s.status},
            {"success", s.success}};
  if (with_arrays) {
    j["tokens"] = s.tokens;
    j["logprobs"] = s.logprobs;
    j["versions"] = s.versions;
    j["loss_mask"] = s.loss_mask;
  }
  return j;
}

Json BatchJson(const BatchLease& batch, bool with_arrays) {
  Json groups = Json::array();
  for (const TrainingGroup& g : batch.groups) {
    Json samples = Json::array();
    for (const TrainingSample& s : g.samples) samples.push_back(SampleToJson(s, with_arrays));
    groups.push_back({{"group_id", g.group_id},
                      {"task_id", g.task_id},
                      {"task_key", g.task_key},
                      {"effort", g.effort},
                      {"samples", std::move(samples)}});
  }
  return {{"lease", batch.id},
          {"expires_at_ms", ToUnixMillis(batch.expires_at)},
          {"groups", std::move(groups)}};
}

template <typename T>
Result<T> AsIntIn(const JsonView& v) {
  FR_ASSIGN_OR_RETURN(int64_t x, v.AsInt());
  if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) {
    return Status::InvalidArgument(v.path() + ": " + std::to_string(x) + " is out of range");
  }
  return static_cast<T>(x);
}

template <typename T, typename Convert>
Status ReadArray(const JsonView& sample, std::string_view key, Convert convert,
                 std::vector<T>* out) {
  FR_ASSIGN_OR_RETURN(std::vector<JsonView> items, sample.GetArray(key));
  out->clear();
  out->reserve(items.size());
  for (const JsonView& item : items) {
    FR_ASSIGN_OR_RETURN(T value, convert(item));
    out->push_back(value);
  }
  return Status::Ok();
}

Result<TrainingSample> SampleFromJson(const JsonView& v, bool with_arrays) {
  TrainingSample s;
  FR_ASSIGN_OR_RETURN(s.sample_id, v.GetInt("sample_id"));
  if (with_arrays) {
    FR_RETURN_IF_ERROR(ReadArray(v, "tokens", AsIntIn<int32_t>, &s.tokens));
    FR_RETURN_IF_ERROR(ReadArray(
        v, "logprobs",
        [](const JsonView& x) -> Result<float> {
          FR_ASSIGN_OR_RETURN(double d, x.AsDouble());
          return static_cast<float>(d);
        },
        &s.logprobs));
    FR_RETURN_IF_ERROR(ReadArray(v, "versions", AsIntIn<int32_t>, &s.versions));
    FR_RETURN_IF_ERROR(ReadArray(v, "loss_mask", AsIntIn<uint8_t>, &s.loss_mask));
  }
  FR_ASSIGN_OR_RETURN(s.prompt_tokens, v.GetInt("prompt_tokens"));
  FR_ASSIGN_OR_RETURN(s.reward, v.GetDouble("reward"));
  FR_ASSIGN_OR_RETURN(JsonView parts, v.GetObject("reward_parts"));
  for (const auto& [name, value] : parts.value().items()) {
    FR_ASSIGN_OR_RETURN(s.reward_parts[name], JsonView(value, parts.path() + "." + name).AsDouble());
  }
  FR_ASSIGN_OR_RETURN(s.advantage, v.GetDouble("advantage"));
  FR_ASSIGN_OR_RETURN(s.reasoning_tokens, v.GetInt("reasoning_tokens"));
  FR_ASSIGN_OR_RETURN(s.status, v.GetString("status"));
  FR_ASSIGN_OR_RETURN(s.success, v.GetBool("success"));
  return s;
}

Result<BatchLease> BatchFromJsonView(const JsonView& v, bool with_arrays) {
  BatchLease batch;
  FR_ASSIGN_OR_RETURN(batch.id, v.GetString("lease"));
  FR_ASSIGN_OR_RETURN(int64_t expires_ms, v.GetInt("expires_at_ms"));
  batch.expires_at = std::chrono::system_clock::time_point(std::chrono::milliseconds(expires_ms));
  FR_ASSIGN_OR_RETURN(std::vector<JsonView> groups, v.GetArray("groups"));
  for (const JsonView& gv : groups) {
    TrainingGroup g;
    FR_ASSIGN_OR_RETURN(g.group_id, gv.GetInt("group_id"));
    FR_ASSIGN_OR_RETURN(g.task_id, gv.GetInt("task_id"));
    FR_ASSIGN_OR_RETURN(g.task_key, gv.GetString("task_key"));
    FR_ASSIGN_OR_RETURN(JsonView effort, gv.Get("effort"));
    FR_ASSIGN_OR_RETURN(g.effort, AsIntIn<int>(effort));
    FR_ASSIGN_OR_RETURN(std::vector<JsonView> samples, gv.GetArray("samples"));
    for (const JsonView& sv : samples) {
      FR_ASSIGN_OR_RETURN(TrainingSample s, SampleFromJson(sv, with_arrays));
      g.samples.push_back(std::move(s));
    }
    batch.groups.push_back(std::move(g));
  }
  return batch;
}

void AppendU32(std::string* out, uint32_t x) {
  out->append(reinterpret_cast<const char*>(&x), sizeof(x));
}

template <typename T>
void AppendArray(std::string* out, const std::vector<T>& values) {
  out->append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Reads the binary form front to back; every read names the offset it failed at.
class Reader {
 public:
  explicit Reader(std::string_view body) : body_(body) {}
  size_t offset() const { return offset_; }
  size_t left() const { return body_.size() - offset_; }

  Status Take(size_t n, std::string_view what, std::string_view* out) {
    if (n > left()) {
      return Status::InvalidArgument("binary batch: " + std::string(what) + " at byte " +
                                     std::to_string(offset_) + " needs " + std::to_string(n) +
                                     " bytes, " + std::to_string(left()) + " left");
    }
    *out = body_.substr(offset_, n);
    offset_ += n;
    return Status::Ok();
  }
  Status U32(std::string_view what, uint32_t* out) {
    std::string_view bytes;
    FR_RETURN_IF_ERROR(Take(sizeof(*out), what, &bytes));
    std::memcpy(out, bytes.data(), sizeof(*out));
    return Status::Ok();
  }
  template <typename T>
  Status Array(size_t n, std::string_view what, std::vector<T>* out) {
    std::string_view bytes;
    // n is at most 2^32, so n * sizeof(T) cannot overflow a 64-bit size_t.
    FR_RETURN_IF_ERROR(Take(n * sizeof(T), what, &bytes));
    out->resize(n);
    if (n > 0) std::memcpy(out->data(), bytes.data(), bytes.size());  // data() may be null when empty
    return Status::Ok();
  }

 private:
  std::string_view body_;
  size_t offset_ = 0;
};

}  // namespace

Json BatchToJson(const BatchLease& batch) { return BatchJson(batch, /*with_arrays=*/true); }

Result<BatchLease> BatchFromJson(const Json& json) {
  return BatchFromJsonView(JsonView(json, "batch"), /*with_arrays=*/true);
}

std::string EncodeBatchBinary(const BatchLease& batch) {
  std::string metadata = DumpJson(BatchJson(batch, /*with_arrays=*/false));
  metadata.resize((metadata.size() + 3) / 4 * 4, ' ');
  uint32_t samples = 0;
  for (const TrainingGroup& g : batch.groups) samples += static_cast<uint32_t>(g.samples.size());

  std::string out;
  out.append(kBatchBinaryMagic, sizeof(kBatchBinaryMagic));
  AppendU32(&out, kBatchBinaryVersion);
  AppendU32(&out, static_cast<uint32_t>(metadata.size()));
  AppendU32(&out, samples);
  out += metadata;
  for (const TrainingGroup& g : batch.groups) {
    for (const TrainingSample& s : g.samples) {
      AppendU32(&out, static_cast<uint32_t>(s.tokens.size()));
      AppendArray(&out, s.tokens);
      AppendArray(&out, s.logprobs);
      AppendArray(&out, s.versions);
      AppendArray(&out, s.loss_mask);
      out.resize((out.size() + 3) / 4 * 4, '\0');
    }
  }
  return out;
}

Result<BatchLease> DecodeBatchBinary(std::string_view body) {
  Reader in(body);
  std::string_view magic;
  FR_RETURN_IF_ERROR(in.Take(sizeof(kBatchBinaryMagic), "magic", &magic));
  if (magic != std::string_view(kBatchBinaryMagic, sizeof(kBatchBinaryMagic))) {
    return Status::InvalidArgument("binary batch: bad magic (expected \"FRTB\")");
  }
  uint32_t version = 0, metadata_bytes = 0, samples = 0;
  FR_RETURN_IF_ERROR(in.U32("version", &version));
  if (version != kBatchBinaryVersion) {
    return Status::InvalidArgument("binary batch: format version " + std::to_string(version) +
                                   " is not supported (expected " +
                                   std::to_string(kBatchBinaryVersion) + ")");
  }
  FR_RETURN_IF_ERROR(in.U32("metadata length", &metadata_bytes));
  FR_RETURN_IF_ERROR(in.U32("sample count", &samples));
  std::string_view metadata_text;
  FR_RETURN_IF_ERROR(in.Take(metadata_bytes, "metadata", &metadata_text));
  FR_ASSIGN_OR_RETURN(Json metadata, ParseJson(metadata_text, "binary batch metadata"));
  FR_ASSIGN_OR_RETURN(BatchLease batch,
                      BatchFromJsonView(JsonView(metadata, "metadata"), /*with_arrays=*/false));

  size_t described = 0;
  for (const TrainingGroup& g : batch.groups) described += g.samples.size();
  if (described != samples) {
    return Status::InvalidArgument("binary batch: the header counts " + std::to_string(samples) +
                                   " samples, the metadata describes " +
                                   std::to_string(described));
  }
  for (TrainingGroup& g : batch.groups) {
    for (TrainingSample& s : g.samples) {
      uint32_t n = 0;
      FR_RETURN_IF_ERROR(in.U32("token count", &n));
      FR_RETURN_IF_ERROR(in.Array(n, "tokens", &s.tokens));
      FR_RETURN_IF_ERROR(in.Array(n, "logprobs", &s.logprobs));
      FR_RETURN_IF_ERROR(in.Array(n, "versions", &s.versions));
      FR_RETURN_IF_ERROR(in.Array(n, "loss_mask", &s.loss_mask));
      std::string_view padding;
      FR_RETURN_IF_ERROR(in.Take((4 - in.offset() % 4) % 4, "padding", &padding));
    }
  }
  if (in.left() != 0) {
    return Status::InvalidArgument("binary batch: " + std::to_string(in.left()) +
                                   " bytes after the last sample, at byte " +
                                   std::to_string(in.offset()));
  }
  return batch;
}

}  // namespace flashroll
