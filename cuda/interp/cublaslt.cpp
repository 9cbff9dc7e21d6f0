// Interpret mode: cuBLASLt's descriptors, heuristic and cublasLtMatmul, emulated on the CPU. A call
// is checked at once, as the real library checks it or as a GPU would fault on it, and refused
// with the real status (the reason goes to last_cublas_detail()); the product itself is work on
// the stream (cublaslt_product.cpp). Where NVIDIA's documentation does not say which status a
// refusal gets, the comment at the check says so and which one was chosen.
#include <algorithm>
#include <cstring>
#include <string>

#include "cuda/interp/cublaslt_product.hpp"
#include "cuda/interp/cublaslt_state.hpp"
#include "cuda/interp/device_memory.hpp"
#include "cuda/interp/stream_work.hpp"

namespace xtrain::interp {
namespace {

// What the emulation keeps in an algo's 64 bytes: a tag (a zeroed or foreign algo is refused),
// the alignments and workspace it was chosen for (bias and aux as the heuristic saw their
// pointers), and the types it computes.
struct AlgoRecord {
  static constexpr uint64_t kTag = 0x584c54616c676f31ull;  // "XLTalgo1"
  uint32_t align[4] = {};  // A, B, C, D bytes
  uint32_t bias_align = 0;
  uint32_t aux_align = 0;
  uint64_t workspace = 0;
  uint32_t compute = 0, ab_type = 0, cd_type = 0;

  cublasLtMatmulAlgo_t pack() const {
    cublasLtMatmulAlgo_t a{};
    a.data[0] = kTag;
    a.data[1] = align[0] | uint64_t{align[1]} << 32;
    a.data[2] = align[2] | uint64_t{align[3]} << 32;
    a.data[3] = bias_align | uint64_t{aux_align} << 32;
    a.data[4] = workspace;
    a.data[5] = compute | uint64_t{ab_type} << 16 | uint64_t{cd_type} << 32;
    return a;
  }
  static bool unpack(const cublasLtMatmulAlgo_t& a, AlgoRecord& r) {
    if (a.data[0] != kTag) return false;
    r.align[0] = static_cast<uint32_t>(a.data[1]);
    r.align[1] = static_cast<uint32_t>(a.data[1] >> 32);
    r.align[2] = static_cast<uint32_t>(a.data[2]);
    r.align[3] = static_cast<uint32_t>(a.data[2] >> 32);
    r.bias_align = static_cast<uint32_t>(a.data[3]);
    r.aux_align = static_cast<uint32_t>(a.data[3] >> 32);
    r.workspace = a.data[4];
    r.compute = static_cast<uint32_t>(a.data[5] & 0xFFFF);
    r.ab_type = static_cast<uint32_t>((a.data[5] >> 16) & 0xFFFF);
    r.cd_type = static_cast<uint32_t>(a.data[5] >> 32);
    return true;
  }
};

size_t element_bytes(uint32_t type) { return type == CUDA_R_16BF ? 2 : 4; }

bool is_fp32_or_bf16(uint32_t type) { return type == CUDA_R_32F || type == CUDA_R_16BF; }

// The epilogues the emulation runs: a bias, the GELU forward that keeps its input (aux), the GELU
// gradient that reads it back, and the bias gradient of B (written through the bias pointer).
bool has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool has_bgrad(uint32_t e) { return e == CUBLASLT_EPILOGUE_BGRADB; }
bool has_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

std::string epilogue_name(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
    case CUBLASLT_EPILOGUE_RELU: return "RELU";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "RELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU: return "GELU";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
    case CUBLASLT_EPILOGUE_RELU_AUX: return "RELU_AUX";
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return "RELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DRELU: return "DRELU";
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return "DRELU_BGRAD";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADA: return "BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
  }
  return std::to_string(e);
}

std::string layout_text(const char* name, const cublasLtMatrixLayoutOpaque_t& l) {
  return std::string(name) + " (" + std::to_string(l.rows) + " x " + std::to_string(l.cols) + ", ld " +
         std::to_string(l.ld) + ", batch " + std::to_string(l.batch) + ", stride " + std::to_string(l.stride) +
         ", type " + std::to_string(l.type) + ")";
}

// Everything about the problem that needs no pointer: the heuristic and cublasLtMatmul check the
// same things. Fills `p`'s shape, types and transposes.
cublasStatus_t check_problem(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t* L[4],
                             lt::Product& p) {
  static const char* const kNames[4] = {"A", "B", "C", "D"};
  if (d.scale != CUDA_R_32F) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "scale type must be CUDA_R_32F");
  if (d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_FAST_TF32) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "compute type " + std::to_string(d.compute) +
                                                   ": only CUBLAS_COMPUTE_32F and _32F_FAST_TF32 are emulated");
  }
  for (int32_t op : {d.transa, d.transb}) {
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) {
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "operation " + std::to_string(op) + ": only N and T are emulated");
    }
  }
  const uint32_t ab = L[0]->type, cd = L[3]->type;
  // cuBLASLt's table for CUBLAS_COMPUTE_32F with fp32 scale: fp32 x fp32 -> fp32, bf16 x bf16 ->
  // bf16 or fp32; FAST_TF32 takes fp32 only. fp32 inputs with a bf16 output are not in the table.
  const bool types_ok = ab == L[1]->type && cd == L[2]->type && is_fp32_or_bf16(ab) && is_fp32_or_bf16(cd) &&
                        (ab == CUDA_R_16BF || cd == CUDA_R_32F) &&
                        (d.compute != CUBLAS_COMPUTE_32F_FAST_TF32 || ab == CUDA_R_32F);
  if (!types_ok) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "types A " + std::to_string(ab) + ", B " + std::to_string(L[1]->type) +
                                                   ", C " + std::to_string(L[2]->type) + ", D " + std::to_string(cd) +
                                                   " with compute " + std::to_string(d.compute) + " are unsupported");
  }
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && !has_bias(d.epilogue) && !has_aux(d.epilogue) &&
      !has_bgrad(d.epilogue)) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue CUBLASLT_EPILOGUE_" + epilogue_name(d.epilogue) +
                                                   " is not emulated: only DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS, "
                                                   "DGELU and BGRADB are");
  }
  // The bias, and the bias gradient, have D's type (the documented rule outside int8 and fp8 kernels).
  if ((has_bias(d.epilogue) || has_bgrad(d.epilogue)) && d.bias_type != -1 &&
      static_cast<uint32_t>(d.bias_type) != cd) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "bias data type " + std::to_string(d.bias_type) +
                                                   " differs from D's type " + std::to_string(cd));
  }
  for (int i = 0; i < 4; ++i) {
    const auto& l = *L[i];
    // The emulation hands sizes to sgemm as int; the real library also takes int32 sizes only.
    const bool fits = l.rows <= INT32_MAX && l.cols <= INT32_MAX && l.ld <= INT32_MAX;
    if (!fits || l.ld < static_cast<int64_t>(l.rows > 1 ? l.rows : 1) || l.batch < 1 || l.stride < 0) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, layout_text(kNames[i], l) +
                                                     ": needs rows <= ld < 2^31, batch >= 1, stride >= 0");
    }
  }
  p.transA = d.transa == CUBLAS_OP_T;
  p.transB = d.transb == CUBLAS_OP_T;
  p.m = static_cast<int64_t>(p.transA ? L[0]->cols : L[0]->rows);
  p.k = static_cast<int64_t>(p.transA ? L[0]->rows : L[0]->cols);
  const auto kb = static_cast<int64_t>(p.transB ? L[1]->cols : L[1]->rows);
  p.n = static_cast<int64_t>(p.transB ? L[1]->rows : L[1]->cols);
  const bool shapes_ok = kb == p.k && static_cast<int64_t>(L[2]->rows) == p.m &&
                         static_cast<int64_t>(L[2]->cols) == p.n && L[3]->rows == L[2]->rows &&
                         L[3]->cols == L[2]->cols;
  if (!shapes_ok) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "shapes disagree: op(A) is " + std::to_string(p.m) + " x " +
                                                   std::to_string(p.k) + ", op(B) " + std::to_string(kb) + " x " +
                                                   std::to_string(p.n) + ", " + layout_text("C", *L[2]) + ", " +
                                                   layout_text("D", *L[3]));
  }
  // The emulation's reading of the documentation: every layout states the same batch count.
  for (int i = 1; i < 4; ++i) {
    if (L[i]->batch != L[0]->batch) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ: " + layout_text("A", *L[0]) + ", " +
                                                     layout_text(kNames[i], *L[i]));
    }
  }
  p.batch = L[0]->batch;
  p.tf32 = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (has_aux(d.epilogue)) {
    // The GELU input has D's type outside fp8 kernels; another type, the header says, is
    // CUBLAS_STATUS_INVALID_VALUE.
    if (d.aux_type != -1 && static_cast<uint32_t>(d.aux_type) != cd) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "aux data type " + std::to_string(d.aux_type) +
                                                     " differs from D's type " + std::to_string(cd));
    }
    // Documented: the GELU input's leading dimension is a multiple of 8, at least D's rows. The
    // header names no status; INVALID_VALUE is used.
    if (d.aux_ld % 8 != 0 || d.aux_ld < p.m) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD " + std::to_string(d.aux_ld) +
                                                     " must be a multiple of 8 and at least D's " +
                                                     std::to_string(p.m) + " rows");
    }
    if (p.batch != 1) {
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue CUBLASLT_EPILOGUE_" + epilogue_name(d.epilogue) +
                                                     " on a batch: AUX_BATCH_STRIDE is not emulated");
    }
    p.epilogue = d.epilogue == CUBLASLT_EPILOGUE_DGELU ? lt::Epilogue::kDGelu : lt::Epilogue::kGeluAux;
    p.aux_ld = d.aux_ld;
  }
  // NVIDIA documents BGRADB's reduction over k of B, not whether it sees B rounded to TF32, nor
  // (cublasLtMatmul checks) whether alpha scales it: the emulation refuses those rather than guess.
  if (has_bgrad(d.epilogue) && (p.batch != 1 || p.tf32)) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "epilogue CUBLASLT_EPILOGUE_BGRADB is emulated for batch 1 without FAST_TF32 only");
  }
  lt::Layout* out[4] = {&p.A, &p.B, &p.C, &p.D};
  for (int i = 0; i < 4; ++i) {
    *out[i] = lt::Layout{static_cast<cudaDataType_t>(L[i]->type), static_cast<int64_t>(L[i]->rows),
                         static_cast<int64_t>(L[i]->cols), L[i]->ld, L[i]->stride};
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The largest power of two up to 256 that divides every batch matrix's address.
uint32_t alignment_of(const void* p, int64_t stride_bytes) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256u | static_cast<uint64_t>(stride_bytes);
  return static_cast<uint32_t>(bits & (~bits + 1));
}

// An operand must lie in device memory over its whole extent (every batch), and be as aligned as
// the algorithm assumed: a GPU faults on the first (cudaErrorIllegalAddress, later, on the
// stream) and may on the second; refusing at the call names the operand instead. NVIDIA does not
// document a status for either; CUBLAS_STATUS_INVALID_VALUE is used.
cublasStatus_t check_operand(const char* name, const void* ptr, const lt::Layout& l, int batch, uint32_t min_align) {
  const int64_t elems = l.rows == 0 || l.cols == 0 ? 0 : (batch - 1) * l.stride + (l.cols - 1) * l.ld + l.rows;
  const size_t bytes = static_cast<size_t>(elems) * element_bytes(l.type);
  const std::string where = std::string(name) + " at " + std::to_string(reinterpret_cast<uintptr_t>(ptr));
  if (ptr == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(name) + " is NULL");
  if (bytes > 0 && !is_device_range(ptr, bytes)) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, where + ": its " + std::to_string(bytes) +
                                                   " bytes over the batch are not inside one device allocation");
  }
  const int64_t stride_bytes = batch > 1 ? l.stride * static_cast<int64_t>(element_bytes(l.type)) : 0;
  const uint32_t align = alignment_of(ptr, stride_bytes);
  if (align < min_align) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, where + " is " + std::to_string(align) +
                                                   "-byte aligned; the algorithm was chosen for " +
                                                   std::to_string(min_align));
  }
  return CUBLAS_STATUS_SUCCESS;
}

// What a product's algorithm was chosen for when the caller passes none: the documented implicit
// heuristic, taken here as natural alignment and no workspace.
AlgoRecord implicit_algo(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t* L[4]) {
  AlgoRecord r;
  for (int i = 0; i < 4; ++i) r.align[i] = static_cast<uint32_t>(element_bytes(L[i]->type));
  r.bias_align = r.align[3];
  r.aux_align = r.align[3];
  r.compute = d.compute;
  r.ab_type = L[0]->type;
  r.cd_type = L[3]->type;
  return r;
}

}  // namespace
}  // namespace xtrain::interp

using xtrain::interp::AlgoRecord;
using xtrain::interp::refuse;

// One algorithm per problem, recording what the preference allowed. The emulation needs no
// workspace, but a GPU's heuristic may pick one that needs all of MAX_WORKSPACE_BYTES: the algo
// claims it all, so that a later product given less is refused here as it could be there.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  using namespace xtrain::interp;
  if (handle == nullptr) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmulAlgoGetHeuristic: NULL handle");
  if (!desc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !pref || !results || !returned || requested < 1) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: a NULL argument or no result asked");
  }
  *returned = 0;
  const cublasLtMatrixLayoutOpaque_t* L[4] = {Adesc, Bdesc, Cdesc, Ddesc};
  lt::Product p;
  if (const cublasStatus_t s = check_problem(*desc, L, p); s != CUBLAS_STATUS_SUCCESS) return s;
  AlgoRecord r = implicit_algo(*desc, L);
  static const char* const kNames[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i) {
    // No GPU kernel reads an element from a misaligned address: no algorithm exists for it.
    if (pref->align[i] < r.align[i]) {
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, std::string("no algorithm for ") + kNames[i] + " aligned to " +
                                                     std::to_string(pref->align[i]) + " bytes (its elements take " +
                                                     std::to_string(r.align[i]) + ")");
    }
    r.align[i] = pref->align[i] < 256 ? pref->align[i] : 256;
  }
  // The heuristic reads the bias pointer set on the descriptor for its alignment.
  if ((has_bias(desc->epilogue) || has_bgrad(desc->epilogue)) && desc->bias != nullptr) {
    r.bias_align = std::max(alignment_of(desc->bias, 0), r.bias_align);
  }
  // And the aux pointer, for the same reason (the header says so of both).
  if (has_aux(desc->epilogue) && desc->aux != nullptr) r.aux_align = std::max(alignment_of(desc->aux, 0), r.aux_align);
  r.workspace = pref->max_workspace;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo = r.pack();
  results[0].workspaceSize = static_cast<size_t>(r.workspace);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  using namespace xtrain::interp;
  if (handle == nullptr) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmul: NULL handle");
  if (!desc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !alpha || !beta) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a NULL descriptor, layout, alpha or beta");
  }
  const cublasLtMatrixLayoutOpaque_t* L[4] = {Adesc, Bdesc, Cdesc, Ddesc};
  lt::Product p;
  if (const cublasStatus_t s = check_problem(*desc, L, p); s != CUBLAS_STATUS_SUCCESS) return s;

  AlgoRecord r = implicit_algo(*desc, L);
  if (algo != nullptr) {
    const AlgoRecord expected = r;
    if (!AlgoRecord::unpack(*algo, r)) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "the algo was not made by cublasLtMatmulAlgoGetHeuristic");
    }
    if (r.compute != expected.compute || r.ab_type != expected.ab_type || r.cd_type != expected.cd_type) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "the algo was found for compute " + std::to_string(r.compute) +
                                                     ", types " + std::to_string(r.ab_type) + " -> " +
                                                     std::to_string(r.cd_type) + ", not this product's");
    }
  }
  // Documented: a workspace smaller than the algorithm needs is CUBLAS_STATUS_INVALID_VALUE.
  if (workspace_bytes < r.workspace) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "workspace of " + std::to_string(workspace_bytes) +
                                                   " bytes; the algorithm was chosen for " +
                                                   std::to_string(r.workspace));
  }
  if (workspace_bytes > 0 && (workspace == nullptr || !is_device_range(workspace, workspace_bytes))) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the workspace's " + std::to_string(workspace_bytes) +
                                                   " bytes are not inside one device allocation");
  }
  // Host pointer mode: the scalars are read now, as the real library reads them at the call.
  std::memcpy(&p.alpha, alpha, sizeof p.alpha);
  std::memcpy(&p.beta, beta, sizeof p.beta);
  const struct {
    const char* name;
    const void* ptr;
    const lt::Layout& layout;
    uint32_t align;
    bool accessed;
  } operands[] = {{"A", A, p.A, r.align[0], true},
                  {"B", B, p.B, r.align[1], true},
                  {"C", C, p.C, r.align[2], p.beta != 0.0f},  // beta == 0: C is not read
                  {"D", D, p.D, r.align[3], true}};
  for (const auto& o : operands) {
    if (!o.accessed) continue;
    if (const cublasStatus_t s = check_operand(o.name, o.ptr, o.layout, p.batch, o.align); s != CUBLAS_STATUS_SUCCESS) {
      return s;
    }
  }
  // In place (C == D), C and D are read and written through one layout; the emulation's reading
  // of the documentation, which asks for matching C and D descriptors then.
  if (C == D && (Cdesc->ld != Ddesc->ld || (p.batch > 1 && Cdesc->stride != Ddesc->stride))) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "C == D with different layouts: " + layout_text("C", *Cdesc) +
                                                   ", " + layout_text("D", *Ddesc));
  }
  if (has_bias(desc->epilogue)) {
    const lt::Layout bias{p.D.type, p.m, 1, p.m > 1 ? p.m : 1, 0};
    if (const cublasStatus_t s = check_operand("bias", desc->bias, bias, 1, r.bias_align); s != CUBLAS_STATUS_SUCCESS) {
      return s;
    }
    p.bias = desc->bias;
  }
  if (has_bgrad(desc->epilogue)) {
    if (p.alpha != 1.0f) {
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue CUBLASLT_EPILOGUE_BGRADB with alpha " +
                                                     std::to_string(p.alpha) +
                                                     ": whether alpha scales the bias gradient is not documented");
    }
    const lt::Layout bgrad{p.D.type, p.n, 1, p.n > 1 ? p.n : 1, 0};
    if (const cublasStatus_t s = check_operand("bias gradient", desc->bias, bgrad, 1, r.bias_align);
        s != CUBLAS_STATUS_SUCCESS) {
      return s;
    }
    p.bgrad = const_cast<void*>(desc->bias);  // an output: the descriptor holds it as const void*
  }
  if (has_aux(desc->epilogue)) {
    const lt::Layout aux{p.D.type, p.m, p.n, p.aux_ld, 0};
    if (const cublasStatus_t s = check_operand("aux", desc->aux, aux, 1, r.aux_align); s != CUBLAS_STATUS_SUCCESS) {
      return s;
    }
    // Written by GELU_AUX(_BIAS), only read by DGELU; the descriptor keeps it const either way.
    p.aux = const_cast<void*>(desc->aux);
  }
  p.a = A;
  p.b = B;
  p.c = C;
  p.d = D;
  const cudaError_t err = enqueue(stream, "cublasLtMatmul", [p] { lt::run_product(p); });
  if (err != cudaSuccess) {
    return refuse(CUBLAS_STATUS_EXECUTION_FAILED,
                  "the stream did not take the product: cudaError_t " + std::to_string(static_cast<int>(err)));
  }
  return CUBLAS_STATUS_SUCCESS;
}
