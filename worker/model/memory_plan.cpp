#include "worker/model/memory_plan.hpp"

#include <cstdio>
#include <functional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/bad_input.hpp"
#include "common/number_format.hpp"

namespace xtrain {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string format_count(double n) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2fM", n / 1e6);
  return text;
}

// A plan's fields that come from the backend alone. The backend's scratch serves backward: a GPT
// built for inference never reserves it.
MemoryPlan plan_on(const BackendMemory& backend, ModelUse use) {
  MemoryPlan p;
  p.device = backend.device;
  p.act_dtype = backend.act_dtype;
  p.complete = backend.attention_scratch_floats.has_value();
  p.backend_bytes = backend.workspace_bytes + backend.partials_bytes +
                    (use == ModelUse::kTraining ? backend.scratch_bytes : 0);
  return p;
}

// "parameters 474.8 MiB, gradients 474.8 MiB, ...": the items of a plan, for one line.
std::string item_list(const MemoryPlan& plan) {
  std::string parts;
  for (const MemoryItem& item : plan.items) {
    parts += (parts.empty() ? "" : ", ") + item.name + " " + format_bytes(item.bytes);
  }
  return parts;
}

// "the model (12 x 768, vocabulary 50257) in bf16"
std::string model_words(const ModelDims& d, Precision precision) {
  return "the model (" + std::to_string(d.L) + " x " + std::to_string(d.C) + ", vocabulary " + std::to_string(d.V) +
         ") in " + precision_name(precision);
}

// How the bf16 weights' copy is stored: bf16, or fp32 on the CPU, which emulates bf16's rounding.
std::string bf16_copy_words(DType act_dtype) {
  return act_dtype == DType::bf16 ? "bf16" : "fp32 holding bf16 values (the CPU's emulation)";
}

std::string sequences(int n) { return std::to_string(n) + " sequence" + (n == 1 ? "" : "s"); }

// The backend's own buffers (plan_on counted them), the plan's last item.
void add_backend_buffers(MemoryPlan& p, const BackendMemory& backend, ModelUse use) {
  if (p.backend_bytes == 0) return;
  p.items.push_back({"backend buffers", p.backend_bytes,
                     "products' workspace " + format_bytes(backend.workspace_bytes) + ", reduction partials " +
                         format_bytes(backend.partials_bytes) +
                         (use == ModelUse::kTraining ? ", scratch " + format_bytes(backend.scratch_bytes) : "")});
}

}  // namespace

ActivationLayout ActivationLayout::of(const ModelDims& d, int B, DType act_dtype, size_t att_saved_per_layer,
                                      size_t att_scratch_floats, ModelUse use) {
  const size_t L = d.L, C = d.C, Vp = d.Vp;
  const size_t BT = static_cast<size_t>(B) * d.T;
  const bool training = use == ModelUse::kTraining;
  const size_t kept = training ? L : 1;       // layers of each activation but qkv
  const size_t backward = training ? BT : 0;  // rows of backward's scratch
  const size_t scored = use == ModelUse::kDecoding ? 0 : BT;  // rows of logits, losses and targets
  ActivationLayout a;
  Carver acts(dtype_bytes(act_dtype));
  a.encoded = acts.take(BT * C);
  a.ln1 = acts.take(kept * BT * C);
  a.qkv = acts.take(L * BT * 3 * C);
  a.atty = acts.take(kept * BT * C);
  a.residual2 = acts.take(kept * BT * C);
  a.ln2 = acts.take(kept * BT * C);
  a.fch = acts.take(kept * BT * 4 * C);
  a.fch_gelu = acts.take(kept * BT * 4 * C);
  a.residual3 = acts.take(kept * BT * C);
  a.lnf = acts.take(BT * C);
  a.logits = acts.take(scored * Vp);
  a.proj_out = acts.take(BT * C);
  a.dresidual = acts.take(backward * C);
  a.dbtc = acts.take(backward * C);
  a.dqkv = acts.take(backward * 3 * C);
  a.dfch = acts.take(backward * 4 * C);
  a.acts = acts.total();
  Carver floats(sizeof(float));
  a.ln1_mean = floats.take(kept * BT);
  a.ln1_rstd = floats.take(kept * BT);
  a.att_saved = floats.take(kept * att_saved_per_layer);
  a.ln2_mean = floats.take(kept * BT);
  a.ln2_rstd = floats.take(kept * BT);
  a.lnf_mean = floats.take(BT);
  a.lnf_rstd = floats.take(BT);
  a.losses = floats.take(scored);
  a.att_scratch = floats.take(att_scratch_floats);
  a.floats = floats.total();
  Carver ints(sizeof(int32_t));
  a.tokens = ints.take(BT);
  a.targets = ints.take(scored);
  a.ints = ints.total();
  return a;
}

StepRowsLayout StepRowsLayout::of(const ModelDims& d, int rows, DType act_dtype) {
  const size_t n = static_cast<size_t>(rows), C = d.C, Vp = d.Vp;
  StepRowsLayout s;
  Carver acts(dtype_bytes(act_dtype));
  s.x = acts.take(n * C);
  s.ln = acts.take(n * C);
  s.qkv = acts.take(n * 3 * C);
  s.atty = acts.take(n * C);
  s.proj_out = acts.take(n * C);
  s.fch = acts.take(n * 4 * C);
  s.fch_gelu = acts.take(n * 4 * C);
  s.logits = acts.take(n * Vp);
  s.acts = acts.total();
  Carver floats(sizeof(float));
  s.mean = floats.take(n);
  s.rstd = floats.take(n);
  s.floats = floats.total();
  s.ints = 1 + n;
  return s;
}

BackendMemory cuda_backend_memory(const ModelDims& d, int B, Precision precision, bool deterministic) {
  BackendMemory m;
  m.device = "cuda";
  m.precision = precision;
  m.act_dtype = precision == Precision::bf16 ? DType::bf16 : DType::f32;
  m.attention_saved_floats = cuda_buffers::attention_row_floats(B, d.T, d.NH);
  m.attention_scratch_floats = cuda_buffers::attention_scratch_floats(
      B, d.T, d.C, d.NH, cuda_buffers::attention_dq_by_atomics(precision, deterministic));
  m.workspace_bytes = cuda_buffers::kGemmWorkspaceBytes;
  const int rows = B * d.T;
  m.partials_bytes = cuda_buffers::kSumSquaresPartialsBytes;
  m.scratch_bytes = cuda_buffers::scratch_bytes(rows, 4 * d.C, cuda_buffers::embedding_sort_allowance_bytes(rows));
  return m;
}

BackendMemory cpu_backend_memory(const ModelDims& d, int B, Precision precision) {
  BackendMemory m;
  m.device = "cpu";
  m.precision = precision;
  m.act_dtype = DType::f32;
  m.attention_saved_floats = static_cast<size_t>(B) * d.NH * d.T;  // the logsumexp of each row
  return m;
}

BackendMemory backend_memory(const Backend& backend, const ModelDims& d, int B) {
  BackendMemory m;
  m.device = backend.name();
  m.precision = backend.precision();
  m.act_dtype = backend.act_dtype();
  m.attention_saved_floats = backend.attention_saved_floats(B, d.T, d.C, d.NH);
  m.attention_scratch_floats = backend.attention_scratch_floats(B, d.T, d.C, d.NH);
  const Backend::OwnMemory own = backend.own_memory(B * d.T, 4 * d.C);
  m.workspace_bytes = own.workspace_bytes;
  m.partials_bytes = own.partials_bytes;
  m.scratch_bytes = own.scratch_bytes;
  return m;
}

// ---- the plan -----------------------------------------------------------------------------------

size_t MemoryPlan::total_bytes() const {
  size_t sum = 0;
  for (const MemoryItem& item : items) sum += item.bytes;
  return sum;
}

MemoryPlan plan_memory(const ModelSpec& model, int micro_batch, int world_size, const BackendMemory& backend) {
  const ModelDims d = ModelDims::from(model);
  const size_t P = ParamLayout(d).total();
  const ActivationLayout a = ActivationLayout::of(d, micro_batch, backend.act_dtype, backend.attention_saved_floats,
                                                  backend.attention_scratch_floats.value_or(0));
  const size_t ab = dtype_bytes(backend.act_dtype);
  const char* act = dtype_name(backend.act_dtype);
  const bool weight_copy = backend.precision == Precision::bf16;
  const size_t scalars = step_scalar_floats(world_size);

  MemoryPlan p = plan_on(backend, ModelUse::kTraining);
  p.floats = 4 * P + a.floats + scalars;
  p.acts = (weight_copy ? P : 0) + a.acts;
  p.ints = a.ints;

  // Activations kept for backward: encoded .. lnf in the activation dtype, then the fp32
  // statistics and the attention's saved rows (ln1_mean .. lnf_rstd).
  const size_t kept = a.logits * ab + a.losses * sizeof(float);
  const size_t per_layer = ((a.lnf - a.ln1) * ab + (a.lnf_mean - a.ln1_mean) * sizeof(float)) / d.L;
  const size_t logits = (a.proj_out - a.logits) * ab + (a.att_scratch - a.losses) * sizeof(float);
  const size_t backward = (a.acts - a.proj_out) * ab + (a.floats - a.att_scratch) * sizeof(float);
  p.items.push_back({"parameters", P * sizeof(float), "fp32 master weights, " + format_count(P) + " with padding"});
  if (weight_copy) {
    p.items.push_back({"weights' copy", P * ab, bf16_copy_words(backend.act_dtype) + ", read by every operation"});
  }
  p.items.push_back({"gradients", P * sizeof(float), "fp32"});
  p.items.push_back({"AdamW moments", 2 * P * sizeof(float), "fp32 m and v"});
  p.items.push_back({"activations", kept,
                     std::to_string(d.L) + " layers x " + format_bytes(per_layer) + ", " + act +
                         "; layernorm statistics and attention logsumexp fp32"});
  p.items.push_back({"logits", logits, std::string(act) + " (B*T, Vp), overwritten by their gradient; fp32 loss sums"});
  p.items.push_back({"backward scratch", backward,
                     std::string("one layer's activation gradients, shared by the layers, ") + act +
                         (p.complete ? "; attention scratch fp32" : "; the CPU attention's scratch not counted")});
  p.items.push_back({"tokens and step scalars", a.ints * sizeof(int32_t) + scalars * sizeof(float), "int32, fp32"});
  add_backend_buffers(p, backend, ModelUse::kTraining);
  return p;
}

MemoryPlan plan_inference_memory(const ModelSpec& model, int batch, const BackendMemory& backend, ModelUse use) {
  if (use == ModelUse::kTraining) throw std::invalid_argument("plan_inference_memory: a training model (plan_memory)");
  const ModelDims d = ModelDims::from(model);
  const size_t P = ParamLayout(d).total();
  const ActivationLayout a = ActivationLayout::of(d, batch, backend.act_dtype, backend.attention_saved_floats,
                                                  backend.attention_scratch_floats.value_or(0), use);
  const bool decoding = use == ModelUse::kDecoding;
  const StepRowsLayout step = decoding ? StepRowsLayout::of(d, batch, backend.act_dtype) : StepRowsLayout{};
  const size_t ab = dtype_bytes(backend.act_dtype);
  const char* act = dtype_name(backend.act_dtype);
  const bool master = backend.precision != Precision::bf16;

  MemoryPlan p = plan_on(backend, use);
  p.floats = (master ? P : 0) + a.floats + step.floats;
  p.acts = (master ? 0 : P) + a.acts + step.acts;
  p.ints = a.ints + step.ints;

  const size_t cache = a.atty - a.qkv;
  const size_t layer = (a.logits - a.encoded - cache + a.acts - a.proj_out) * ab +
                       (a.losses - a.ln1_mean + a.floats - a.att_scratch) * sizeof(float);
  const size_t logits = (a.proj_out - a.logits) * ab + (a.att_scratch - a.losses) * sizeof(float);
  p.items.push_back({"weights", P * (master ? sizeof(float) : ab),
                     format_count(P) + " with padding, " +
                         (master ? std::string("fp32") : bf16_copy_words(backend.act_dtype) + ", no fp32 master")});
  p.items.push_back({"KV cache", cache * ab, std::to_string(d.L) + " layers' q, k and v, " + act});
  p.items.push_back({"activations", layer,
                     std::string("one layer's, reused by the next, ") + act +
                         "; layernorm statistics and attention state fp32" +
                         (p.complete ? "" : "; the CPU attention's scratch not counted")});
  if (decoding) {
    p.items.push_back({"decoder rows", step.acts * ab + step.floats * sizeof(float),
                       std::string("a step's activations and logits (B, 15 C + Vp), ") + act + "; its position"});
    p.items.push_back({"tokens", (a.ints + step.ints) * sizeof(int32_t), "int32 windows' and a step's tokens"});
  } else {
    p.items.push_back({"logits", logits, std::string(act) + " (B*T, Vp); fp32 loss sums"});
    p.items.push_back({"tokens", a.ints * sizeof(int32_t), "int32 tokens and targets"});
  }
  add_backend_buffers(p, backend, use);
  return p;
}

std::string MemoryPlan::summary() const {
  std::string s = "memory plan (" + device + ", " + dtype_name(act_dtype) + " activations): " +
                  format_bytes(total_bytes());
  if (!complete) s += " (the CPU attention's per-head scratch not counted)";
  for (const MemoryItem& item : items) {
    s += "\n  " + item.name + ": " + format_bytes(item.bytes) + " (" + item.detail + ")";
  }
  return s;
}

nlohmann::json MemoryPlan::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const MemoryItem& item : items) {
    list.push_back({{"name", item.name}, {"bytes", item.bytes}, {"mib", item.bytes / kMiB}, {"detail", item.detail}});
  }
  return {{"device", device},
          {"activation_dtype", dtype_name(act_dtype)},
          {"total_bytes", total_bytes()},
          {"total_gib", total_bytes() / (kMiB * 1024.0)},
          {"complete", complete},
          {"items", list}};
}

size_t memory_headroom_bytes(int world_size) {
  return (size_t{256} << 20) + (world_size > 1 ? size_t{1} << 30 : 0);
}

namespace {

// The refusal of `plan`, a micro-batch's that does not fit: `where` (what it does not fit),
// `needs` (what a plan asks), `has` (what there is), and the largest micro-batch that would fit,
// or what else to change.
[[noreturn]] void refuse_micro_batch(const ModelSpec& model, int micro_batch, const MemoryPlan& plan,
                                     Precision precision, const std::function<MemoryPlan(int)>& plan_at,
                                     const std::function<bool(const MemoryPlan&)>& fits, const std::string& where,
                                     const std::function<std::string(const MemoryPlan&)>& needs,
                                     const std::string& has) {
  const ModelDims d = ModelDims::from(model);
  std::string advice;
  for (int B = micro_batch - 1; B >= 1; --B) {
    const MemoryPlan smaller = plan_at(B);
    if (fits(smaller)) {
      advice = "; " + sequences(B) + " would fit (" + needs(smaller) +
               "), or make the model smaller (model.n_layer, n_embd, seq_len, vocab_size)";
      break;
    }
  }
  if (advice.empty()) {
    advice = "; not even 1 sequence fits: make the model smaller (model.n_layer, n_embd, seq_len, vocab_size)" +
             std::string(precision == Precision::bf16 ? "" : " or train in bf16 (train.precision)");
  }
  const std::string parts = item_list(plan);
  throw SpecError("train.micro_batch_size", sequences(micro_batch) + " of " + std::to_string(d.T) +
                                                " tokens per micro-step do not fit " + where + ": " +
                                                model_words(d, precision) + " needs " + needs(plan) + " (" + parts +
                                                "), and " + has + advice);
}

}  // namespace

void check_memory_fit(const ModelSpec& model, int micro_batch, int world_size, Precision precision,
                      bool deterministic, const GpuMemory& gpu) {
  const ModelDims d = ModelDims::from(model);
  const size_t headroom = memory_headroom_bytes(world_size);
  auto plan_at = [&](int B) {
    return plan_memory(model, B, world_size, cuda_backend_memory(d, B, precision, deterministic));
  };
  auto fits = [&](const MemoryPlan& p) { return p.total_bytes() + headroom <= gpu.free_bytes; };
  const MemoryPlan plan = plan_at(micro_batch);
  if (fits(plan)) return;
  refuse_micro_batch(
      model, micro_batch, plan, precision, plan_at, fits, gpu.name,
      [&](const MemoryPlan& p) { return format_bytes(p.total_bytes()) + " + " + format_bytes(headroom) + " headroom"; },
      "the GPU has " + format_bytes(gpu.free_bytes) + " free of " + format_bytes(gpu.total_bytes));
}

void check_host_memory_fit(const ModelSpec& model, int micro_batch, int world_size, int local_ranks,
                           Precision precision, size_t usable_bytes) {
  const ModelDims d = ModelDims::from(model);
  auto plan_at = [&](int B) { return plan_memory(model, B, world_size, cpu_backend_memory(d, B, precision)); };
  const auto ranks = static_cast<size_t>(local_ranks);
  auto fits = [&](const MemoryPlan& p) { return p.total_bytes() * ranks <= usable_bytes; };
  const MemoryPlan plan = plan_at(micro_batch);
  if (fits(plan)) return;
  refuse_micro_batch(
      model, micro_batch, plan, precision, plan_at, fits, "this machine's memory",
      [&](const MemoryPlan& p) {
        return local_ranks == 1 ? format_bytes(p.total_bytes())
                                : std::to_string(local_ranks) + " CPU ranks x " + format_bytes(p.total_bytes());
      },
      "the processes here may use " + format_bytes(usable_bytes));
}

int fit_inference_batch(const ModelSpec& model, int batch, int needed, Precision precision, bool deterministic,
                        const GpuMemory& gpu, ModelUse use) {
  const ModelDims d = ModelDims::from(model);
  const size_t headroom = memory_headroom_bytes(1);
  auto plan_at = [&](int B) {
    return plan_inference_memory(model, B, cuda_backend_memory(d, B, precision, deterministic), use);
  };
  for (int B = batch; B >= needed; --B) {
    if (plan_at(B).total_bytes() + headroom <= gpu.free_bytes) return B;
  }
  const MemoryPlan plan = plan_at(needed);
  throw BadInput("--device: " + gpu.name + " has " + format_bytes(gpu.free_bytes) + " free of " +
                 format_bytes(gpu.total_bytes) + ", and " + model_words(d, precision) + " needs " +
                 format_bytes(plan.total_bytes()) + " for " + sequences(needed) + " of " + std::to_string(d.T) +
                 " tokens at once (" + item_list(plan) + ") + " + format_bytes(headroom) +
                 " headroom: run it on the CPU (--device cpu)" +
                 (precision == Precision::bf16 ? std::string() : std::string(" or in bf16 (--precision bf16)")));
}

int fit_host_inference_batch(const ModelSpec& model, int batch, int needed, Precision precision,
                             size_t usable_bytes, ModelUse use) {
  const ModelDims d = ModelDims::from(model);
  auto plan_at = [&](int B) { return plan_inference_memory(model, B, cpu_backend_memory(d, B, precision), use); };
  for (int B = batch; B >= needed; --B) {
    if (plan_at(B).total_bytes() <= usable_bytes) return B;
  }
  const MemoryPlan plan = plan_at(needed);
  throw BadInput("--device: " + host_memory_words(usable_bytes) + model_words(d, precision) + " needs " +
                 format_bytes(plan.total_bytes()) + " for " + sequences(needed) + " of " + std::to_string(d.T) +
                 " tokens at once on the CPU (" + item_list(plan) + ")" + kHostMemoryAdvice);
}

std::string host_memory_words(size_t usable_bytes) {
  return "the memory this process may use (the machine's, or its cgroup's limit) is " + format_bytes(usable_bytes) +
         ", and ";
}

}  // namespace xtrain
