// The CUDA backend: weights (device_weights.h), the paged KV pool and every
// step's activations live on one GPU; kernels.h runs the decoder. Only the
// step's inputs (tokens, positions, block tables, RoPE angles) go up; what
// comes down is, per logit row, either its draw (ForwardAndDraw: sampled
// here under the CPU sampler's contract) or its logits.
//
// A step's kernel sequence depends only on its row count, its logit-row
// count and where the buffers are, so the second step of a shape is
// captured into a CUDA graph and later ones of that shape replay it: one
// launch instead of about 9 per layer. Replay runs the same kernels on the
// same inputs, so it changes no bit of the result.
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/kernels.h"
#include "engine/serving/backend.h"

namespace flashroll::engine {
namespace {

using cuda::CudaCheck;
using cuda::DeviceBuffer;

class CudaStream {
 public:
  CudaStream() = default;
  ~CudaStream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  Status Create() { return CudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream"); }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Host vector `v` copied into `buffer` on `stream`; the buffer grows to
// powers of two, so a captured step stays valid while block tables grow.
template <typename T>
Status Upload(const std::vector<T>& v, DeviceBuffer* buffer, cudaStream_t stream) {
  const size_t bytes = v.size() * sizeof(T);
  FR_RETURN_IF_ERROR(buffer->Reserve(std::bit_ceil(bytes == 0 ? sizeof(T) : bytes)));
  if (bytes == 0) return Status::Ok();
  return CudaCheck(cudaMemcpyAsync(buffer->get(), v.data(), bytes, cudaMemcpyHostToDevice, stream), "uploading a step");
}

struct GraphExecDeleter {
  void operator()(cudaGraphExec_t exec) const { cudaGraphExecDestroy(exec); }
};
using GraphExec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;

// A step shape's captured kernels, and the buffers they were captured on.
struct StepGraph {
  bool seen = false;  // ran once eagerly (which also sets the kernels' attributes)
  GraphExec exec;
  std::vector<const void*> buffers;
};

class CudaBackend : public Backend {
 public:
  CudaBackend(const DeviceSpec& device) : device_(device) {}

  Status Init(const Model& model) {
    FR_RETURN_IF_ERROR(CudaCheck(cudaSetDevice(device_.ordinal), "selecting the GPU"));
    FR_RETURN_IF_ERROR(stream_.Create());
    FR_ASSIGN_OR_RETURN(weights_, cuda::DeviceWeights::Upload(model));
    return Status::Ok();
  }

  const char* name() const override { return "cuda"; }

  Status AllocateKv(const KvLayout& layout, int64_t num_blocks) override {
    FR_RETURN_IF_ERROR(CudaCheck(cudaSetDevice(device_.ordinal), "selecting the GPU"));
    layout_ = layout;
    graphs_.clear();
    keys_.clear();
    values_.clear();
    keys_.resize(static_cast<size_t>(layout.num_layers));
    values_.resize(static_cast<size_t>(layout.num_layers));
    const size_t bytes = static_cast<size_t>(layout.HalfBlockBytes() * num_blocks);
    for (int64_t l = 0; l < layout.num_layers; ++l) {
      Status st = keys_[l].Reserve(bytes);
      if (st.ok()) st = values_[l].Reserve(bytes);
      if (!st.ok()) return st.Wrap("the KV pool of " + std::to_string(num_blocks) + " blocks");
    }
    num_blocks_ = num_blocks;
    return Status::Ok();
  }

  void CopyKvBlock(int32_t from, int32_t to) override {
    if (!error_.ok()) return;
    cudaSetDevice(device_.ordinal);
    const size_t half = static_cast<size_t>(layout_.HalfBlockBytes());
    for (int64_t l = 0; l < layout_.num_layers; ++l) {
      for (DeviceBuffer* base : {&keys_[l], &values_[l]}) {
        Keep(cudaMemcpyAsync(base->get<uint8_t>() + to * half, base->get<uint8_t>() + from * half, half,
                             cudaMemcpyDeviceToDevice, stream_.get()),
             "copying a KV block");
      }
    }
  }

  void ExportKv(std::span<const int32_t> blocks, int64_t tokens, uint8_t* out) const override {
    MoveKv(blocks, tokens, out, /*to_host=*/true);
  }

  void ImportKv(std::span<const int32_t> blocks, int64_t tokens, const uint8_t* in) override {
    MoveKv(blocks, tokens, const_cast<uint8_t*>(in), /*to_host=*/false);
  }

  void SetModel(const Model& model) override {
    if (weights_ && weights_->model == &model) return;
    cudaSetDevice(device_.ordinal);
    cudaStreamSynchronize(stream_.get());
    graphs_.clear();
    weights_.reset();  // room for the incoming weights
    Result<std::unique_ptr<cuda::DeviceWeights>> w = cuda::DeviceWeights::Upload(model);
    if (!w.ok()) {
      error_ = w.status().Wrap("loading new weights onto the GPU");
      return;
    }
    weights_ = std::move(*w);
  }

  Status Forward(const ForwardBatch& batch, float* logits, std::vector<int32_t>* routed) override {
    return ForwardAndDraw(batch, logits, routed, {});
  }

  bool DrawsOnDevice() const override { return true; }

  Status ForwardAndDraw(const ForwardBatch& batch, float* logits, std::vector<int32_t>* routed,
                        std::span<RowDraw> draws) override {
    if (!error_.ok()) return error_;
    if (keys_.empty()) return Status::FailedPrecondition("the CUDA backend has no KV storage yet");
    if (!weights_) return Status::FailedPrecondition("the CUDA backend has no weights");
    if (!draws.empty() && draws.size() != batch.logit_rows.size()) {
      return Status::InvalidArgument("ForwardAndDraw: one draw per logit row");
    }
    Status st = Run(batch, logits, routed, draws);
    if (!st.ok()) error_ = st;  // the stream's state after a failed step is unknown
    return st;
  }

 private:
  void Keep(cudaError_t err, const char* what) const {
    if (err != cudaSuccess && error_.ok()) error_ = CudaCheck(err, what);
  }

  // Copies a sequence's first `tokens` positions between the paged blocks
  // and `host`, laid out as PagedKvStorage::ExportTokens says.
  void MoveKv(std::span<const int32_t> blocks, int64_t tokens, uint8_t* host, bool to_host) const {
    if (!error_.ok()) return;
    cudaSetDevice(device_.ordinal);
    const int64_t bs = layout_.block_size;
    const int64_t half = layout_.HalfBlockBytes();
    const int64_t row = layout_.head_dim * layout_.ElementBytes();
    const int64_t used = (tokens + bs - 1) / bs;
    staging_.resize(static_cast<size_t>(used * half));
    Keep(cudaStreamSynchronize(stream_.get()), "finishing the step before moving KV");
    uint8_t* cursor = host;
    for (int64_t l = 0; l < layout_.num_layers; ++l) {
      for (const DeviceBuffer* base : {&keys_[l], &values_[l]}) {
        // Whole blocks down (an import keeps the slots it does not write).
        for (int64_t b = 0; b < used; ++b) {
          Keep(cudaMemcpy(&staging_[b * half], base->get<uint8_t>() + blocks[b] * half, half, cudaMemcpyDeviceToHost),
               "reading KV blocks");
        }
        for (int64_t h = 0; h < layout_.num_kv_heads; ++h) {
          for (int64_t t = 0; t < tokens; ++t, cursor += row) {
            uint8_t* slot = &staging_[(t / bs) * half + (h * bs + t % bs) * row];
            if (to_host) {
              std::memcpy(cursor, slot, static_cast<size_t>(row));
            } else {
              std::memcpy(slot, cursor, static_cast<size_t>(row));
            }
          }
        }
        if (to_host) continue;
        for (int64_t b = 0; b < used; ++b) {
          Keep(cudaMemcpy(base->get<uint8_t>() + blocks[b] * half, &staging_[b * half], half, cudaMemcpyHostToDevice),
               "writing KV blocks");
        }
      }
    }
  }

  Status Run(const ForwardBatch& batch, float* logits, std::vector<int32_t>* routed, std::span<RowDraw> draws) {
    const Model& model = *weights_->model;
    const ModelConfig& c = model.config();
    FR_RETURN_IF_ERROR(model.PlanRows(batch, &positions_, &tables_));
    FR_RETURN_IF_ERROR(CudaCheck(cudaSetDevice(device_.ordinal), "selecting the GPU"));
    const cudaStream_t s = stream_.get();
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t hidden = c.hidden_size, hd = c.head_dim, heads = c.num_heads, kvh = c.num_kv_heads;
    const int64_t q_dim = heads * hd, kv_dim = kvh * hd;
    const int64_t width = std::max(c.intermediate_size, c.shared_expert_intermediate_size);
    const int64_t rows = static_cast<int64_t>(batch.logit_rows.size());

    // The step's inputs: every sequence's block table once, rows pointing in.
    flat_tables_.clear();
    table_offsets_.clear();
    for (const BatchSequence& seq : batch.seqs) {
      const int64_t offset = static_cast<int64_t>(flat_tables_.size());
      const int64_t blocks = (seq.start + seq.num_tokens + layout_.block_size - 1) / layout_.block_size;
      for (int64_t b = 0; b < blocks; ++b) {
        if (seq.block_table[b] < 0 || seq.block_table[b] >= num_blocks_) {
          return Status::InvalidArgument("block " + std::to_string(seq.block_table[b]) + " is outside the KV pool");
        }
      }
      flat_tables_.insert(flat_tables_.end(), seq.block_table, seq.block_table + blocks);
      for (int64_t i = 0; i < seq.num_tokens; ++i) table_offsets_.push_back(offset);
    }
    rope_.resize(static_cast<size_t>(n * hd));
    model.RopeTable(positions_.data(), n, rope_.data());
    FR_RETURN_IF_ERROR(Upload(batch.tokens, &d_tokens_, s));
    FR_RETURN_IF_ERROR(Upload(positions_, &d_positions_, s));
    FR_RETURN_IF_ERROR(Upload(table_offsets_, &d_offsets_, s));
    FR_RETURN_IF_ERROR(Upload(flat_tables_, &d_tables_, s));
    FR_RETURN_IF_ERROR(Upload(rope_, &d_rope_, s));
    FR_RETURN_IF_ERROR(Upload(batch.logit_rows, &d_logit_rows_, s));
    const size_t f = sizeof(float);
    FR_RETURN_IF_ERROR(x_.Reserve(n * hidden * f));
    FR_RETURN_IF_ERROR(h_.Reserve(std::max(n, rows) * hidden * f));
    FR_RETURN_IF_ERROR(qkv_.Reserve(n * (q_dim + 2 * kv_dim) * f));
    FR_RETURN_IF_ERROR(attn_.Reserve(n * q_dim * f));
    FR_RETURN_IF_ERROR(gate_up_.Reserve(n * 2 * width * f));
    FR_RETURN_IF_ERROR(act_.Reserve(n * width * f));
    FR_RETURN_IF_ERROR(logits_.Reserve(std::max<int64_t>(rows, 1) * c.vocab_size * f));
    const RoutingShape routing = model.routing_shape();
    if (!routing.empty()) FR_RETURN_IF_ERROR(PrepareMoe(batch, n));

    FR_RETURN_IF_ERROR(RunDecoder(n, rows));
    if (routed) {
      routed->resize(static_cast<size_t>(n * routing.TokenIds()));
      if (!routed->empty()) {
        FR_RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(routed->data(), d_routed_.get(), routed->size() * sizeof(int32_t),
                                                     cudaMemcpyDeviceToHost, s),
                                     "copying the routing back"));
      }
    }
    // Rows drawn here stay here; runs of the others come back for the host.
    const size_t row_bytes = static_cast<size_t>(c.vocab_size) * f;
    const auto on_device = [&](int64_t k) { return !draws.empty() && draws[k].on_device; };
    for (int64_t k = 0; k < rows;) {
      if (on_device(k)) {
        ++k;
        continue;
      }
      int64_t end = k + 1;
      while (end < rows && !on_device(end)) ++end;
      FR_RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(logits + k * c.vocab_size, logits_.get<float>() + k * c.vocab_size,
                                                   (end - k) * row_bytes, cudaMemcpyDeviceToHost, s),
                                   "copying the logits back"));
      k = end;
    }
    FR_RETURN_IF_ERROR(Draw(draws, c.vocab_size));
    return Status::Ok();
  }

  // The MoE layers' inputs (every row's replayed experts, or -1) and
  // scratch for a step of n rows.
  Status PrepareMoe(const ForwardBatch& batch, int64_t n) {
    const ModelConfig& c = weights_->model->config();
    const cudaStream_t s = stream_.get();
    const int64_t k = c.num_experts_per_tok, experts = c.num_experts, pairs = n * k;
    replay_offsets_ = batch.replay_offsets;
    if (replay_offsets_.empty()) replay_offsets_.assign(static_cast<size_t>(n), -1);
    FR_RETURN_IF_ERROR(Upload(replay_offsets_, &d_replay_offsets_, s));
    FR_RETURN_IF_ERROR(Upload(batch.replay_ids, &d_replay_ids_, s));
    const size_t f = sizeof(float), i = sizeof(int32_t);
    const int64_t tiles = cuda::MaxExpertTiles(pairs, experts, cuda::ExpertTileSlots(false, pairs, experts));
    FR_RETURN_IF_ERROR(d_routed_.Reserve(std::bit_ceil(static_cast<size_t>(n * weights_->model->routing_shape().TokenIds()) * i)));
    FR_RETURN_IF_ERROR(router_logits_.Reserve(std::bit_ceil(static_cast<size_t>(n * experts) * f)));
    for (DeviceBuffer* b : {&chosen_, &ascending_, &pair_slot_, &slot_row_}) {
      FR_RETURN_IF_ERROR(b->Reserve(std::bit_ceil(static_cast<size_t>(pairs) * i)));
    }
    FR_RETURN_IF_ERROR(expert_weights_.Reserve(std::bit_ceil(static_cast<size_t>(pairs) * f)));
    for (DeviceBuffer* b : {&tile_expert_, &tile_begin_, &tile_end_}) {
      FR_RETURN_IF_ERROR(b->Reserve(std::bit_ceil(static_cast<size_t>(tiles) * i)));
    }
    FR_RETURN_IF_ERROR(tile_count_.Reserve(i));
    const int64_t width = c.moe_intermediate_size;
    FR_RETURN_IF_ERROR(expert_gate_up_.Reserve(std::bit_ceil(static_cast<size_t>(pairs * 2 * width) * f)));
    FR_RETURN_IF_ERROR(expert_act_.Reserve(std::bit_ceil(static_cast<size_t>(pairs * width) * f)));
    FR_RETURN_IF_ERROR(expert_out_.Reserve(std::bit_ceil(static_cast<size_t>(pairs * c.hidden_size) * f)));
    if (weights_->model->decoder_options().shared_expert) {
      FR_RETURN_IF_ERROR(shared_out_.Reserve(std::bit_ceil(static_cast<size_t>(n * c.hidden_size) * f)));
    }
    return Status::Ok();
  }

  // A MoE layer's FFN on h (n rows) added into x: route, group the (row,
  // expert) pairs by expert, the experts' products on their slots, then
  // each row's outputs summed in ascending expert id (plus the shared
  // expert's, gated).
  void LaunchMoe(const cuda::DeviceWeights::Layer& w, int64_t moe_index, int64_t n, const float* h, float* x) {
    const ModelConfig& c = weights_->model->config();
    const cudaStream_t s = stream_.get();
    const int64_t k = c.num_experts_per_tok, experts = c.num_experts, pairs = n * k;
    const int64_t width = c.moe_intermediate_size;
    cuda::MatMul(w.router, h, n, router_logits_.get<float>(), s);
    cuda::RouteRows(router_logits_.get<float>(), n, experts, k, c.norm_topk_prob, d_replay_offsets_.get<int64_t>(),
                    d_replay_ids_.get<int32_t>(), moe_index, weights_->model->routing_shape().TokenIds(),
                    chosen_.get<int32_t>(), expert_weights_.get<float>(), ascending_.get<int32_t>(),
                    d_routed_.get<int32_t>(), s);
    cuda::ExpertTiles tiles;
    tiles.slots = cuda::ExpertTileSlots(w.experts_gate_up.bf16 && w.experts_down.bf16, pairs, experts);
    tiles.max = cuda::MaxExpertTiles(pairs, experts, tiles.slots);
    tiles.expert = tile_expert_.get<int32_t>();
    tiles.begin = tile_begin_.get<int32_t>();
    tiles.end = tile_end_.get<int32_t>();
    tiles.count = tile_count_.get<int32_t>();
    cuda::GroupByExpert(chosen_.get<int32_t>(), n, k, experts, pair_slot_.get<int32_t>(), slot_row_.get<int32_t>(),
                        tile_expert_.get<int32_t>(), tile_begin_.get<int32_t>(), tile_end_.get<int32_t>(),
                        tile_count_.get<int32_t>(), tiles.slots, s);
    tiles.gather = slot_row_.get<int32_t>();
    cuda::ExpertMatMul(w.experts_gate_up, experts, h, tiles, expert_gate_up_.get<float>(), s);
    cuda::SwiGlu(expert_gate_up_.get<float>(), pairs, width, expert_act_.get<float>(), s);
    tiles.gather = nullptr;
    cuda::ExpertMatMul(w.experts_down, experts, expert_act_.get<float>(), tiles, expert_out_.get<float>(), s);
    const float* shared = nullptr;
    if (w.shared_gate) {
      cuda::MatMul(w.gate_up, h, n, gate_up_.get<float>(), s);
      cuda::SwiGlu(gate_up_.get<float>(), n, c.shared_expert_intermediate_size, act_.get<float>(), s);
      cuda::MatMul(w.down, act_.get<float>(), n, shared_out_.get<float>(), s);
      shared = shared_out_.get<float>();
    }
    cuda::CombineExperts(x, expert_out_.get<float>(), pair_slot_.get<int32_t>(), expert_weights_.get<float>(),
                         ascending_.get<int32_t>(), n, k, c.hidden_size, shared, w.shared_gate, h, s);
  }

  // Samples the rows marked on_device (all of them, in one launch over the
  // step's logit rows) and waits for the step.
  Status Draw(std::span<RowDraw> draws, int64_t vocab) {
    const cudaStream_t s = stream_.get();
    bool any = false;
    for (const RowDraw& d : draws) any = any || d.on_device;
    if (!any) return CudaCheck(cudaStreamSynchronize(s), "running the step");
    const int64_t rows = static_cast<int64_t>(draws.size());
    draw_params_.resize(draws.size());
    for (size_t k = 0; k < draws.size(); ++k) {
      draw_params_[k].greedy = draws[k].plan.greedy ? 1 : 0;
      draw_params_[k].inv_t = draws[k].plan.inv_t;
      draw_params_[k].u = draws[k].plan.u;
    }
    FR_RETURN_IF_ERROR(Upload(draw_params_, &d_draw_params_, s));
    FR_RETURN_IF_ERROR(d_block_sums_.Reserve(static_cast<size_t>(rows * ((vocab + 63) / 64)) * sizeof(double)));
    FR_RETURN_IF_ERROR(d_draws_.Reserve(draws.size() * sizeof(cuda::DrawResult)));
    cuda::DrawRows(logits_.get<float>(), rows, vocab, d_draw_params_.get<cuda::DrawParams>(),
                   d_block_sums_.get<double>(), d_draws_.get<cuda::DrawResult>(), s);
    FR_RETURN_IF_ERROR(CudaCheck(cudaGetLastError(), "launching the draw"));
    draw_results_.resize(draws.size());
    FR_RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(draw_results_.data(), d_draws_.get(),
                                                 draws.size() * sizeof(cuda::DrawResult), cudaMemcpyDeviceToHost, s),
                                 "copying the draws back"));
    FR_RETURN_IF_ERROR(CudaCheck(cudaStreamSynchronize(s), "running the step"));
    for (size_t k = 0; k < draws.size(); ++k) {
      if (!draws[k].on_device) continue;
      const cuda::DrawResult& r = draw_results_[k];
      draws[k].result = {r.token, r.token_logit, r.max_logit, r.weight_sum};
    }
    return Status::Ok();
  }

  // The kernels of a step of n rows and `rows` logit rows, on the uploaded
  // inputs: replayed from a graph when this shape ran before on these
  // buffers, captured when it ran once, launched directly the first time.
  Status RunDecoder(int64_t n, int64_t rows) {
    const cudaStream_t s = stream_.get();
    constexpr size_t kMaxGraphs = 64;  // prefill chunks of many sizes run directly past this
    std::vector<const void*> buffers;
    for (const DeviceBuffer* b :
         {&d_tokens_, &d_positions_, &d_offsets_, &d_tables_, &d_rope_, &d_logit_rows_, &x_, &h_, &qkv_, &attn_,
          &gate_up_, &act_, &logits_, &d_replay_offsets_, &d_replay_ids_, &d_routed_, &router_logits_, &chosen_,
          &expert_weights_, &ascending_, &pair_slot_, &slot_row_, &tile_expert_, &tile_begin_, &tile_end_,
          &tile_count_, &expert_gate_up_, &expert_act_, &expert_out_, &shared_out_}) {
      buffers.push_back(b->get());
    }
    auto found = graphs_.find({n, rows});
    if (found == graphs_.end()) {
      if (graphs_.size() >= kMaxGraphs) return LaunchDecoder(n, rows);
      found = graphs_.emplace(std::make_pair(n, rows), StepGraph{}).first;
    }
    StepGraph& g = found->second;
    if (g.exec && g.buffers == buffers) return CudaCheck(cudaGraphLaunch(g.exec.get(), s), "replaying the step");
    if (!g.seen) {
      g.seen = true;
      return LaunchDecoder(n, rows);
    }
    g.exec.reset();
    FR_RETURN_IF_ERROR(CudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capturing the step"));
    const Status launched = LaunchDecoder(n, rows);
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(s, &graph);
    FR_RETURN_IF_ERROR(launched);
    FR_RETURN_IF_ERROR(CudaCheck(ended, "capturing the step"));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    FR_RETURN_IF_ERROR(CudaCheck(made, "instantiating the step's graph"));
    g.exec.reset(exec);
    g.buffers = std::move(buffers);
    return CudaCheck(cudaGraphLaunch(g.exec.get(), s), "launching the step's graph");
  }

  Status LaunchDecoder(int64_t n, int64_t rows) {
    const ModelConfig& c = weights_->model->config();
    const cudaStream_t s = stream_.get();
    const int64_t hidden = c.hidden_size, hd = c.head_dim, heads = c.num_heads, kvh = c.num_kv_heads;
    const int64_t q_dim = heads * hd, kv_dim = kvh * hd, width = c.intermediate_size;
    int64_t moe_index = 0;
    float* x = x_.get<float>();
    float* h = h_.get<float>();
    float* qkv = qkv_.get<float>();
    const float eps = static_cast<float>(c.rms_norm_eps);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    cuda::EmbedRows(weights_->embed, d_tokens_.get<int32_t>(), n, x, s);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const cuda::DeviceWeights::Layer& w = weights_->layers[l];
      cuda::RmsNormRows(x, nullptr, n, hidden, w.attn_norm, eps, h, s);
      cuda::MatMul(w.qkv, h, n, qkv, s);
      cuda::KvView kv;
      kv.keys = keys_[l].get();
      kv.values = values_[l].get();
      kv.bf16 = layout_.dtype == KvDType::kBF16;
      kv.block_size = layout_.block_size;
      kv.num_kv_heads = kvh;
      kv.head_dim = hd;
      kv.positions = d_positions_.get<int64_t>();
      kv.tables = d_tables_.get<int32_t>();
      kv.table_offsets = d_offsets_.get<int64_t>();
      cuda::QkvPost(qkv, w.q_bias, w.k_bias, w.v_bias, w.q_norm, w.k_norm, eps, d_rope_.get<float>(), n, heads, kv,
                    s);
      cuda::Attention(qkv, q_dim + 2 * kv_dim, n, heads, scale, kv, attn_.get<float>(), s);
      cuda::MatMul(w.o, attn_.get<float>(), n, x, s, /*residual=*/x);
      cuda::RmsNormRows(x, nullptr, n, hidden, w.ffn_norm, eps, h, s);
      if (w.moe) {
        LaunchMoe(w, moe_index++, n, h, x);
        continue;
      }
      cuda::MatMul(w.gate_up, h, n, gate_up_.get<float>(), s);
      cuda::SwiGlu(gate_up_.get<float>(), n, width, act_.get<float>(), s);
      cuda::MatMul(w.down, act_.get<float>(), n, x, s, /*residual=*/x);
    }
    FR_RETURN_IF_ERROR(CudaCheck(cudaGetLastError(), "launching the decoder kernels"));
    if (rows > 0) {
      cuda::RmsNormRows(x, d_logit_rows_.get<int64_t>(), rows, hidden, weights_->final_norm, eps, h, s);
      cuda::MatMul(weights_->lm_head, h, rows, logits_.get<float>(), s);
      FR_RETURN_IF_ERROR(CudaCheck(cudaGetLastError(), "launching the LM head"));
    }
    return Status::Ok();
  }
  DeviceSpec device_;
  CudaStream stream_;
  std::unique_ptr<cuda::DeviceWeights> weights_;
  KvLayout layout_;
  int64_t num_blocks_ = 0;
  std::vector<DeviceBuffer> keys_, values_;
  mutable Status error_;  // the first failure outside Forward, returned by the next Forward
  mutable std::vector<uint8_t> staging_;
  // Step inputs (host, then device) and activations.
  std::vector<int64_t> positions_, table_offsets_;
  std::vector<const int32_t*> tables_;
  std::vector<int32_t> flat_tables_;
  std::vector<float> rope_;
  DeviceBuffer d_tokens_, d_positions_, d_offsets_, d_tables_, d_rope_, d_logit_rows_;
  DeviceBuffer x_, h_, qkv_, attn_, gate_up_, act_, logits_;
  std::map<std::pair<int64_t, int64_t>, StepGraph> graphs_;  // by (rows, logit rows)
  // Device draws: their parameters and results (host, then device).
  // MoE: replayed routing (host, then device), every row's experts, and the
  // grouped products' scratch.
  std::vector<int64_t> replay_offsets_;
  DeviceBuffer d_replay_offsets_, d_replay_ids_, d_routed_, router_logits_, chosen_, expert_weights_, ascending_;
  DeviceBuffer pair_slot_, slot_row_, tile_expert_, tile_begin_, tile_end_, tile_count_;
  DeviceBuffer expert_gate_up_, expert_act_, expert_out_, shared_out_;
  std::vector<cuda::DrawParams> draw_params_;
  std::vector<cuda::DrawResult> draw_results_;
  DeviceBuffer d_draw_params_, d_block_sums_, d_draws_;
};

}  // namespace

Result<std::unique_ptr<Backend>> NewCudaBackend(const Model& model, const DeviceSpec& device) {
  FR_RETURN_IF_ERROR(CheckDevice(device, 0));
  auto backend = std::make_unique<CudaBackend>(device);
  Status st = backend->Init(model);
  if (!st.ok()) return st.Wrap(DeviceName(device));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace flashroll::engine
