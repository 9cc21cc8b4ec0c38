#include "engine/kernels/attention.h"

#include <cmath>
#include <cstring>

#include "engine/kernels/cpu_threads.h"
#include "engine/kernels/half_bits.h"
#include "engine/kernels/kernel_table.h"

namespace flashroll::kernels {
namespace {

using internal::AttendSplitArgs;

float LoadKv(const uint8_t* base, int64_t index, bool bf16) {
  if (bf16) {
    uint16_t h;
    std::memcpy(&h, base + index * 2, 2);
    return internal::BitsFloat(static_cast<uint32_t>(h) << 16);
  }
  float f;
  std::memcpy(&f, base + index * 4, 4);
  return f;
}

// The portable split kernel (scalar and AVX2 paths): the same online-softmax
// structure as the AVX-512 kernel, one key at a time.
void AttendSplitPortable(const AttendSplitArgs& a) {
  const int64_t hd = a.head_dim;
  const int64_t elem = a.bf16 ? 2 : 4;
  for (int64_t g = 0; g < a.group; ++g) {
    a.m[g] = -1e30f;
    a.l[g] = 0;
    std::fill(a.acc + g * hd, a.acc + (g + 1) * hd, 0.0f);
  }
  for (int64_t key = a.key_begin; key < a.key_end;) {
    const int64_t block = a.block_table[key / a.block_size];
    const int64_t first = key % a.block_size;
    const int64_t count = std::min(a.block_size - first, a.key_end - key);
    const uint8_t* kb = a.k_base + block * a.half_block_bytes + (a.kv_head * a.block_size + first) * hd * elem;
    const uint8_t* vb = a.v_base + block * a.half_block_bytes + (a.kv_head * a.block_size + first) * hd * elem;
    for (int64_t g = 0; g < a.group; ++g) {
      const float* q = a.q + g * hd;
      float scores[256];  // block_size <= 256: Engine::Start refuses larger blocks
      float block_max = -1e30f;
      for (int64_t j = 0; j < count; ++j) {
        float s = 0;
        for (int64_t d = 0; d < hd; ++d) s += q[d] * LoadKv(kb, j * hd + d, a.bf16);
        scores[j] = s * a.scale;
        block_max = std::max(block_max, scores[j]);
      }
      const float m_new = std::max(a.m[g], block_max);
      const float corr = std::exp(a.m[g] - m_new);
      float* acc = a.acc + g * hd;
      float sum = 0;
      for (int64_t d = 0; d < hd; ++d) acc[d] *= corr;
      for (int64_t j = 0; j < count; ++j) {
        const float p = std::exp(scores[j] - m_new);
        sum += p;
        for (int64_t d = 0; d < hd; ++d) acc[d] += p * LoadKv(vb, j * hd + d, a.bf16);
      }
      a.l[g] = a.l[g] * corr + sum;
      a.m[g] = m_new;
    }
    key += count;
  }
}

}  // namespace

void PagedAttention(const PagedAttentionArgs& args, AttentionScratch* s) {
  const int64_t hd = args.head_dim;
  const int64_t group = args.num_heads / args.num_kv_heads;
  const int64_t q_dim = args.num_heads * hd;
  // Tasks: (row, split); each task covers every KV head of the split.
  s->task_row.clear();
  s->task_split.clear();
  s->row_first_task.resize(static_cast<size_t>(args.rows + 1));
  for (int64_t r = 0; r < args.rows; ++r) {
    s->row_first_task[r] = static_cast<int64_t>(s->task_row.size());
    const int64_t splits = args.positions[r] / kSplitKeys + 1;
    for (int64_t sp = 0; sp < splits; ++sp) {
      s->task_row.push_back(r);
      s->task_split.push_back(sp);
    }
  }
  const int64_t tasks = static_cast<int64_t>(s->task_row.size());
  s->row_first_task[args.rows] = tasks;
  s->partial_m.resize(static_cast<size_t>(tasks * args.num_heads));
  s->partial_l.resize(static_cast<size_t>(tasks * args.num_heads));
  s->partial_acc.resize(static_cast<size_t>(tasks * q_dim));

  const auto& table = internal::ActiveKernels();
  const bool vector_path = table.attend_split != nullptr && hd % 16 == 0;
  const auto attend = vector_path ? table.attend_split : AttendSplitPortable;
  ParallelFor(tasks * args.num_kv_heads, [&](int64_t unit) {
    const int64_t t = unit / args.num_kv_heads;
    const int64_t kvh = unit % args.num_kv_heads;
    const int64_t r = s->task_row[t];
    const int64_t sp = s->task_split[t];
    AttendSplitArgs a;
    a.q = args.q + r * q_dim + kvh * group * hd;
    a.group = group;
    a.head_dim = hd;
    a.scale = args.scale;
    a.block_table = args.block_tables[r];
    a.k_base = args.k_base;
    a.v_base = args.v_base;
    a.half_block_bytes = args.half_block_bytes;
    a.block_size = args.block_size;
    a.kv_head = kvh;
    a.bf16 = args.bf16;
    a.key_begin = sp * kSplitKeys;
    a.key_end = std::min((sp + 1) * kSplitKeys, args.positions[r] + 1);
    a.m = &s->partial_m[t * args.num_heads + kvh * group];
    a.l = &s->partial_l[t * args.num_heads + kvh * group];
    a.acc = &s->partial_acc[t * q_dim + kvh * group * hd];
    attend(a);
  });
  // Combine each row's splits in split order.
  const int64_t combine_work = args.rows * args.num_heads;
  auto combine = [&](int64_t unit) {
    const int64_t r = unit / args.num_heads;
    const int64_t h = unit % args.num_heads;
    const int64_t t0 = s->row_first_task[r];
    const int64_t t1 = s->row_first_task[r + 1];
    float max = -1e30f;
    for (int64_t t = t0; t < t1; ++t) max = std::max(max, s->partial_m[t * args.num_heads + h]);
    float* o = args.out + r * q_dim + h * hd;
    std::fill(o, o + hd, 0.0f);
    float total = 0;
    for (int64_t t = t0; t < t1; ++t) {
      const float w = std::exp(s->partial_m[t * args.num_heads + h] - max);
      total += s->partial_l[t * args.num_heads + h] * w;
      const float* acc = &s->partial_acc[t * q_dim + h * hd];
      for (int64_t d = 0; d < hd; ++d) o[d] += acc[d] * w;
    }
    const float inv = 1.0f / total;
    for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
  };
  if (combine_work * hd < 64 * 1024) {
    for (int64_t u = 0; u < combine_work; ++u) combine(u);
  } else {
    ParallelFor(args.rows, [&](int64_t r) {
      for (int64_t h = 0; h < args.num_heads; ++h) combine(r * args.num_heads + h);
    });
  }
}

}  // namespace flashroll::kernels
