#include "engine/serving/preempt_benchmark.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <vector>

#include "engine/serving/benchmark_inputs.h"
#include "engine/serving/sequence_file.h"

namespace flashroll::engine {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// A directory made for the run and removed after it (the engine has deleted
// the files in it by then).
class ScratchDir {
 public:
  ~ScratchDir() {
    if (!path_.empty()) ::rmdir(path_.c_str());
  }
  Status Make() {
    const char* tmp = ::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/flashroll-preempt-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + templ);
    path_ = templ;
    return Status::Ok();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Reads the events already queued on `stream` (up to the pause).
void DrainQueued(RequestStream& stream) {
  bool timed_out = false;
  while (stream.Next(std::chrono::milliseconds(0), &timed_out)) {
  }
}

// Waits for the stream's next token.
Status NextToken(RequestStream& stream) {
  std::optional<StreamEvent> e = stream.Next();
  if (!e || !e->has_token) return Status::Internal("the benchmark's sequence ended early");
  return Status::Ok();
}

// The size of `path`, after dropping its pages from the page cache.
Result<int64_t> DropFromPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st;
  const int stat_rc = ::fstat(fd, &st);
  const int stat_errno = errno;
  const int advice = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (stat_rc != 0) return Status::FromErrno(stat_errno, "fstat " + path);
  if (advice != 0) return Status::FromErrno(advice, "posix_fadvise " + path);
  return static_cast<int64_t>(st.st_size);
}

}  // namespace

Result<PreemptBenchmarkResult> RunPreemptBenchmark(const Model& model, const PreemptBenchmarkOptions& o) {
  if (o.context < 1 || o.repeats < 1) return Status::InvalidArgument("context and repeats must be at least 1");
  // Room for the tokens generated before each pause lands: on a tiny model
  // 64 tokens took under 14 ms, and a loaded machine let the sequence end
  // before Pause ("sequence 2 is not running"), so as many as fit, to 1,024.
  const int64_t max_tokens = model.MaxPositions() > o.context
                                 ? std::min<int64_t>(1024, model.MaxPositions() - o.context)
                                 : 1024;
  ScratchDir scratch;
  std::string dir = o.persist_dir;
  if (dir.empty()) {
    FR_RETURN_IF_ERROR(scratch.Make());
    dir = scratch.path();
  }
  EngineOptions eo;
  eo.threads = o.threads;
  eo.kv_dtype = o.kv_dtype;
  eo.prefix_caching = false;
  eo.max_running = 1;
  eo.persist_dir = dir;
  const KvLayout layout = model.KvLayoutFor(eo.block_size, eo.kv_dtype);
  eo.kv_memory_bytes = ((o.context + max_tokens) / eo.block_size + 2) * layout.BlockBytes();
  eo.max_model_len = model.MaxPositions() > 0 ? 0 : o.context + max_tokens;
  FR_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Start(model, nullptr, eo));
  const int64_t vocab = model.config().vocab_size;

  GenerationRequest warm;
  warm.prompt = PseudoRandomPrompt(std::min<int64_t>(o.context, 64), vocab, 1);
  warm.max_tokens = 2;
  warm.ignore_eos = true;
  warm.sampling.temperature = 0;
  FR_RETURN_IF_ERROR(engine->Generate(warm).status());

  std::vector<double> resume, from_disk, reprefill, bytes_per_token;
  for (int run = 0; run < o.repeats; ++run) {
    GenerationRequest r = warm;
    r.prompt = PseudoRandomPrompt(o.context, vocab, 100 + run);
    r.max_tokens = max_tokens;
    const auto t0 = Clock::now();
    FR_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, engine->Submit(std::move(r)));
    std::optional<StreamEvent> first = stream->Next();
    if (!first || !first->has_token) return Status::Internal("the benchmark's sequence gave no first token");
    reprefill.push_back(MsSince(t0));
    const uint64_t id = first->sequence_id;

    FR_RETURN_IF_ERROR(engine->Pause(id));
    DrainQueued(*stream);
    const auto t1 = Clock::now();
    FR_RETURN_IF_ERROR(engine->Resume(id));
    FR_RETURN_IF_ERROR(NextToken(*stream));
    resume.push_back(MsSince(t1));

    FR_RETURN_IF_ERROR(engine->Pause(id, {.to_disk = true}));
    DrainQueued(*stream);
    FR_ASSIGN_OR_RETURN(SequenceInfo info, engine->GetSequence(id));
    FR_ASSIGN_OR_RETURN(int64_t bytes, DropFromPageCache(SequenceFilePath(dir, id)));
    // Every token but the last sampled one has its KV in the file.
    bytes_per_token.push_back(static_cast<double>(bytes) /
                              static_cast<double>(info.prompt_tokens + info.generated_tokens - 1));
    const auto t2 = Clock::now();
    FR_RETURN_IF_ERROR(engine->Resume(id));
    FR_RETURN_IF_ERROR(NextToken(*stream));
    from_disk.push_back(MsSince(t2));
    stream->Cancel();
  }
  return PreemptBenchmarkResult{UpperMedian(resume), UpperMedian(from_disk), UpperMedian(reprefill), UpperMedian(bytes_per_token)};
}

}  // namespace flashroll::engine
