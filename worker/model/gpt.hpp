// GPT-2: token + learned position embeddings, L pre-LayerNorm blocks of causal multi-head
// self-attention and a GELU (tanh) MLP, a final LayerNorm, and an output layer tied to the token
// embedding, trained with cross-entropy. Written once against the Backend interface, so the
// same code runs on the CPU and CUDA backends.
//
// Parameters live in one flat backend buffer laid out by ParamLayout (worker/model/param_layout.hpp),
// in fp32 (the master weights); gradients in a second fp32 buffer with the same layout. Every
// operation reads the weights in the activation dtype: in bf16 precision from a third buffer,
// the master rounded to bf16, which AdamW refreshes in the same pass that updates the master
// and every upload refreshes too; in fp32 and tf32 the master itself (no copy, no memory).
// Activations for up to `max_batch` sequences are allocated once, at construction, laid out by
// worker/model/memory_plan.hpp (which counts them for the memory plan).
//
// A GPT built for inference (ModelUse::kInference: the eval command) keeps what forwards and steps
// need only: no gradients, no backward scratch, one layer of each activation reused by the next
// (all but qkv, the KV cache), and in bf16 no fp32 master, its weights uploaded straight into the
// bf16 copy (nothing updates them). GPT-2 XL at 4 sequences of 1024 in bf16: 5.3 GiB, where a GPT
// built for training holds 24.5 (the trainer's plan less AdamW's moments). One built for decoding
// (ModelUse::kDecoding: the generate command) keeps no logits of every position either: its
// windows' and steps' logits are the step's rows.
//
// A decoder's step (forward_step) runs one new position of sequences [0, B) with GPT's own qkv
// activations as their KV cache: a forward writes every row of them, a step the row of its position.
//
// Recorded layers (CUDA graphs, where the backend records: Backend::can_record). With replay on,
// the work of each layer in each pass (forward: the embeddings, every block, the head with the
// loss; backward: the head, every block, the embeddings) is run eagerly the first time (warm-up:
// products pick their algorithms, kernels load), recorded the second time and replayed from then
// on: one launch per layer instead of one per operation. Forwards at the full batch replay, with
// targets (training, validation) and without (a decoder's logits: the same layers, a head of its
// own), and so do backwards at the full batch; a smaller batch runs eagerly. A decoder's step is
// one recording of its own per number of sequences, at any position (read from backend memory).
// The tokens are uploaded into fixed backend buffers before the replays; the layer observer and
// on_bucket_ready run on the host between the layers as before, so each gradient bucket's
// all-reduce stays outside the recordings and still overlaps the rest of backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/job_spec.hpp"
#include "worker/model/backend.hpp"
#include "worker/model/host_access.hpp"
#include "worker/model/memory_plan.hpp"
#include "worker/model/param_layout.hpp"

namespace xtrain {

// Everything forward keeps for backward, plus backward's own buffers; all backend memory, carved
// from three allocations (activations in the backend's activation dtype, fp32, int32).
// Per-layer tensors are stacked: ln1 is (L,B,T,C), layer l at l*B*T*C.
struct Activations {
  // In the activation dtype.
  ActPtr encoded;               // (B,T,C) embedding output = the residual stream into layer 0
  ActPtr ln1;                   // (L,B,T,C)
  ActPtr qkv;                   // (L,B,T,3C)
  ActPtr atty;                  // (L,B,T,C) attention output, before the projection
  ActPtr residual2;             // (L,B,T,C) residual + attention projection
  ActPtr ln2;                   // (L,B,T,C)
  ActPtr fch;                   // (L,B,T,4C) MLP hidden, before GELU
  ActPtr fch_gelu;              // (L,B,T,4C)
  ActPtr residual3;             // (L,B,T,C) block output
  ActPtr lnf;                   // (B,T,C)
  ActPtr logits;                // (B,T,Vp) logits, or after a forward with targets their gradient
  // fp32.
  float* ln1_mean = nullptr;    // (L,B,T)
  float* ln1_rstd = nullptr;    // (L,B,T)
  float* att_saved = nullptr;   // (L, attention_saved_floats) the backend's attention state
  float* ln2_mean = nullptr;    // (L,B,T)
  float* ln2_rstd = nullptr;    // (L,B,T)
  float* lnf_mean = nullptr;    // (B,T)
  float* lnf_rstd = nullptr;    // (B,T)
  float* losses = nullptr;      // (B,T) per-position cross-entropy
  // Scratch shared by forward and backward.
  ActPtr proj_out;              // (B,T,C) a projection's output before its residual add
  ActPtr dresidual;             // (B,T,C) gradient of the residual stream
  ActPtr dbtc;                  // (B,T,C) gradient of a layernorm output or of atty
  ActPtr dqkv;                  // (B,T,3C)
  ActPtr dfch;                  // (B,T,4C)
  float* att_scratch = nullptr; // (attention_scratch_floats)
  int32_t* tokens = nullptr;    // (B,T) of the last forward
  int32_t* targets = nullptr;   // (B,T) of the last forward
};

class GPT {
 public:
  // Allocates parameters (zero until init_weights or an upload), gradients (zero, in training)
  // and activations for micro-batches of up to max_batch sequences of spec.seq_len tokens.
  GPT(const ModelSpec& spec, Backend& backend, int max_batch, ModelUse use = ModelUse::kTraining);
  ~GPT();
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  // GPT-2's initialisation, from the seed alone (identical on every rank): weights ~ N(0, 0.02),
  // the two residual projections (attn.c_proj, mlp.c_proj) ~ N(0, 0.02/sqrt(2L)), wpe ~ N(0, 0.02),
  // biases 0, layernorm weights 1, padded wte rows 0. Drawn on the host through load_weights.
  void init_weights(std::int64_t seed);

  // The weights (layout().total() floats) from `fill`, which writes them at `params` through
  // `memory` (as import_model and draw_initial_weights do): into the master weights, in place
  // where the host reads the backend's memory, else 4 MiB at a time (host_access), then the copy
  // is refreshed; for a model without master weights (bf16 inference), each piece is rounded into
  // the copy as it is stored. No host copy of the model is made either way. A `fill` that throws
  // leaves the weights partly written.
  void load_weights(const std::function<void(float* params, const HostAccess& memory)>& fill);

  // Uploads the master weights from the host (layout().total() floats) and refreshes the copy
  // (for inference in bf16: uploads them into the copy, rounded as the refresh rounds).
  void set_params(const float* host);
  // Refreshes the weights' copy after params() was written in place (a broadcast from rank 0, a
  // checkpoint's load).
  void refresh_weights();
  ModelUse use() const { return use_; }

  // Runs the model on B <= max_batch sequences. tokens and targets are host arrays (B,T), each
  // token in [0, V) (std::out_of_range otherwise; std::invalid_argument for a bad B). With
  // targets: adds each position's cross-entropy to the loss sums (take_loss) and prepares
  // backward (logits() then holds the logits' gradient). Without targets (nullptr): keeps the
  // logits. Nothing here waits for the backend. A model built for decoding (ModelUse::kDecoding)
  // keeps no logits of every position: std::logic_error.
  void forward(const int32_t* tokens, const int32_t* targets, int B);
  // A decoder's window (worker/model/gpt_decoder.hpp): forward() without targets, but the head
  // runs on position `last` of each sequence only, into step_logits() (B,Vp), where forward()
  // would compute and keep all B x T positions' logits for one row of each to be read. The same
  // exceptions as forward(); `last` outside [0, T): std::out_of_range.
  void forward_window(const int32_t* tokens, int B, int last);

  // A decoder's step (worker/model/gpt_decoder.hpp): tokens[b] at `position` of sequence b, for
  // B = tokens.size() sequences, all at the same position, in one position of work each. Their
  // keys and values are those in sequences [0, B)'s qkv activations at the rows [0, position), as
  // the forwards and steps before left them (a forward writes every row, a step the row of its
  // position): the caller keeps track of what those rows hold, with forwards(). So the step's
  // logits, step_logits() (B,Vp), are forward()'s at that position on the same tokens, up to the
  // order of the sums (and in bf16 their rounding: Backend::attention_step). B outside
  // [1, max_batch]: std::invalid_argument; a token outside [0, V) or position outside [0, T):
  // std::out_of_range. Nothing here waits for the backend. A backward needs a forward with targets
  // after the last step (std::logic_error). The step's own rows (max_batch x (15 C + Vp)
  // activations) are allocated with a model built for decoding, whose plan counts them, else at
  // the first step or window (the trainer's samples: its plan leaves them out).
  void forward_step(std::span<const std::int32_t> tokens, int position);
  void forward_step(std::int32_t token, int position) { forward_step(std::span(&token, 1), position); }
  // After a window of sequence 0 alone (forward_window with B = 1): sequences [1, B) become its
  // copies, their qkv activations (every layer's KV cache) and their step_logits() rows, as if
  // the same window had run in each. generate's samples all start from the prompt: it runs once,
  // not B times. B outside [1, max_batch]: std::invalid_argument. Nothing here waits.
  void copy_first_sequence(int B);
  ConstActPtr step_logits() const { return step_.logits; }
  // forward() and forward_step() calls so far: a decoder that saw the count unchanged since its
  // own last call knows the qkv rows are still its tokens'.
  std::uint64_t forwards() const { return forwards_; }

  // The mean cross-entropy per position over every forward with targets since the last call,
  // then a fresh sum. The sums stay on the backend until here: one wait per optimizer step, not
  // one per micro-step. std::logic_error when no forward with targets came first.
  double take_loss();

  // ADDS to grads() the gradient of loss_scale * (mean loss of the last forward with targets),
  // e.g. loss_scale = 1/accumulation_steps. Calls on_bucket_ready(layout().layer_span(l)) for
  // l = L-1 down to 0 as soon as that layer's gradients are issued, then
  // on_bucket_ready(layout().embedding_span()) last. On an asynchronous backend the gradients
  // may still be in flight: the consumer orders itself after the backend's queue.
  // on_bucket_ready may be empty. Throws std::logic_error without a prior forward with targets,
  // or for inference.
  void backward(float loss_scale, const std::function<void(Span)>& on_bucket_ready = {});

  void zero_grads();  // std::logic_error for inference: it has no gradients

  // Progress reports: called as each layer of forward and backward begins, with the layer index,
  // -1 for the embeddings and n_layer for the output layer (final layernorm and logits). On an
  // asynchronous backend this marks what the host issues, not what the device runs.
  enum class Pass { kForward, kBackward };
  using LayerObserver = std::function<void(Pass, int layer)>;
  void set_layer_observer(LayerObserver observer) { layer_observer_ = std::move(observer); }

  // Recorded layers (see the top of this file). kPreferred falls back to eager work, with one
  // warning, when a recording fails; kRequired throws std::runtime_error then. Changing the loss
  // scale of backward redoes the recordings. std::invalid_argument when the backend cannot record.
  enum class Replay { kOff, kPreferred, kRequired };
  void set_replay(Replay mode);
  Replay replay() const { return replay_; }  // kOff after a fallback

  // (B,T,Vp) of the last forward without targets, backend memory. Only the first V columns are
  // logits of tokens; the padded ones are 0 (wte's padded rows start at 0 and never get gradient).
  ConstActPtr logits() const { return acts_.logits; }
  const float* losses() const { return acts_.losses; }  // (B,T) sums since the last take_loss

  // (layout().total()) backend memory, fp32; null for inference in bf16 (weights() are the copy).
  float* params() { return params_; }
  const float* params() const { return params_; }
  // The parameters as the operations read them, in the activation dtype (layout().total()).
  ConstActPtr weights() const { return weight_copy_ ? ConstActPtr(weight_copy_) : ConstActPtr(params_); }
  // The copy that AdamW refreshes, or null when the operations read params() itself.
  ActPtr weight_copy() { return weight_copy_; }
  float* grads() { return grads_; }                // (layout().total()) backend memory; null for inference
  const float* grads() const { return grads_; }
  const ParamLayout& layout() const { return layout_; }
  const ModelDims& dims() const { return layout_.dims(); }
  Backend& backend() { return backend_; }
  int max_batch() const { return max_batch_; }
  int last_batch() const { return last_B_; }       // B of the last forward

 private:
  // Where a block's output is normalised: the next block's ln1, or lnf after the last.
  struct NextNorm {
    ActPtr out;
    float* mean;
    float* rstd;
    ConstActPtr weight, bias;
  };
  // One block's tensors for `rows` positions. The forward's are its per-layer slices; a step's
  // are its rows, residual, residual2 and residual3 one row updated in place.
  struct BlockRows {
    ConstActPtr residual;   // (rows,C) the block's input
    ConstActPtr ln1;        // (rows,C) its layernorm, written before the block
    ActPtr qkv;             // (rows,3C)
    ActPtr atty;            // (rows,C) written by `attend`
    ActPtr residual2, ln2;  // (rows,C)
    float* ln2_mean;        // (rows)
    float* ln2_rstd;        // (rows)
    ActPtr fch, fch_gelu;   // (rows,4C)
    ActPtr proj_out;        // (rows,C) scratch
    ActPtr residual3;       // (rows,C) the block's output
    NextNorm next;
  };
  // A decoder step's rows (forward_step), max_batch of each, carved from one allocation of each
  // kind.
  struct StepRows {
    ActPtr x, ln, qkv, atty, proj_out, fch, fch_gelu, logits;  // (C) (C) (3C) (C) (C) (4C) (4C) (Vp) a row
    float* mean = nullptr;                                      // (max_batch)
    float* rstd = nullptr;                                      // (max_batch)
    std::int32_t* position = nullptr;                           // (1) the step's position, then
    std::int32_t* tokens = nullptr;                             // (max_batch) its tokens
    void* act_memory = nullptr;
    void* float_memory = nullptr;
  };
  struct RecordedLayer {
    int runs = 0;         // eager runs so far (the first is the warm-up)
    int recording = -1;   // the backend's recording, once made
  };

  void allocate_activations();
  // Where layer `layer` of a per-layer activation (all but qkv) starts, in layers: every layer
  // its own in training, one shared by all for inference.
  size_t kept_layer(int layer) const { return use_ == ModelUse::kTraining ? static_cast<size_t>(layer) : 0; }
  void allocate_step_rows();
  // std::invalid_argument naming `who` where B is outside [1, max_batch].
  void check_batch(int B, const char* who) const;
  // The embeddings and the blocks of forward() on B sequences of tokens (host, (B,T), checked):
  // everything up to lnf, recorded layer by layer where `recordable`.
  void forward_layers(const int32_t* tokens, int B, bool recordable);
  NextNorm norm_after(int layer) const;  // the layernorm of the forward's residual3[layer] (-1: encoded)
  // The block's work: the attention's q, k, v product, `attend` (qkv to atty), the projection,
  // the residual add fused into ln2, the MLP, the residual add fused into the next norm.
  void block_forward(int layer, int rows, const BlockRows& r, const std::function<void()>& attend);
  // Runs one layer's work of one pass (layer -1: the embeddings, L: the head): eagerly, or
  // recorded and replayed when `recordable` and replay is on.
  // `logits_only`: the head of a forward without targets (its own recording).
  void run_layer(Pass pass, int layer, bool recordable, bool logits_only, const std::function<void()>& work);
  // Runs `work` by r: the warm-up eagerly, then recorded, then replayed. `part` names it when a
  // recording fails ("forward of layer 3").
  void run_recorded(RecordedLayer& r, const std::function<std::string()>& part, const std::function<void()>& work);
  void key_recordings(float loss_scale);
  void drop_recordings() noexcept;

  Backend& backend_;
  ParamLayout layout_;
  int max_batch_;
  ModelUse use_;
  float* params_ = nullptr;
  ActPtr weight_copy_;      // (layout().total()) in bf16 precision only
  float* grads_ = nullptr;
  ActPtr act_memory_;
  float* float_memory_ = nullptr;
  int32_t* int_memory_ = nullptr;
  size_t att_saved_per_layer_ = 0;
  Activations acts_;
  int last_B_ = 0;
  bool backward_ready_ = false;
  size_t loss_positions_ = 0;       // positions summed into acts_.losses since the last take_loss
  std::vector<float> host_losses_;  // (max_batch*T) staging for take_loss
  LayerObserver layer_observer_;
  StepRows step_;
  std::vector<std::int32_t> step_upload_;  // (1 + B) host staging: a step's position, then its tokens
  std::uint64_t forwards_ = 0;
  Replay replay_ = Replay::kOff;
  std::vector<RecordedLayer> layers_;  // (2, L+2): forward then backward, by layer + 1
  RecordedLayer logits_head_;          // the head of a forward without targets
  std::vector<RecordedLayer> step_work_;  // forward_step, whole, by number of sequences - 1
  float recorded_scale_ = 0.0f;        // backward's loss scale in the recordings
};

}  // namespace xtrain
