// Per-operation time of a training step: a Backend that forwards every call to the backend it
// wraps and adds the call's time to a row keyed by the operation and, for the matrix products,
// their shape. For the CPU backend at one thread: each call returns when its work is done, all of
// it on the calling thread, so the thread's CPU time is the call's work, and other processes on a
// shared machine do not count (as they would in wall time). xtrain-bench-cpu --profile prints it.
#pragma once

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "worker/model/backend.hpp"

namespace xtrain::bench {

class OpProfile final : public Backend {
 public:
  explicit OpProfile(Backend& inner) : k_(inner) {}

  // Clears the rows: call before the steps to be measured.
  void reset() { rows_.clear(); }

  // The rows, largest first: ms per step, share of the sum of all rows, calls per step, and for
  // products their rate (2 N C OC floating-point operations per product).
  void print(std::FILE* out, int steps) const {
    std::vector<std::pair<std::string, Row>> rows(rows_.begin(), rows_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double total = 0.0;
    for (const auto& r : rows) total += r.second.ms;
    std::fprintf(out, "| operation | calls/step | ms/step | share | GFLOP/s |\n|---|---:|---:|---:|---:|\n");
    for (const auto& [name, r] : rows) {
      std::fprintf(out, "| %s | %.0f | %.2f | %.1f%% | ", name.c_str(), static_cast<double>(r.calls) / steps,
                   r.ms / steps, 100.0 * r.ms / total);
      if (r.flop > 0) std::fprintf(out, "%.1f |\n", r.flop / (r.ms * 1e6));
      else std::fprintf(out, " |\n");
    }
    std::fprintf(out, "| all operations | | %.2f | 100%% | |\n", total / steps);
  }

  std::string name() const override { return k_.name(); }
  Precision precision() const override { return k_.precision(); }
  DType act_dtype() const override { return k_.act_dtype(); }

  float* alloc_floats(size_t n) override { return k_.alloc_floats(n); }
  int32_t* alloc_ints(size_t n) override { return k_.alloc_ints(n); }
  ActPtr alloc_acts(size_t n) override { return k_.alloc_acts(n); }
  void free(void* p) noexcept override { k_.free(p); }
  void upload(float* dst, const float* src, size_t n) override { time("upload", [&] { k_.upload(dst, src, n); }); }
  void upload(int32_t* dst, const int32_t* src, size_t n) override {
    time("upload", [&] { k_.upload(dst, src, n); });
  }
  void download(float* dst, const float* src, size_t n) override {
    time("download", [&] { k_.download(dst, src, n); });
  }
  void download(int32_t* dst, const int32_t* src, size_t n) override {
    time("download", [&] { k_.download(dst, src, n); });
  }
  void upload(ActPtr dst, const float* src, size_t n) override { time("upload", [&] { k_.upload(dst, src, n); }); }
  void download(float* dst, ConstActPtr src, size_t n) override {
    time("download", [&] { k_.download(dst, src, n); });
  }
  void fill_zero(float* p, size_t n) override { time("fill_zero", [&] { k_.fill_zero(p, n); }); }
  void fill_zero(ActPtr p, size_t n) override { time("fill_zero", [&] { k_.fill_zero(p, n); }); }
  void convert(ActPtr dst, const float* src, size_t n) override { time("convert", [&] { k_.convert(dst, src, n); }); }
  void copy(float* dst, const float* src, size_t n) override { time("copy", [&] { k_.copy(dst, src, n); }); }
  void synchronize() override { k_.synchronize(); }
  void reserve_scratch(int rows, int cols) override { k_.reserve_scratch(rows, cols); }

  void embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, int B, int T,
                         int C) override {
    time("embedding_forward", [&] { k_.embedding_forward(out, tokens, wte, wpe, B, T, C); });
  }
  void embedding_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T,
                          int C) override {
    time("embedding_backward", [&] { k_.embedding_backward(dwte, dwpe, dout, tokens, B, T, C); });
  }
  void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias,
                         int N, int C) override {
    time("layernorm_forward", [&] { k_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C); });
  }
  void residual_layernorm_forward(ActPtr residual, ActPtr out, float* mean, float* rstd, ConstActPtr a, ConstActPtr b,
                                  ConstActPtr weight, ConstActPtr bias, int N, int C) override {
    time("residual_layernorm_forward",
         [&] { k_.residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C); });
  }
  void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                          ConstActPtr weight, const float* mean, const float* rstd, int N, int C) override {
    time("layernorm_backward",
         [&] { k_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C); });
  }
  void matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias, int N, int C,
                      int OC) override {
    time(product("matmul_forward", N, C, OC), [&] { k_.matmul_forward(out, inp, weight, bias, N, C, OC); },
         2.0 * N * C * OC);
  }
  void matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                       ConstActPtr weight, int N, int C, int OC, float dout_scale) override {
    time(product("matmul_backward", N, C, OC),
         [&] { k_.matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, dout_scale); },
         4.0 * N * C * OC);
  }
  void matmul_gelu_forward(ActPtr out, ActPtr pre, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias, int N,
                           int C, int OC) override {
    time(product("matmul_gelu_forward", N, C, OC),
         [&] { k_.matmul_gelu_forward(out, pre, inp, weight, bias, N, C, OC); }, 2.0 * N * C * OC);
  }
  void matmul_gelu_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                            ConstActPtr weight, ConstActPtr pre_gelu, int N, int C, int OC,
                            float dout_scale) override {
    time(product("matmul_gelu_backward", N, C, OC),
         [&] { k_.matmul_gelu_backward(dinp, dweight, dbias, dout, inp, weight, pre_gelu, N, C, OC, dout_scale); },
         4.0 * N * C * OC);
  }
  size_t attention_saved_floats(int B, int T, int C, int NH) const override {
    return k_.attention_saved_floats(B, T, C, NH);
  }
  size_t attention_scratch_floats(int B, int T, int C, int NH) const override {
    return k_.attention_scratch_floats(B, T, C, NH);
  }
  void attention_forward(ActPtr out, float* saved, ConstActPtr qkv, float* scratch, int B, int T, int C,
                         int NH) override {
    time("attention_forward", [&] { k_.attention_forward(out, saved, qkv, scratch, B, T, C, NH); });
  }
  void attention_backward(ActPtr dqkv, ConstActPtr dout, ConstActPtr qkv, ConstActPtr out, const float* saved,
                          float* scratch, int B, int T, int C, int NH) override {
    time("attention_backward", [&] { k_.attention_backward(dqkv, dout, qkv, out, saved, scratch, B, T, C, NH); });
  }
  void gelu_forward(ActPtr out, ConstActPtr inp, size_t n) override {
    time("gelu_forward", [&] { k_.gelu_forward(out, inp, n); });
  }
  void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) override {
    time("gelu_backward", [&] { k_.gelu_backward(dinp, inp, dout, n); });
  }
  void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) override {
    time("residual_forward", [&] { k_.residual_forward(out, a, b, n); });
  }
  void softmax_cross_entropy(ActPtr logits, float* losses, const int32_t* targets, float dloss, int N, int V,
                             int Vp) override {
    time("softmax_cross_entropy", [&] { k_.softmax_cross_entropy(logits, losses, targets, dloss, N, V, Vp); });
  }
  void adamw_update(float* params, ActPtr weights, const float* grads, float* m, float* v, size_t n,
                    const AdamWHyper& h) override {
    time("adamw_update", [&] { k_.adamw_update(params, weights, grads, m, v, n, h); });
  }
  double sum_squares(const float* x, size_t n) override {
    double s = 0.0;
    time("sum_squares", [&] { s = k_.sum_squares(x, n); });
    return s;
  }
  void scale(float* x, float s, size_t n) override { time("scale", [&] { k_.scale(x, s, n); }); }

 private:
  struct Row {
    double ms = 0.0;
    long calls = 0;
    double flop = 0.0;
  };

  static std::string product(const char* op, int N, int C, int OC) {
    return std::string(op) + " " + std::to_string(N) + "x" + std::to_string(C) + "->" + std::to_string(OC);
  }

  static double thread_ms() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
  }

  template <class F>
  void time(const std::string& key, F&& f, double flop = 0.0) {
    const double start = thread_ms();
    f();
    Row& r = rows_[key];
    r.ms += thread_ms() - start;
    r.calls += 1;
    r.flop += flop;
  }

  Backend& k_;
  std::map<std::string, Row> rows_;
};

}  // namespace xtrain::bench
