// Per-operation time of a training step: a Backend that forwards every call to the backend it
// wraps and adds the call's time to a row keyed by the operation and, for the matrix products,
// their shape. An OpClock takes the times: ThreadCpuClock below for the CPU backend (each call
// returns when its work is done, all of it on the calling thread at one thread, so the thread's
// CPU time is the call's work, and other processes on a shared machine do not count, as they would
// in wall time); CudaEventClock (cuda_event_clock.hpp) for the CUDA backend, whose calls only
// queue work. xtrain-bench-cpu --profile and xtrain-bench-gpu --profile print it.
#pragma once

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "worker/model/backend.hpp"

namespace xtrain::bench {

// How OpProfile times an operation: begin() before its call, end() after it, which hands `done`
// the operation's milliseconds at once or at settle() (after the device finished the work).
class OpClock {
 public:
  virtual ~OpClock() = default;
  virtual void begin() = 0;
  virtual void end(std::function<void(double)> done) = 0;
  virtual void settle() {}
};

// The calling thread's CPU time.
class ThreadCpuClock final : public OpClock {
 public:
  void begin() override { start_ = now_ms(); }
  void end(std::function<void(double)> done) override { done(now_ms() - start_); }

 private:
  static double now_ms() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
  }
  double start_ = 0.0;
};

class OpProfile final : public Backend {
 public:
  OpProfile(Backend& inner, OpClock& clock) : k_(inner), clock_(clock) {}

  // Off: calls are forwarded and not timed (the clock is not touched).
  void set_enabled(bool on) { enabled_ = on; }
  // Clears the rows: call before the steps to be measured.
  void reset() { rows_.clear(); }
  // Every timed call's time in the rows: call after the device finished them (a synchronize).
  void settle() { clock_.settle(); }

  // The rows, largest first: ms per step, share of the sum of all rows, calls per step, and for
  // products their rate (2 N C OC floating-point operations per product), as a Markdown table
  // ending in the sum of all rows.
  std::string table(int steps) const {
    std::vector<std::pair<std::string, Row>> rows(rows_.begin(), rows_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double total = 0.0;
    for (const auto& r : rows) total += r.second.ms;
    std::string out = "| operation | calls/step | ms/step | share | GFLOP/s |\n|---|---:|---:|---:|---:|\n";
    char line[256];
    for (const auto& [name, r] : rows) {
      std::snprintf(line, sizeof line, "| %s | %.0f | %.3f | %.1f%% | ", name.c_str(),
                    static_cast<double>(r.calls) / steps, r.ms / steps, 100.0 * r.ms / total);
      out += line;
      if (r.flop > 0) {
        std::snprintf(line, sizeof line, "%.1f |\n", r.flop / (r.ms * 1e6));
        out += line;
      } else {
        out += " |\n";
      }
    }
    std::snprintf(line, sizeof line, "| all operations | | %.3f | 100%% | |\n", total / steps);
    return out + line;
  }
  double total_ms() const {
    double total = 0.0;
    for (const auto& [name, r] : rows_) total += r.ms;
    return total;
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
  bool host_reads_in_place() const override { return k_.host_reads_in_place(); }
  const void* download_view(ConstActPtr src, size_t n) override {
    const void* view = nullptr;
    time("download", [&] { view = k_.download_view(src, n); });
    return view;
  }
  void fill_zero(float* p, size_t n) override { time("fill_zero", [&] { k_.fill_zero(p, n); }); }
  void fill_zero(ActPtr p, size_t n) override { time("fill_zero", [&] { k_.fill_zero(p, n); }); }
  void convert(ActPtr dst, const float* src, size_t n) override { time("convert", [&] { k_.convert(dst, src, n); }); }
  void copy(float* dst, const float* src, size_t n) override { time("copy", [&] { k_.copy(dst, src, n); }); }
  void copy(ActPtr dst, ConstActPtr src, size_t n) override { time("copy", [&] { k_.copy(dst, src, n); }); }
  void synchronize() override { k_.synchronize(); }
  void reserve_scratch(int rows, int cols) override { k_.reserve_scratch(rows, cols); }
  OwnMemory own_memory(int rows, int cols) const override { return k_.own_memory(rows, cols); }

  void embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, int B, int T,
                         int C) override {
    time("embedding_forward", [&] { k_.embedding_forward(out, tokens, wte, wpe, B, T, C); });
  }
  void embedding_forward_at(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, const int32_t* first,
                            int B, int T, int C) override {
    time("embedding_forward_at", [&] { k_.embedding_forward_at(out, tokens, wte, wpe, first, B, T, C); });
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
  void attention_step(ActPtr out, ActPtr cache, ConstActPtr qkv, const int32_t* position, int B, int T, int C,
                      int NH) override {
    time("attention_step", [&] { k_.attention_step(out, cache, qkv, position, B, T, C, NH); });
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
  void sum_squares_into(float* dst, const float* x, size_t n) override {
    time("sum_squares", [&] { k_.sum_squares_into(dst, x, n); });
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

  template <class F>
  void time(const std::string& key, F&& f, double flop = 0.0) {
    if (!enabled_) {
      f();
      return;
    }
    clock_.begin();
    f();
    clock_.end([this, key, flop](double ms) {
      Row& r = rows_[key];
      r.ms += ms;
      r.calls += 1;
      r.flop += flop;
    });
  }

  Backend& k_;
  OpClock& clock_;
  bool enabled_ = true;
  std::map<std::string, Row> rows_;
};

}  // namespace xtrain::bench
