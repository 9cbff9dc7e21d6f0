// Interpret mode's cuBLASLt refuses, at the call and with the real status, what the real library
// refuses or what would fault on a GPU; each refusal names its reason (last_cublas_detail()) and
// leaves D untouched. "Not device memory" is a stack array, which no cudaMalloc returns.
#include <catch2/catch.hpp>
#include <cublasLt.h>

#include <cstring>
#include <string>
#include <utility>

#include "tests/cuda/interp/interp_test_util.hpp"

namespace {

using Catch::Matchers::Contains;
using xtrain::interp::last_cublas_detail;
using xtrain::interp::test::DeviceBuffer;

constexpr int64_t kM = 7, kN = 13, kK = 5;
constexpr float kUntouched = 7.0f;

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld) == CUBLAS_STATUS_SUCCESS);
  return l;
}

void set_batch(cublasLtMatrixLayout_t l, int batch, int64_t stride) {
  REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch) ==
          CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride) ==
          CUBLAS_STATUS_SUCCESS);
}

// A valid fp32 product D (7,13) = A (7,5) B (5,13) + C, column-major, N/N, out of place, all
// ones in A, B and C; each section breaks one thing.
struct Fixture {
  DeviceBuffer a{(kM * kK + 64) * 4}, b{kK * kN * 4}, c{kM * kN * 4}, d{kM * kN * 4}, bias{kM * 4}, ws{4096};
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = make_layout(CUDA_R_32F, kM, kK, kM), lb = make_layout(CUDA_R_32F, kK, kN, kK);
  cublasLtMatrixLayout_t lc = make_layout(CUDA_R_32F, kM, kN, kM), ld = make_layout(CUDA_R_32F, kM, kN, kM);
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulAlgo_t algo{};
  float alpha = 1.0f, beta = 1.0f;
  const void* pa = a.get();
  const void* pb = b.get();
  const void* pc = c.get();
  void* pd = d.get();
  void* pws = ws.get();
  size_t ws_bytes = ws.bytes();

  Fixture() {
    for (const DeviceBuffer* buf : {&a, &b, &c, &bias}) {
      for (size_t i = 0; i < buf->bytes() / 4; ++i) buf->as<float>()[i] = 1.0f;
    }
    for (int64_t i = 0; i < kM * kN; ++i) d.as<float>()[i] = kUntouched;
    REQUIRE(cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
    const uint64_t max_ws = ws.bytes();
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                                 sizeof max_ws) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(heuristic() == CUBLAS_STATUS_SUCCESS);
  }
  ~Fixture() {
    for (auto l : {la, lb, lc, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
  }
  cublasStatus_t heuristic() {
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, ld, pref, 1, &r, &found);
    if (s == CUBLAS_STATUS_SUCCESS) {
      REQUIRE(found == 1);
      CHECK(r.workspaceSize == ws.bytes());
      algo = r.algo;
    }
    return s;
  }
  cublasStatus_t matmul() {
    return cublasLtMatmul(h, desc, &alpha, pa, la, pb, lb, &beta, pc, lc, pd, ld, &algo, pws, ws_bytes, nullptr);
  }
  void relayout(cublasLtMatrixLayout_t& l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t lead) {
    cublasLtMatrixLayoutDestroy(l);
    l = make_layout(type, rows, cols, lead);
  }
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value) == CUBLAS_STATUS_SUCCESS);
  }
  void set_alignment(cublasLtMatmulPreferenceAttributes_t attr, uint32_t bytes) {
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof bytes) == CUBLAS_STATUS_SUCCESS);
  }
  bool d_untouched() const {
    for (int64_t i = 0; i < kM * kN; ++i) {
      if (d.as<float>()[i] != kUntouched) return false;
    }
    return true;
  }
  void refused(cublasStatus_t expected, const std::string& reason) {
    const cublasStatus_t s = matmul();
    CHECK(std::string(cublasLtGetStatusString(s)) == cublasLtGetStatusString(expected));
    CHECK_THAT(last_cublas_detail(), Contains(reason));
    CHECK(d_untouched());
  }
};

}  // namespace

TEST_CASE("interp cuBLASLt: the valid baseline runs", "[interp][cublaslt]") {
  Fixture f;
  REQUIRE(f.matmul() == CUBLAS_STATUS_SUCCESS);
  xtrain::interp::test::synchronize();
  for (int64_t i = 0; i < kM * kN; ++i) CHECK(f.d.as<float>()[i] == kK + 1.0f);  // k ones, plus C
}

TEST_CASE("interp cuBLASLt refuses bad shapes and layouts", "[interp][cublaslt]") {
  Fixture f;
  SECTION("a leading dimension below the rows") {
    f.relayout(f.la, CUDA_R_32F, kM, kK, kM - 1);
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "rows <= ld");
  }
  SECTION("op(B) rows differ from op(A) columns") {
    f.relayout(f.lb, CUDA_R_32F, kK + 1, kN, kK + 1);
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "shapes disagree");
  }
  SECTION("C's shape differs from D's") {
    f.relayout(f.lc, CUDA_R_32F, kM, kN - 1, kM);
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "shapes disagree");
  }
  SECTION("batch counts differ") {
    set_batch(f.la, 2, 0);
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ");
  }
  SECTION("C == D through different layouts") {
    DeviceBuffer cd((kM + 1) * kN * 4);
    for (size_t i = 0; i < cd.bytes() / 4; ++i) cd.as<float>()[i] = kUntouched;
    f.pc = f.pd = cd.get();
    f.relayout(f.lc, CUDA_R_32F, kM, kN, kM + 1);
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "C == D with different layouts");
    for (size_t i = 0; i < cd.bytes() / 4; ++i) CHECK(cd.as<float>()[i] == kUntouched);
  }
}

TEST_CASE("interp cuBLASLt refuses unsupported types, operations and epilogues", "[interp][cublaslt]") {
  Fixture f;
  SECTION("A and B of different types") {
    f.relayout(f.la, CUDA_R_16BF, kM, kK, kM);
    f.refused(CUBLAS_STATUS_NOT_SUPPORTED, "types");
  }
  SECTION("fp32 inputs into a bf16 output") {
    f.relayout(f.lc, CUDA_R_16BF, kM, kN, kM);
    f.relayout(f.ld, CUDA_R_16BF, kM, kN, kM);
    f.refused(CUBLAS_STATUS_NOT_SUPPORTED, "types");
  }
  SECTION("C and D of different types") {
    f.relayout(f.la, CUDA_R_16BF, kM, kK, kM);
    f.relayout(f.lb, CUDA_R_16BF, kK, kN, kK);
    f.relayout(f.lc, CUDA_R_16BF, kM, kN, kM);
    f.refused(CUBLAS_STATUS_NOT_SUPPORTED, "types");
  }
  SECTION("FAST_TF32 with bf16 inputs") {
    cublasLtMatmulDescDestroy(f.desc);
    REQUIRE(cublasLtMatmulDescCreate(&f.desc, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    f.relayout(f.la, CUDA_R_16BF, kM, kK, kM);
    f.relayout(f.lb, CUDA_R_16BF, kK, kN, kK);
    f.refused(CUBLAS_STATUS_NOT_SUPPORTED, "types");
  }
  SECTION("the conjugate-transpose operation") {
    f.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_C);
    f.refused(CUBLAS_STATUS_NOT_SUPPORTED, "operation");
  }
  SECTION("epilogues other than DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU and BGRADB, by name") {
    const std::pair<cublasLtEpilogue_t, const char*> refused[] = {{CUBLASLT_EPILOGUE_RELU, "RELU "},
                                                                  {CUBLASLT_EPILOGUE_GELU_BIAS, "GELU_BIAS "},
                                                                  {CUBLASLT_EPILOGUE_DGELU_BGRAD, "DGELU_BGRAD "},
                                                                  {CUBLASLT_EPILOGUE_BGRADA, "BGRADA "}};
    for (const auto& [e, name] : refused) {
      f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, e);
      f.refused(CUBLAS_STATUS_NOT_SUPPORTED, std::string("CUBLASLT_EPILOGUE_") + name + "is not emulated");
    }
  }
  SECTION("BGRADB where the documentation leaves its result open: alpha != 1, FAST_TF32") {
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BGRADB);
    f.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(f.bias.get()));
    f.alpha = 2.0f;
    f.refused(CUBLAS_STATUS_NOT_SUPPORTED, "whether alpha scales the bias gradient");
    f.alpha = 1.0f;
    cublasLtMatmulDescDestroy(f.desc);
    REQUIRE(cublasLtMatmulDescCreate(&f.desc, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BGRADB);
    f.refused(CUBLAS_STATUS_NOT_SUPPORTED, "without FAST_TF32");
  }
  SECTION("a bias of another type than D's") {
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    f.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(f.bias.get()));
    f.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
    f.refused(CUBLAS_STATUS_NOT_SUPPORTED, "bias data type");
  }
}

TEST_CASE("interp cuBLASLt refuses a GELU epilogue's bad aux", "[interp][cublaslt]") {
  Fixture f;
  DeviceBuffer aux{8 * kN * 4};  // (7,13) with ld 8: the smallest valid leading dimension
  f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX);
  f.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(aux.get()));
  SECTION("a leading dimension that is not a multiple of 8, or below D's rows") {
    for (int64_t lead : {int64_t{7}, int64_t{9}, int64_t{0}}) {
      f.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, lead);
      f.refused(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_LD");
    }
  }
  SECTION("another type than D's") {
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, static_cast<int32_t>(CUDA_R_16BF));
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "aux data type");
  }
  SECTION("no aux, or one outside device memory") {
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(nullptr));
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "aux is NULL");
    alignas(256) float host[8 * kN] = {};
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(host));
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "aux at");
  }
  SECTION("a valid aux runs") {
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
    REQUIRE(f.heuristic() == CUBLAS_STATUS_SUCCESS);
    CHECK(f.matmul() == CUBLAS_STATUS_SUCCESS);
  }
}

TEST_CASE("interp cuBLASLt refuses operands outside device memory", "[interp][cublaslt]") {
  Fixture f;
  alignas(256) float host[kM * kN] = {};  // a stack array: never device memory
  SECTION("A") {
    f.pa = host;
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "A at");
  }
  SECTION("B") {
    f.pb = host;
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "B at");
  }
  SECTION("C, read since beta != 0; with beta == 0 C is not read and not checked") {
    f.pc = host;
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "C at");
    f.beta = 0.0f;
    CHECK(f.matmul() == CUBLAS_STATUS_SUCCESS);
  }
  SECTION("D") {
    f.pd = host;
    CHECK(f.matmul() == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_THAT(last_cublas_detail(), Contains("D at"));
    for (float x : host) CHECK(x == 0.0f);
  }
  SECTION("the bias") {
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    f.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(host));
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "bias at");
  }
  SECTION("the workspace") {
    alignas(256) char scratch[4096];
    f.pws = scratch;
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "workspace");
  }
  SECTION("D's last batch matrix beyond its allocation") {
    constexpr int64_t kStride = 128;  // elements: keeps every batch matrix 256-byte aligned
    DeviceBuffer c2((kStride + kM * kN) * 4);
    std::memset(c2.get(), 0, c2.bytes());
    f.pc = c2.get();
    for (auto l : {f.la, f.lb}) set_batch(l, 2, 0);  // A and B shared by both products
    for (auto l : {f.lc, f.ld}) set_batch(l, 2, kStride);
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "D at");
  }
}

TEST_CASE("interp cuBLASLt refuses what does not match the algorithm", "[interp][cublaslt]") {
  Fixture f;
  SECTION("a workspace smaller than the algorithm was chosen for") {
    f.ws_bytes -= 1;
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "workspace");
  }
  SECTION("A less aligned than the preference promised, and accepted once the algorithm allows it") {
    f.pa = f.a.as<float>() + 1;  // 4-byte aligned, inside the allocation
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "aligned");
    f.set_alignment(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, 4);
    REQUIRE(f.heuristic() == CUBLAS_STATUS_SUCCESS);
    CHECK(f.matmul() == CUBLAS_STATUS_SUCCESS);
  }
  SECTION("the bias less aligned than when the heuristic saw it") {
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    f.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(f.bias.get()));
    REQUIRE(f.heuristic() == CUBLAS_STATUS_SUCCESS);
    DeviceBuffer shifted((kM + 1) * 4);
    f.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(shifted.as<float>() + 1));
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "bias at");
  }
  SECTION("no algorithm for an alignment below the element size") {
    f.set_alignment(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, 2);
    CHECK(f.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK_THAT(last_cublas_detail(), Contains("no algorithm"));
  }
  SECTION("an algo the heuristic did not make") {
    f.algo = cublasLtMatmulAlgo_t{};
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic");
  }
  SECTION("an algo found for other types") {
    f.relayout(f.la, CUDA_R_16BF, kM, kK, kM);
    f.relayout(f.lb, CUDA_R_16BF, kK, kN, kK);
    REQUIRE(f.heuristic() == CUBLAS_STATUS_SUCCESS);  // bf16 x bf16 -> fp32
    f.relayout(f.la, CUDA_R_32F, kM, kK, kM);
    f.relayout(f.lb, CUDA_R_32F, kK, kN, kK);
    f.refused(CUBLAS_STATUS_INVALID_VALUE, "not this product's");
  }
}

TEST_CASE("interp cuBLASLt refuses bad calls and names statuses as the real library", "[interp][cublaslt]") {
  Fixture f;
  SECTION("a NULL handle or alpha") {
    CHECK(cublasLtMatmul(nullptr, f.desc, &f.alpha, f.pa, f.la, f.pb, f.lb, &f.beta, f.pc, f.lc, f.pd, f.ld, &f.algo,
                         f.pws, f.ws_bytes, nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK(cublasLtMatmul(f.h, f.desc, nullptr, f.pa, f.la, f.pb, f.lb, &f.beta, f.pc, f.lc, f.pd, f.ld, &f.algo,
                         f.pws, f.ws_bytes, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(f.d_untouched());
  }
  SECTION("an attribute value of the wrong size, or none") {
    const int64_t wide = CUBLAS_OP_T;
    CHECK(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasLtMatrixLayoutSetAttribute(f.la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, nullptr, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);
    const uint32_t small = 8;  // MAX_WORKSPACE_BYTES is a uint64_t
    CHECK(cublasLtMatmulPreferenceSetAttribute(f.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &small,
                                               sizeof small) == CUBLAS_STATUS_INVALID_VALUE);
  }
  SECTION("an attribute the emulation does not model") {
    const int32_t mode = 1;
    CHECK(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK_THAT(last_cublas_detail(), Contains("not emulated"));
  }
  SECTION("no algo at all: the implicit heuristic runs the product") {
    CHECK(cublasLtMatmul(f.h, f.desc, &f.alpha, f.pa, f.la, f.pb, f.lb, &f.beta, f.pc, f.lc, f.pd, f.ld, nullptr,
                         f.pws, f.ws_bytes, nullptr) == CUBLAS_STATUS_SUCCESS);
    xtrain::interp::test::synchronize();
    CHECK(f.d.as<float>()[0] == kK + 1.0f);
  }
  SECTION("status values and names") {
    CHECK(static_cast<int>(CUBLAS_STATUS_INVALID_VALUE) == 7);
    CHECK(static_cast<int>(CUBLAS_STATUS_NOT_SUPPORTED) == 15);
    CHECK(std::string(cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
    CHECK(std::string(cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS)) == "CUBLAS_STATUS_SUCCESS");
  }
}
