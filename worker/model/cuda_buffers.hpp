// The CUDA backend's own buffers, as formulas of the shapes: cuda/ allocates exactly these sizes
// and worker/model/memory_plan.hpp counts them, so the plan (which runs where CUDA is absent: xlaunch
// --dry-run, the fit check before the backend exists) and the allocations are one formula.
// Constants and constexpr functions only, so that the kernels' headers include it too.
#pragma once

#include <cstddef>

#include "common/precision.hpp"

namespace xtrain::cuda_buffers {

// cuBLASLt's workspace, shared by every product: what NVIDIA recommends for Hopper, enough for
// any split-K the heuristic picks.
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
// The gradient norm's reduction: a fixed grid of blocks, one double partial each, plus the sum.
constexpr int kSumSquaresBlocks = 1024;
constexpr size_t kSumSquaresPartialsBytes = (kSumSquaresBlocks + 1) * sizeof(double);
// Deterministic column sums (bias and layernorm-parameter gradients): the rows are cut into at
// most kColumnMaxGroups groups, by blocks of kColumnRowThreads row threads. Layernorm backward's
// one-pass kernel runs one block per group: 256 fill a 132-SM GPU about twice over, for partials
// of 256 x 2 x C floats (1.5 MiB at C = 768, less than the embedding's scratch it shares).
constexpr int kColumnRowThreads = 8;
constexpr int kColumnMaxGroups = 256;
// Embedding backward: the sorted positions are cut into chunks of this many entries.
constexpr int kEmbeddingChunk = 64;

constexpr size_t aligned256(size_t bytes) { return (bytes + 255) / 256 * 256; }

constexpr int column_groups(int rows) {
  const int g = (rows + kColumnRowThreads - 1) / kColumnRowThreads;
  return g < 1 ? 1 : g > kColumnMaxGroups ? kColumnMaxGroups : g;
}

constexpr size_t column_reduce_scratch_floats(int K, int rows, int cols) {
  return static_cast<size_t>(column_groups(rows)) * K * cols;
}

// Embedding backward's scratch: the (token, position) keys, the sorted keys, two partial sums per
// chunk and channel, and cub::DeviceRadixSort's temporary storage, each part 256-byte aligned.
struct EmbeddingScratch {
  size_t keys = 0, sorted = 0, partials = 0, sort = 0;  // byte offsets
  size_t sort_bytes = 0;
  size_t total = 0;
  static constexpr EmbeddingScratch of(int BT, int C, size_t sort_bytes) {
    const size_t chunks = (static_cast<size_t>(BT) + kEmbeddingChunk - 1) / kEmbeddingChunk;
    const size_t key_bytes = aligned256(static_cast<size_t>(BT) * sizeof(unsigned long long));
    EmbeddingScratch s;
    s.sorted = key_bytes;
    s.partials = 2 * key_bytes;
    s.sort = s.partials + aligned256(chunks * 2 * C * sizeof(float));
    s.sort_bytes = sort_bytes;
    s.total = s.sort + aligned256(sort_bytes);
    return s;
  }
};

// What the plan allows the radix sort of BT 64-bit keys: the alternate key buffer, and 8 MiB for
// its histograms, look-back tiles or spine (a few KiB for the one-sweep sort CUB picks on sm_80
// and later; a few MiB for its older pass-by-pass sort on a big GPU). The backend asks CUB and
// takes the larger of the two, and a [gpu] test checks that the allowance held.
constexpr size_t embedding_sort_allowance_bytes(int BT) {
  return aligned256(static_cast<size_t>(BT) * sizeof(unsigned long long)) + (size_t{8} << 20);
}

// The backend's private scratch for operations on up to `rows` positions of up to `cols`
// channels: the larger of the column sums' partials and the embedding's scratch.
constexpr size_t scratch_bytes(int rows, int cols, size_t sort_bytes) {
  const size_t column_sums = column_reduce_scratch_floats(2, rows, cols) * sizeof(float);
  const size_t embedding = EmbeddingScratch::of(rows, cols, sort_bytes).total;
  return column_sums > embedding ? column_sums : embedding;
}

// The flash attention keeps the logsumexp of each row for backward (B,NH,T) and needs
// D = dO . O per row as scratch (B,NH,T).
constexpr size_t attention_row_floats(int B, int T, int NH) { return static_cast<size_t>(B) * NH * T; }

// Whether the attention backward sums dQ by atomics: train.deterministic false, in bf16 (fp32
// and tf32 storage have no such path).
constexpr bool attention_dq_by_atomics(Precision precision, bool deterministic) {
  return !deterministic && precision == Precision::bf16;
}

// Where the attention backward's fp32 dQ sum (B,T,C) starts in its scratch when dQ is summed by
// atomics: after D, rounded up to 16 bytes for its packs.
constexpr size_t attention_dq_sum_offset(int B, int T, int NH) { return (attention_row_floats(B, T, NH) + 3) / 4 * 4; }

// The attention backward's scratch: D, and with atomic dQ the dQ sum.
constexpr size_t attention_scratch_floats(int B, int T, int C, int NH, bool atomic_dq) {
  return atomic_dq ? attention_dq_sum_offset(B, T, NH) + static_cast<size_t>(B) * T * C : attention_row_floats(B, T, NH);
}

}  // namespace xtrain::cuda_buffers
