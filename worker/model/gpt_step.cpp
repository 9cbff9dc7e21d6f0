// GPT::forward_step: a decoder's one position of work for B sequences, with the forward's qkv
// activations of sequences [0, B) as the KV cache (worker/model/gpt.hpp). The blocks are the
// forward's (GPT::block_forward) on B rows; only the embedding and the attention differ, both
// reading the position from backend memory, so that one recording per B replays every step.
// GPT::copy_first_sequence: the cache and logits of one sequence's window, handed to the others.
#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/model/gpt.hpp"
#include "worker/model/memory_plan.hpp"

namespace xtrain {

// The step's rows, max_batch of each, by worker/model/memory_plan.hpp's StepRowsLayout.
void GPT::allocate_step_rows() {
  const StepRowsLayout at = StepRowsLayout::of(layout_.dims(), max_batch_, backend_.act_dtype());
  StepRows s;
  const ActPtr a = backend_.alloc_acts(at.acts);
  float* f = backend_.alloc_floats(at.floats);
  s.act_memory = a.data();
  s.float_memory = f;
  s.x = a + at.x;
  s.ln = a + at.ln;
  s.qkv = a + at.qkv;
  s.atty = a + at.atty;
  s.proj_out = a + at.proj_out;
  s.fch = a + at.fch;
  s.fch_gelu = a + at.fch_gelu;
  s.logits = a + at.logits;
  s.mean = f + at.mean;
  s.rstd = f + at.rstd;
  s.position = backend_.alloc_ints(at.ints);
  s.tokens = s.position + 1;
  step_ = s;
}

void GPT::copy_first_sequence(int B) {
  check_batch(B, "GPT::copy_first_sequence");
  if (step_.act_memory == nullptr) allocate_step_rows();
  const ModelDims& d = layout_.dims();
  const size_t sequence = static_cast<size_t>(d.T) * 3 * d.C;           // one sequence's qkv in a layer
  const size_t layer = static_cast<size_t>(max_batch_) * sequence;       // (max_batch,T,3C) a layer
  const size_t logits = static_cast<size_t>(d.Vp);                       // one row of the step's logits
  // Sequences [0, n) onto [n, 2n): a layer takes ceil(log2 B) copies, not B - 1 (the sequences
  // of a layer are adjacent).
  for (int n = 1; n < B; n *= 2) {
    const auto count = static_cast<size_t>(std::min(n, B - n));
    for (int l = 0; l < d.L; ++l) {
      const ActPtr first = acts_.qkv + static_cast<size_t>(l) * layer;
      backend_.copy(first + static_cast<size_t>(n) * sequence, first, count * sequence);
    }
    backend_.copy(step_.logits + static_cast<size_t>(n) * logits, step_.logits, count * logits);
  }
}

void GPT::forward_step(std::span<const std::int32_t> tokens, int position) {
  const ModelDims& d = layout_.dims();
  const int B = static_cast<int>(tokens.size());
  if (B < 1 || B > max_batch_) {
    throw std::invalid_argument("GPT::forward_step: " + std::to_string(tokens.size()) + " sequences, expected 1 to " +
                                std::to_string(max_batch_));
  }
  for (const std::int32_t token : tokens) {
    if (token < 0 || token >= d.V) {
      throw std::out_of_range("GPT::forward_step: token " + std::to_string(token) + " is outside the vocabulary [0, " +
                              std::to_string(d.V) + ")");
    }
  }
  if (position < 0 || position >= d.T) {
    throw std::out_of_range("GPT::forward_step: position " + std::to_string(position) + " is outside the context [0, " +
                            std::to_string(d.T) + ")");
  }
  if (step_.act_memory == nullptr) allocate_step_rows();
  const int C = d.C;
  const size_t btc = static_cast<size_t>(max_batch_) * d.T * C;
  Backend& k = backend_;
  const StepRows& s = step_;
  const ConstActPtr p = weights();
  step_upload_.assign(1, position);  // one upload: the position, then the tokens
  step_upload_.insert(step_upload_.end(), tokens.begin(), tokens.end());
  k.upload(s.position, step_upload_.data(), step_upload_.size());
  auto work = [&] {
    k.embedding_forward_at(s.x, s.tokens, p + layout_.wte(), p + layout_.wpe(), s.position, B, 1, C);
    const NextNorm first = norm_after(-1);
    k.layernorm_forward(s.ln, s.mean, s.rstd, s.x, first.weight, first.bias, B, C);
    for (int l = 0; l < d.L; ++l) {
      const ActPtr cache = acts_.qkv + 3 * l * btc;  // (B,T,3C) sequences [0, B) of layer l
      NextNorm next = norm_after(l);
      next.out = s.ln;
      next.mean = s.mean;
      next.rstd = s.rstd;
      const BlockRows r{.residual = s.x,
                        .ln1 = s.ln,
                        .qkv = s.qkv,
                        .atty = s.atty,
                        .residual2 = s.x,
                        .ln2 = s.ln,
                        .ln2_mean = s.mean,
                        .ln2_rstd = s.rstd,
                        .fch = s.fch,
                        .fch_gelu = s.fch_gelu,
                        .proj_out = s.proj_out,
                        .residual3 = s.x,
                        .next = next};
      block_forward(l, B, r, [&] { k.attention_step(s.atty, cache, s.qkv, s.position, B, d.T, C, d.NH); });
    }
    k.matmul_forward(s.logits, s.ln, p + layout_.wte(), nullptr, B, C, d.Vp);
  };
  ++forwards_;
  backward_ready_ = false;  // the step wrote rows of qkv that backward would read
  if (replay_ == Replay::kOff) return work();
  if (step_work_.size() < static_cast<size_t>(B)) step_work_.resize(static_cast<size_t>(B));
  const auto part = [B] {
    return "decoder's step" + (B > 1 ? " of " + std::to_string(B) + " sequences" : std::string());
  };
  run_recorded(step_work_[static_cast<size_t>(B) - 1], part, work);
}

}  // namespace xtrain
