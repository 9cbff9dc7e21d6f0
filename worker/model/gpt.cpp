#include "worker/model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <new>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include "common/usable_cpus.hpp"
#include "worker/model/host_access.hpp"
#include "worker/model/memory_plan.hpp"
#include "worker/model/weight_init.hpp"

namespace xtrain {

namespace {

// Tokens index wte rows and targets index logits: one outside [0, V) would read or write past
// them, so check on the host before uploading.
void check_token_range(const int32_t* ids, int n, int V, const char* what) {
  for (int i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= V) {
      throw std::out_of_range(std::string("GPT::forward: ") + what + "[" + std::to_string(i) + "] = " +
                              std::to_string(ids[i]) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }
}

// Address space that is reserved and never touched: no memory backs it, and nothing may read or
// write through it. Its addresses stand for offsets into memory the host cannot address.
class ReservedAddresses {
 public:
  explicit ReservedAddresses(size_t bytes) : bytes_(std::max<size_t>(bytes, 1)) {
    data_ = ::mmap(nullptr, bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data_ == MAP_FAILED) throw std::bad_alloc();
  }
  ~ReservedAddresses() { ::munmap(data_, bytes_); }
  ReservedAddresses(const ReservedAddresses&) = delete;
  ReservedAddresses& operator=(const ReservedAddresses&) = delete;

  void* data() const { return data_; }

 private:
  size_t bytes_;
  void* data_;
};

}  // namespace

GPT::GPT(const ModelSpec& spec, Backend& backend, int max_batch, ModelUse use)
    : backend_(backend), layout_(ModelDims::from(spec)), max_batch_(max_batch), use_(use) {
  const ModelDims& d = layout_.dims();
  if (d.L < 1 || d.NH < 1 || d.C < 1 || d.T < 1 || d.V < 1) {
    throw std::invalid_argument("GPT: n_layer, n_head, n_embd, seq_len and vocab_size must all be >= 1");
  }
  if (d.C % d.NH != 0) {
    throw std::invalid_argument("GPT: n_embd (" + std::to_string(d.C) + ") must be a multiple of n_head (" +
                                std::to_string(d.NH) + ")");
  }
  if (d.C % 2 != 0) {
    throw std::invalid_argument("GPT: n_embd (" + std::to_string(d.C) +
                                ") must be even: the MLP's fused GELU product needs 4 * n_embd to be a multiple of 8");
  }
  if (max_batch < 1) throw std::invalid_argument("GPT: max_batch must be >= 1");
  const bool training = use_ == ModelUse::kTraining;
  const bool bf16 = backend_.precision() == Precision::bf16;
  // Inference in bf16 reads the copy only, and nothing updates it: no master to keep.
  if (training || !bf16) params_ = backend_.alloc_floats(layout_.total());
  if (bf16) weight_copy_ = backend_.alloc_acts(layout_.total());
  if (training) grads_ = backend_.alloc_floats(layout_.total());
  allocate_activations();
  if (training) backend_.reserve_scratch(max_batch_ * d.T, 4 * d.C);  // backward's: forwards need none
  if (use_ == ModelUse::kDecoding) {
    allocate_step_rows();  // its plan counts them
  } else {
    host_losses_.resize(static_cast<size_t>(max_batch_) * d.T);
  }
}

// Nothing here throws: the backend's free and drop_recordings never do (worker/model/backend.hpp).
GPT::~GPT() {
  drop_recordings();
  backend_.free(step_.position);
  backend_.free(step_.float_memory);
  backend_.free(step_.act_memory);
  backend_.free(int_memory_);
  backend_.free(float_memory_);
  backend_.free(act_memory_.data());
  backend_.free(grads_);
  backend_.free(weight_copy_.data());
  backend_.free(params_);
}

namespace {

// Where each tensor of Activations lies in its allocation: the layout's offset, the pointer set.
template <class Ptr>
struct TensorSlot {
  size_t ActivationLayout::*offset;
  Ptr Activations::*pointer;
};
#define XTRAIN_SLOT(name) {&ActivationLayout::name, &Activations::name}
constexpr TensorSlot<ActPtr> kActSlots[] = {
    XTRAIN_SLOT(encoded),   XTRAIN_SLOT(ln1),      XTRAIN_SLOT(qkv),       XTRAIN_SLOT(atty),
    XTRAIN_SLOT(residual2), XTRAIN_SLOT(ln2),      XTRAIN_SLOT(fch),       XTRAIN_SLOT(fch_gelu),
    XTRAIN_SLOT(residual3), XTRAIN_SLOT(lnf),      XTRAIN_SLOT(logits),    XTRAIN_SLOT(proj_out),
    XTRAIN_SLOT(dresidual), XTRAIN_SLOT(dbtc),     XTRAIN_SLOT(dqkv),      XTRAIN_SLOT(dfch)};
constexpr TensorSlot<float*> kFloatSlots[] = {
    XTRAIN_SLOT(ln1_mean), XTRAIN_SLOT(ln1_rstd), XTRAIN_SLOT(att_saved), XTRAIN_SLOT(ln2_mean),
    XTRAIN_SLOT(ln2_rstd), XTRAIN_SLOT(lnf_mean), XTRAIN_SLOT(lnf_rstd),  XTRAIN_SLOT(losses),
    XTRAIN_SLOT(att_scratch)};
constexpr TensorSlot<int32_t*> kIntSlots[] = {XTRAIN_SLOT(tokens), XTRAIN_SLOT(targets)};
#undef XTRAIN_SLOT
static_assert(sizeof(Activations) == std::size(kActSlots) * sizeof(ActPtr) + std::size(kFloatSlots) * sizeof(float*) +
                                         std::size(kIntSlots) * sizeof(int32_t*),
              "every tensor of Activations has a slot");

template <class Ptr, size_t N>
void point_into(Activations& a, Ptr base, const ActivationLayout& layout, const TensorSlot<Ptr> (&slots)[N]) {
  for (const TensorSlot<Ptr>& s : slots) a.*s.pointer = base + layout.*s.offset;
}

}  // namespace

// One allocation per storage type (worker/model/memory_plan.hpp's layout), then a pointer into it
// per tensor, by the tables above.
void GPT::allocate_activations() {
  const ModelDims& d = layout_.dims();
  att_saved_per_layer_ = backend_.attention_saved_floats(max_batch_, d.T, d.C, d.NH);
  const ActivationLayout at = ActivationLayout::of(d, max_batch_, backend_.act_dtype(), att_saved_per_layer_,
                                                   backend_.attention_scratch_floats(max_batch_, d.T, d.C, d.NH), use_);
  act_memory_ = backend_.alloc_acts(at.acts);
  float_memory_ = backend_.alloc_floats(at.floats);
  int_memory_ = backend_.alloc_ints(at.ints);
  point_into(acts_, act_memory_, at, kActSlots);
  point_into(acts_, float_memory_, at, kFloatSlots);
  point_into(acts_, int_memory_, at, kIntSlots);
}

void GPT::init_weights(std::int64_t seed) {
  const int threads = static_cast<int>(std::min(usable_cpus(), 16u));
  load_weights([&](float* params, const HostAccess& memory) {
    draw_initial_weights(layout_, seed, params, threads, memory);
  });
}

void GPT::load_weights(const std::function<void(float* params, const HostAccess& memory)>& fill) {
  if (params_ != nullptr) {
    fill(params_, host_access(backend_));
    return refresh_weights();
  }
  // Only the copy (bf16 inference): `fill`'s addresses lie in a stretch of address space as long
  // as the weights, reserved and never touched (no memory behind it), whose offsets are the
  // copy's; each piece is uploaded there, rounded as refresh_weights rounds.
  const ReservedAddresses addresses(layout_.total() * sizeof(float));
  auto* const base = static_cast<float*>(addresses.data());
  fill(base, HostAccess(
                 [](const float*, size_t) -> const float* {
                   throw std::logic_error("GPT::load_weights: a model without master weights is written, not read");
                 },
                 [&](float* dst, const float* host, size_t n) {
                   backend_.upload(weight_copy_ + static_cast<size_t>(dst - base), host, n);
                 }));
}

void GPT::set_params(const float* host) {
  if (params_ == nullptr) return backend_.upload(weight_copy_, host, layout_.total());
  backend_.upload(params_, host, layout_.total());
  refresh_weights();
}

void GPT::refresh_weights() {
  if (weight_copy_ && params_) backend_.convert(weight_copy_, params_, layout_.total());
}

void GPT::forward(const int32_t* tokens, const int32_t* targets, int B) {
  const ModelDims& d = layout_.dims();
  if (use_ == ModelUse::kDecoding) {
    throw std::logic_error("GPT::forward: this model was built for a decoder, whose windows have no logits "
                           "but their last positions' (forward_window)");
  }
  check_batch(B, "GPT::forward");
  const int BT = B * d.T;
  check_token_range(tokens, BT, d.V, "tokens");
  if (targets != nullptr) check_token_range(targets, BT, d.V, "targets");
  Backend& k = backend_;
  const Activations& a = acts_;
  if (targets != nullptr) k.upload(a.targets, targets, BT);
  // Forwards of the full batch replay recorded layers: with targets (training, validation) and
  // without (logits for a caller). Their layers are the same work; their heads are not.
  const bool recordable = B == max_batch_;
  forward_layers(tokens, B, recordable);
  run_layer(Pass::kForward, d.L, recordable, /*logits_only=*/targets == nullptr, [&] {
    k.matmul_forward(a.logits, a.lnf, weights() + layout_.wte(), nullptr, BT, d.C, d.Vp);
    // Gradient of the mean loss; backward folds in the caller's loss scale.
    if (targets != nullptr) {
      k.softmax_cross_entropy(a.logits, a.losses, a.targets, 1.0f / static_cast<float>(BT), BT, d.V, d.Vp);
    }
  });
  last_B_ = B;
  ++forwards_;
  backward_ready_ = targets != nullptr;
  if (targets != nullptr) loss_positions_ += static_cast<size_t>(BT);
}

void GPT::forward_window(const int32_t* tokens, int B, int last) {
  const ModelDims& d = layout_.dims();
  check_batch(B, "GPT::forward_window");
  if (last < 0 || last >= d.T) {
    throw std::out_of_range("GPT::forward_window: position " + std::to_string(last) + " is outside the context [0, " +
                            std::to_string(d.T) + ")");
  }
  check_token_range(tokens, B * d.T, d.V, "tokens");
  if (step_.act_memory == nullptr) allocate_step_rows();
  forward_layers(tokens, B, /*recordable=*/B == max_batch_);
  // One row a sequence: its own product, each reading the weights once. Eager, as `last` moves
  // the rows; a window is run once per prompt or slide.
  run_layer(Pass::kForward, d.L, /*recordable=*/false, /*logits_only=*/true, [&] {
    for (int b = 0; b < B; ++b) {
      const size_t row = static_cast<size_t>(b) * d.T + static_cast<size_t>(last);
      backend_.matmul_forward(step_.logits + static_cast<size_t>(b) * d.Vp, acts_.lnf + row * d.C,
                              weights() + layout_.wte(), nullptr, 1, d.C, d.Vp);
    }
  });
  ++forwards_;
  backward_ready_ = false;  // the logits' rows hold no gradient
}

void GPT::check_batch(int B, const char* who) const {
  if (B < 1 || B > max_batch_) {
    throw std::invalid_argument(std::string(who) + ": batch " + std::to_string(B) + " outside [1, " +
                                std::to_string(max_batch_) + "]");
  }
}

void GPT::forward_layers(const int32_t* tokens, int B, bool recordable) {
  const ModelDims& d = layout_.dims();
  const int T = d.T, C = d.C, NH = d.NH, BT = B * T;
  // Per-layer activations are strided by the allocated batch, so one layout serves every B.
  const size_t btc = static_cast<size_t>(max_batch_) * T * C;
  const size_t bt = static_cast<size_t>(max_batch_) * T;
  Backend& k = backend_;
  const Activations& a = acts_;
  const ConstActPtr p = weights();
  k.upload(a.tokens, tokens, BT);
  run_layer(Pass::kForward, -1, recordable, /*logits_only=*/false, [&] {
    k.embedding_forward(a.encoded, a.tokens, p + layout_.wte(), p + layout_.wpe(), B, T, C);
    const NextNorm n = norm_after(-1);
    k.layernorm_forward(n.out, n.mean, n.rstd, a.encoded, n.weight, n.bias, BT, C);
  });
  for (int l = 0; l < d.L; ++l) {
    run_layer(Pass::kForward, l, recordable, /*logits_only=*/false, [&] {
      // For inference every layer but qkv's reuses one slice: a block reads its input residual3
      // (ln1) before it writes its own.
      const size_t kl = kept_layer(l);
      const BlockRows r{.residual = l == 0 ? a.encoded : a.residual3 + kept_layer(l - 1) * btc,
                        .ln1 = a.ln1 + kl * btc,
                        .qkv = a.qkv + 3 * l * btc,
                        .atty = a.atty + kl * btc,
                        .residual2 = a.residual2 + kl * btc,
                        .ln2 = a.ln2 + kl * btc,
                        .ln2_mean = a.ln2_mean + kl * bt,
                        .ln2_rstd = a.ln2_rstd + kl * bt,
                        .fch = a.fch + 4 * kl * btc,
                        .fch_gelu = a.fch_gelu + 4 * kl * btc,
                        .proj_out = a.proj_out,
                        .residual3 = a.residual3 + kl * btc,
                        .next = norm_after(l)};
      block_forward(l, BT, r, [&] {
        k.attention_forward(r.atty, a.att_saved + kl * att_saved_per_layer_, r.qkv, a.att_scratch, B, T, C, NH);
      });
    });
  }
}

// Each block ends with its residual add fused into the next layernorm (layer l + 1's ln1, or lnf
// after the last): one pass over the residual stream instead of two.
GPT::NextNorm GPT::norm_after(int layer) const {
  const ConstActPtr p = weights();
  const Activations& a = acts_;
  if (layer + 1 == layout_.dims().L) return {a.lnf, a.lnf_mean, a.lnf_rstd, p + layout_.lnf_w(), p + layout_.lnf_b()};
  const size_t bt = static_cast<size_t>(max_batch_) * layout_.dims().T;
  const size_t btc = bt * layout_.dims().C;
  const LayerOffsets& o = layout_.layer(layer + 1);
  const size_t kl = kept_layer(layer + 1);
  return {a.ln1 + kl * btc, a.ln1_mean + kl * bt, a.ln1_rstd + kl * bt, p + o.ln1_w, p + o.ln1_b};
}

void GPT::block_forward(int layer, int rows, const BlockRows& r, const std::function<void()>& attend) {
  Backend& k = backend_;
  const int C = layout_.dims().C;
  const ConstActPtr p = weights();
  const LayerOffsets& o = layout_.layer(layer);
  const NextNorm& n = r.next;
  k.matmul_forward(r.qkv, r.ln1, p + o.qkv_w, p + o.qkv_b, rows, C, 3 * C);
  attend();
  k.matmul_forward(r.proj_out, r.atty, p + o.attn_proj_w, p + o.attn_proj_b, rows, C, C);
  k.residual_layernorm_forward(r.residual2, r.ln2, r.ln2_mean, r.ln2_rstd, r.residual, r.proj_out, p + o.ln2_w,
                               p + o.ln2_b, rows, C);
  k.matmul_gelu_forward(r.fch_gelu, r.fch, r.ln2, p + o.fc_w, p + o.fc_b, rows, C, 4 * C);
  k.matmul_forward(r.proj_out, r.fch_gelu, p + o.fc_proj_w, p + o.fc_proj_b, rows, 4 * C, C);
  k.residual_layernorm_forward(r.residual3, n.out, n.mean, n.rstd, r.residual2, r.proj_out, n.weight, n.bias, rows, C);
}

double GPT::take_loss() {
  if (loss_positions_ == 0) throw std::logic_error("GPT::take_loss needs a forward with targets first");
  backend_.download(host_losses_.data(), acts_.losses, host_losses_.size());
  double sum = 0.0;
  for (float x : host_losses_) sum += x;
  backend_.fill_zero(acts_.losses, host_losses_.size());
  const double mean = sum / static_cast<double>(loss_positions_);
  loss_positions_ = 0;
  return mean;
}

void GPT::backward(float loss_scale, const std::function<void(Span)>& on_bucket_ready) {
  if (use_ != ModelUse::kTraining) throw std::logic_error("GPT::backward: this model was built for inference");
  if (!backward_ready_) throw std::logic_error("GPT::backward needs a forward with targets first");
  const ModelDims& d = layout_.dims();
  const int B = last_B_, T = d.T, C = d.C, NH = d.NH, BT = B * T;
  const size_t btc = static_cast<size_t>(max_batch_) * T * C;
  const size_t bt = static_cast<size_t>(max_batch_) * T;
  Backend& k = backend_;
  const Activations& a = acts_;
  const ConstActPtr p = weights();
  float* g = grads_;
  auto residual_in = [&](int l) -> ConstActPtr { return l == 0 ? a.encoded : a.residual3 + (l - 1) * btc; };
  const bool recordable = B == max_batch_;
  if (recordable) key_recordings(loss_scale);

  // Output layer (tied to wte) and the final layernorm; dresidual then holds d loss / d residual3[L-1].
  run_layer(Pass::kBackward, d.L, recordable, /*logits_only=*/false, [&] {
    k.fill_zero(a.dresidual, static_cast<size_t>(BT) * C);
    k.matmul_backward(a.dbtc, g + layout_.wte(), nullptr, a.logits, a.lnf, p + layout_.wte(), BT, C, d.Vp,
                      loss_scale);
    k.layernorm_backward(a.dresidual, g + layout_.lnf_w(), g + layout_.lnf_b(), a.dbtc, residual_in(d.L),
                         p + layout_.lnf_w(), a.lnf_mean, a.lnf_rstd, BT, C);
  });
  for (int l = d.L - 1; l >= 0; --l) {
    run_layer(Pass::kBackward, l, recordable, /*logits_only=*/false, [&] {
      const LayerOffsets& o = layout_.layer(l);
      const ConstActPtr qkv = a.qkv + 3 * l * btc;
      const ConstActPtr atty = a.atty + l * btc;
      // MLP: dresidual is the gradient of residual3 = residual2 + fc_proj(gelu(fc(ln2))).
      k.matmul_gelu_backward(a.dfch, g + o.fc_proj_w, g + o.fc_proj_b, a.dresidual, a.fch_gelu + 4 * l * btc,
                             p + o.fc_proj_w, a.fch + 4 * l * btc, BT, 4 * C, C, 1.0f);
      k.matmul_backward(a.dbtc, g + o.fc_w, g + o.fc_b, a.dfch, a.ln2 + l * btc, p + o.fc_w, BT, C, 4 * C, 1.0f);
      k.layernorm_backward(a.dresidual, g + o.ln2_w, g + o.ln2_b, a.dbtc, a.residual2 + l * btc, p + o.ln2_w,
                           a.ln2_mean + l * bt, a.ln2_rstd + l * bt, BT, C);
      // Attention: dresidual is now the gradient of residual2 = residual + attn_proj(attention(qkv(ln1))).
      k.matmul_backward(a.dbtc, g + o.attn_proj_w, g + o.attn_proj_b, a.dresidual, atty, p + o.attn_proj_w, BT, C,
                        C, 1.0f);
      k.attention_backward(a.dqkv, a.dbtc, qkv, atty, a.att_saved + l * att_saved_per_layer_, a.att_scratch, B, T,
                           C, NH);
      k.matmul_backward(a.dbtc, g + o.qkv_w, g + o.qkv_b, a.dqkv, a.ln1 + l * btc, p + o.qkv_w, BT, C, 3 * C,
                        1.0f);
      k.layernorm_backward(a.dresidual, g + o.ln1_w, g + o.ln1_b, a.dbtc, residual_in(l), p + o.ln1_w,
                           a.ln1_mean + l * bt, a.ln1_rstd + l * bt, BT, C);
    });
    if (on_bucket_ready) on_bucket_ready(layout_.layer_span(l));
  }
  run_layer(Pass::kBackward, -1, recordable, /*logits_only=*/false,
            [&] { k.embedding_backward(g + layout_.wte(), g + layout_.wpe(), a.dresidual, a.tokens, B, T, C); });
  if (on_bucket_ready) on_bucket_ready(layout_.embedding_span());
}

void GPT::zero_grads() {
  if (grads_ == nullptr) throw std::logic_error("GPT::zero_grads: this model was built for inference");
  backend_.fill_zero(grads_, layout_.total());
}

// ---- recorded layers ----------------------------------------------------------------------------

void GPT::set_replay(Replay mode) {
  if (mode != Replay::kOff && !backend_.can_record()) {
    throw std::invalid_argument("GPT::set_replay: the " + backend_.name() + " backend cannot record its work");
  }
  drop_recordings();
  replay_ = mode;
  layers_.assign(2 * static_cast<size_t>(layout_.dims().L + 2), RecordedLayer{});
  logits_head_ = RecordedLayer{};
  step_work_.clear();
}

void GPT::drop_recordings() noexcept {
  bool any = false;
  auto drop = [&](RecordedLayer& r) {
    any = any || r.recording >= 0;
    r.recording = -1;
  };
  for (RecordedLayer& r : layers_) drop(r);
  drop(logits_head_);
  for (RecordedLayer& r : step_work_) drop(r);
  if (any) backend_.drop_recordings();
}

// The head's backward folds the loss scale into its first product: another scale is other work.
void GPT::key_recordings(float loss_scale) {
  if (replay_ == Replay::kOff || loss_scale == recorded_scale_) return;
  drop_recordings();
  recorded_scale_ = loss_scale;
}

void GPT::run_layer(Pass pass, int layer, bool recordable, bool logits_only, const std::function<void()>& work) {
  if (layer_observer_) layer_observer_(pass, layer);
  if (replay_ == Replay::kOff || !recordable) return work();
  const size_t per_pass = layers_.size() / 2;
  RecordedLayer& r = logits_only ? logits_head_
                                 : layers_[(pass == Pass::kForward ? 0 : per_pass) + static_cast<size_t>(layer + 1)];
  run_recorded(
      r,
      [&] {
        const std::string part = layer < 0                   ? std::string("the embeddings")
                                 : layer == layout_.dims().L ? std::string("the head")
                                                             : "layer " + std::to_string(layer);
        return std::string(pass == Pass::kForward ? "forward" : "backward") + " of " + part;
      },
      work);
}

void GPT::run_recorded(RecordedLayer& r, const std::function<std::string()>& part, const std::function<void()>& work) {
  if (r.recording < 0) {
    if (r.runs++ == 0) return work();  // warm-up: products pick their algorithms, kernels load
    try {
      backend_.begin_recording();
      work();
      r.recording = backend_.end_recording();
    } catch (const std::exception& e) {
      backend_.abort_recording();
      const std::string what = part() + " could not be recorded: " + e.what();
      if (replay_ == Replay::kRequired) throw std::runtime_error("train.cuda_graph \"on\": the " + what);
      spdlog::warn("train.cuda_graph: the {}; running every layer eagerly from here on", what);
      drop_recordings();
      replay_ = Replay::kOff;
      return work();
    }
  }
  backend_.replay(r.recording);
}

}  // namespace xtrain
