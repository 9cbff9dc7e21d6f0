// GPT::forward_step: a decoder's one position of work, with the forward's qkv activations of
// sequence 0 as the KV cache (worker/model/gpt.hpp). The blocks are the forward's
// (GPT::block_forward) on one row; only the embedding and the attention differ, both reading the
// position from backend memory, so that one recording replays every step.
#include <stdexcept>
#include <string>

#include "worker/model/gpt.hpp"
#include "worker/model/memory_plan.hpp"

namespace xtrain {

// The step's rows carved as GPT's activations are (worker/model/memory_plan.hpp's Carver).
void GPT::allocate_step_rows() {
  const size_t C = static_cast<size_t>(layout_.dims().C), Vp = static_cast<size_t>(layout_.dims().Vp);
  Carver acts(dtype_bytes(backend_.act_dtype()));
  const size_t x = acts.take(C), ln = acts.take(C), qkv = acts.take(3 * C), atty = acts.take(C),
               proj_out = acts.take(C), fch = acts.take(4 * C), fch_gelu = acts.take(4 * C), logits = acts.take(Vp);
  Carver floats(sizeof(float));
  const size_t mean = floats.take(1), rstd = floats.take(1);
  StepRows s;
  const ActPtr a = backend_.alloc_acts(acts.total());
  float* f = backend_.alloc_floats(floats.total());
  s.act_memory = a.data();
  s.float_memory = f;
  s.x = a + x;
  s.ln = a + ln;
  s.qkv = a + qkv;
  s.atty = a + atty;
  s.proj_out = a + proj_out;
  s.fch = a + fch;
  s.fch_gelu = a + fch_gelu;
  s.logits = a + logits;
  s.mean = f + mean;
  s.rstd = f + rstd;
  s.token_position = backend_.alloc_ints(2);
  step_ = s;
}

void GPT::forward_step(std::int32_t token, int position) {
  const ModelDims& d = layout_.dims();
  if (token < 0 || token >= d.V) {
    throw std::out_of_range("GPT::forward_step: token " + std::to_string(token) + " is outside the vocabulary [0, " +
                            std::to_string(d.V) + ")");
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
  const std::int32_t token_position[2] = {token, position};
  k.upload(s.token_position, token_position, 2);
  auto work = [&] {
    k.embedding_forward_at(s.x, s.token_position, p + layout_.wte(), p + layout_.wpe(), s.token_position + 1, 1, 1, C);
    const NextNorm first = norm_after(-1);
    k.layernorm_forward(s.ln, s.mean, s.rstd, s.x, first.weight, first.bias, 1, C);
    for (int l = 0; l < d.L; ++l) {
      const ActPtr cache = acts_.qkv + 3 * l * btc;  // sequence 0's rows of layer l
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
      block_forward(l, 1, r, [&] { k.attention_step(s.atty, cache, s.qkv, s.token_position + 1, 1, d.T, C, d.NH); });
    }
    k.matmul_forward(s.logits, s.ln, p + layout_.wte(), nullptr, 1, C, d.Vp);
  };
  ++forwards_;
  backward_ready_ = false;  // the step wrote a row of qkv that backward would read
  if (replay_ == Replay::kOff) return work();
  run_recorded(step_work_, [] { return std::string("decoder's step"); }, work);
}

}  // namespace xtrain
