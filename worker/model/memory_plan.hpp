// How much memory one rank of training holds, from the model's shape, the micro-batch, the world
// size and the precision alone. One formula with three users:
//   - GPT carves its activations by ActivationLayout, so the plan is what it allocates;
//   - the CUDA backend sizes its own buffers (cuBLASLt's workspace, the gradient norm's partials,
//     its scratch) by the functions of worker/model/cuda_buffers.hpp;
//   - plan_memory() adds everything up: for the worker's startup line, for check_memory_fit (run
//     before anything is allocated on the GPU), and for xlaunch --dry-run, which has neither BLAS
//     nor CUDA (worker/model/ links neither).
// A GPT built for inference or decoding (the eval and generate commands) has a plan of its own,
// plan_inference_memory, which fit_inference_batch holds against a GPU's free memory.
// tests/worker/model/test_memory_plan.cpp proves the plans equal to what GPT, AdamW and the trainer
// allocate, element by element, in both activation dtypes.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/job_spec.hpp"
#include "worker/model/act_ptr.hpp"
#include "worker/model/backend.hpp"
#include "worker/model/cuda_buffers.hpp"
#include "worker/model/param_layout.hpp"

namespace xtrain {

// Hands out consecutive tensors of one allocation, in elements, each starting on a 64-byte
// boundary (16-byte vector loads, cuBLASLt's alignment): take(n) returns the offset of the next n.
class Carver {
 public:
  explicit Carver(size_t element_bytes) : per_line_(64 / element_bytes) {}
  size_t take(size_t n) {
    const size_t at = total_;
    total_ += (n + per_line_ - 1) / per_line_ * per_line_;
    return at;
  }
  size_t total() const { return total_; }

 private:
  size_t per_line_;
  size_t total_ = 0;
};

// What a GPT is built for. Training keeps every layer's activations for backward, and backward's
// scratch. Inference (the eval command) runs forwards only: one layer's activations, reused by the
// next, except the attention's q, k and v of every layer, and no backward scratch, GPT's or the
// backend's. Decoding (the generate command) is inference whose forwards are a decoder's windows
// and steps (GPT::forward_window, forward_step): the q, k and v are its KV cache, and its logits
// are one row a sequence (the step's rows, allocated with the model), never all B x T positions',
// so it keeps no (B,T,Vp) logits, loss sums or targets.
enum class ModelUse { kTraining, kInference, kDecoding };

// Offsets, in elements, of every tensor GPT keeps for micro-batches of up to B sequences, within
// its three allocations: activations (in the backend's activation dtype), fp32 and int32. Every
// tensor starts on a 64-byte boundary. Per-layer tensors are stacked (ln1 is (L,B,T,C)); in
// inference all but qkv hold one layer (ln1 is (1,B,T,C)) and the backward scratch is empty.
struct ActivationLayout {
  // In the activation dtype: kept from forward for backward ...
  size_t encoded = 0, ln1 = 0, qkv = 0, atty = 0, residual2 = 0, ln2 = 0, fch = 0, fch_gelu = 0, residual3 = 0,
         lnf = 0, logits = 0;
  // ... and backward's scratch, shared by the layers.
  size_t proj_out = 0, dresidual = 0, dbtc = 0, dqkv = 0, dfch = 0;
  size_t acts = 0;  // elements in all
  // fp32: layernorm statistics, the attention's saved state and scratch, the loss sums.
  size_t ln1_mean = 0, ln1_rstd = 0, att_saved = 0, ln2_mean = 0, ln2_rstd = 0, lnf_mean = 0, lnf_rstd = 0,
         losses = 0, att_scratch = 0;
  size_t floats = 0;
  // int32: the micro-batch's tokens and targets.
  size_t tokens = 0, targets = 0;
  size_t ints = 0;

  static ActivationLayout of(const ModelDims& d, int B, DType act_dtype, size_t att_saved_per_layer,
                             size_t att_scratch_floats, ModelUse use = ModelUse::kTraining);
};

// A decoder step's rows (GPT::forward_step, and forward_window's head), `rows` of each, in three
// allocations carved as the activations are: in the activation dtype x, ln, qkv, atty, proj_out,
// fch, fch_gelu and the logits ((C) (C) (3C) (C) (C) (4C) (4C) (Vp) a row); fp32 the layernorm's
// mean and rstd; int32 the step's position, then its tokens (1 + rows).
struct StepRowsLayout {
  size_t x = 0, ln = 0, qkv = 0, atty = 0, proj_out = 0, fch = 0, fch_gelu = 0, logits = 0;
  size_t acts = 0;  // elements in all
  size_t mean = 0, rstd = 0;
  size_t floats = 0;
  size_t ints = 0;

  static StepRowsLayout of(const ModelDims& d, int rows, DType act_dtype);
};

// What a backend adds to the model's own tensors, and how it stores activations.
struct BackendMemory {
  std::string device;                             // "cuda" or "cpu"
  Precision precision = Precision::fp32;          // bf16: GPT keeps a bf16 copy of the weights
  DType act_dtype = DType::f32;                   // the CPU stores fp32 even in bf16
  size_t attention_saved_floats = 0;              // per layer, kept from forward to backward
  std::optional<size_t> attention_scratch_floats; // shared by the layers; unknown to xlaunch for CPU ranks
  size_t workspace_bytes = 0;                     // the backend's own buffers: the products' workspace,
  size_t partials_bytes = 0;                      // its reduction partials
  size_t scratch_bytes = 0;                       // and its private scratch for backward (training only)
};

// The CUDA backend's figures for micro-batches of B sequences (its own queries return these);
// deterministic is train.deterministic (false in bf16: the attention's fp32 dQ sum, B x T x C).
BackendMemory cuda_backend_memory(const ModelDims& d, int B, Precision precision, bool deterministic);
// The CPU backend's, except its attention scratch (per head, O(T x head size)), which only the
// backend object knows: left unknown (xlaunch's plan for CPU ranks says so).
BackendMemory cpu_backend_memory(const ModelDims& d, int B, Precision precision);

// A backend object's figures, from its own queries (its attention sizes, its own buffers once
// reserve_scratch(B*T, 4C) has run): the CPU's exactly, the CUDA backend's equal to
// cuda_backend_memory() where CUB's sort fits the plan's allowance (a [gpu] test checks it).
BackendMemory backend_memory(const Backend& backend, const ModelDims& d, int B);

struct MemoryItem {
  std::string name;    // "parameters", "activations", ...
  size_t bytes = 0;
  std::string detail;  // dtype and breakdown, for people
};

struct MemoryPlan {
  std::string device;
  DType act_dtype = DType::f32;
  std::vector<MemoryItem> items;   // held from the start of training to its end
  bool complete = true;            // false: the CPU attention's scratch is not counted
  // Elements allocated through the Backend interface, by kind (what the tests compare), and the
  // backend's own buffers in bytes.
  size_t floats = 0, acts = 0, ints = 0;
  size_t backend_bytes = 0;

  size_t total_bytes() const;      // the sum of the items

  // A short block for the log, with units.
  std::string summary() const;
  // {"device", "activation_dtype", "total_bytes", "total_gib", "complete",
  //  "items": [{"name", "bytes", "mib", "detail"}]}
  nlohmann::json to_json() const;
};

// The trainer's per-step scalars in backend memory: [loss, stop flag, each rank's busy time],
// all-reduced, then the gradients' sum of squares (a double's bytes) beside them.
inline size_t averaged_step_scalars(int world_size) { return 2 + static_cast<size_t>(world_size); }
inline size_t step_scalar_floats(int world_size) {
  return averaged_step_scalars(world_size) + sizeof(double) / sizeof(float);
}

// The plan of one rank training `model` with micro-batches of `micro_batch` sequences among
// `world_size` ranks, on a backend of these figures.
MemoryPlan plan_memory(const ModelSpec& model, int micro_batch, int world_size, const BackendMemory& backend);

// The plan of a GPT built for inference (ModelUse::kInference: the eval command) or decoding
// (kDecoding: generate; kTraining is std::invalid_argument) on `batch` sequences: the weights (in
// bf16 the operations' copy only: nothing updates them, so no fp32 master), the KV cache, one layer's activations, the logits (for `use` kDecoding the step's
// rows instead), the tokens and the backend's buffers but its scratch (backward's). A decoder's
// step on a model built for kInference adds its rows (batch x (15 C + Vp) activations) at the
// first step, within the fit's headroom.
MemoryPlan plan_inference_memory(const ModelSpec& model, int batch, const BackendMemory& backend,
                                 ModelUse use = ModelUse::kInference);

// Device memory the fit check keeps free beyond the plan: cudaMalloc's rounding to 2 MiB pages,
// cuBLASLt's and CUB's small internal buffers and the graphs' upload (256 MiB); and with several
// ranks, NCCL's channel buffers (1 GiB more).
size_t memory_headroom_bytes(int world_size);

// The GPU the fit is checked against: its memory as CUDA reports it (the plugin's device_info).
struct GpuMemory {
  std::string name;        // "GPU 0 (NVIDIA H200)"
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// Throws SpecError naming train.micro_batch_size (and model.*) when the plan of `model` at
// `micro_batch` sequences, plus the headroom, exceeds the GPU's free memory: one line with the
// plan's numbers, the GPU's free and total memory, and the largest micro-batch that would fit.
void check_memory_fit(const ModelSpec& model, int micro_batch, int world_size, Precision precision,
                      bool deterministic, const GpuMemory& gpu);

// CPU ranks: `local_ranks` of them on this machine, each holding the plan of `micro_batch`
// sequences, within the `usable_bytes` the machine (or its cgroup: common/usable_memory.hpp)
// allows; SpecError on train.micro_batch_size otherwise, as check_memory_fit's. The CPU plan
// leaves out the attention's per-head scratch and OpenBLAS's buffers, so a job refused here
// would not have fitted; one that passes may still come close.
void check_host_memory_fit(const ModelSpec& model, int micro_batch, int world_size, int local_ranks,
                           Precision precision, size_t usable_bytes);

// For a command that runs a model forward only (eval, generate) on a GPU: the most sequences, up
// to `batch`, whose plan (plan_inference_memory for `use`) plus one process's headroom fits the
// GPU's free memory. BadInput (common/bad_input.hpp) naming --device when fewer than `needed` fit:
// one line with the plan's numbers, the GPU's memory and what to change.
int fit_inference_batch(const ModelSpec& model, int batch, int needed, Precision precision, bool deterministic,
                        const GpuMemory& gpu, ModelUse use = ModelUse::kInference);

// A CPU refusal's words, around what the model needs: "the memory this process may use (the
// machine's, or its cgroup's limit) is 23.54 GiB, and " and ": run it on a GPU (--device cuda) or
// a machine with more memory".
std::string host_memory_words(size_t usable_bytes);
inline constexpr const char* kHostMemoryAdvice = ": run it on a GPU (--device cuda) or a machine with more memory";

// The same on the CPU, within the `usable_bytes` this process may use (common/usable_memory.hpp):
// the plan on the CPU backend (the weights are read into the backend's memory, in place in fp32,
// a piece at a time into bf16's copy). BadInput naming --device when fewer than `needed` fit.
int fit_host_inference_batch(const ModelSpec& model, int batch, int needed, Precision precision,
                             size_t usable_bytes, ModelUse use = ModelUse::kInference);


}  // namespace xtrain
