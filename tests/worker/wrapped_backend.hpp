// A Backend for tests that passes every call on to another one (the CPU backend) and watches:
//   - allocations, counted by kind (floats, ints, activations), live and in all; operations and
//     transfers by name;
//   - with `reported` set, it tells its users another activation dtype than the inner backend
//     stores (the CPU's fp32 passed off as bf16), so that GPT lays its buffers out for that
//     dtype: for allocation tests only, where no operation runs;
//   - with `records` set, it records like the CUDA backend's graphs: between begin_recording and
//     end_recording each operation is kept as a closure over its arguments instead of running,
//     and replay(id) runs the closures again in order. What the CUDA backend refuses while
//     recording (transfers, synchronize, sum_squares, allocation) throws std::logic_error here
//     too, and `fail_recording_at` makes a named operation throw while recording.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "worker/model/backend.hpp"

namespace xtrain::test {

struct WrappedBackendOptions {
  std::optional<DType> reported;  // the activation dtype to report instead of the inner one's
  bool records = false;
  std::string fail_recording_at;  // an operation's name
};

class WrappedBackend final : public Backend {
 public:
  using Options = WrappedBackendOptions;
  struct Counts {
    size_t floats = 0, ints = 0, acts = 0;
  };

  explicit WrappedBackend(Backend& inner, Options options = {}) : inner_(inner), options_(std::move(options)) {}

  Counts live() const { return live_; }     // allocated and not freed
  Counts total() const { return total_; }   // allocated in all
  int replays() const { return replays_; }
  // Calls of the operation `what` ("copy", "embedding_forward", ...) so far, run or recorded.
  int calls(const std::string& what) const {
    const auto found = calls_.find(what);
    return found == calls_.end() ? 0 : found->second;
  }

  std::string name() const override { return inner_.name(); }
  Precision precision() const override { return inner_.precision(); }
  DType act_dtype() const override { return options_.reported.value_or(inner_.act_dtype()); }

  float* alloc_floats(size_t n) override { return remember(inner_.alloc_floats(n), &Counts::floats, n); }
  int32_t* alloc_ints(size_t n) override { return remember(inner_.alloc_ints(n), &Counts::ints, n); }
  ActPtr alloc_acts(size_t n) override {
    return {remember(inner_.alloc_acts(n).data(), &Counts::acts, n), act_dtype()};
  }
  void free(void* p) noexcept override {
    if (p == nullptr || recording_) return;  // while recording the block is kept, as on CUDA
    const auto found = sizes_.find(p);
    if (found != sizes_.end()) {
      live_.*found->second.first -= found->second.second;
      sizes_.erase(found);
    }
    inner_.free(p);
  }
  void upload(float* dst, const float* src, size_t n) override { host("upload"), inner_.upload(dst, src, n); }
  void upload(int32_t* dst, const int32_t* src, size_t n) override { host("upload"), inner_.upload(dst, src, n); }
  void download(float* dst, const float* src, size_t n) override { host("download"), inner_.download(dst, src, n); }
  void download(int32_t* dst, const int32_t* src, size_t n) override {
    host("download"), inner_.download(dst, src, n);
  }
  void upload(ActPtr dst, const float* src, size_t n) override { host("upload"), inner_.upload(dst, src, n); }
  void download(float* dst, ConstActPtr src, size_t n) override { host("download"), inner_.download(dst, src, n); }
  bool host_reads_in_place() const override { return inner_.host_reads_in_place(); }
  const void* download_view(ConstActPtr src, size_t n) override {
    return host("download_view"), inner_.download_view(src, n);
  }
  void synchronize() override { host("synchronize"), inner_.synchronize(); }
  double sum_squares(const float* x, size_t n) override { return host("sum_squares"), inner_.sum_squares(x, n); }
  void reserve_scratch(int rows, int cols) override { host("reserve_scratch"), inner_.reserve_scratch(rows, cols); }
  OwnMemory own_memory(int rows, int cols) const override { return inner_.own_memory(rows, cols); }
  size_t attention_saved_floats(int B, int T, int C, int NH) const override {
    return inner_.attention_saved_floats(B, T, C, NH);
  }
  size_t attention_scratch_floats(int B, int T, int C, int NH) const override {
    return inner_.attention_scratch_floats(B, T, C, NH);
  }

  // ---- operations: run now, or recorded ------------------------------------------------------
  void fill_zero(float* p, size_t n) override {
    op("fill_zero", [=, this] { inner_.fill_zero(p, n); });
  }
  void fill_zero(ActPtr p, size_t n) override {
    op("fill_zero", [=, this] { inner_.fill_zero(p, n); });
  }
  void convert(ActPtr dst, const float* src, size_t n) override {
    op("convert", [=, this] { inner_.convert(dst, src, n); });
  }
  void copy(float* dst, const float* src, size_t n) override {
    op("copy", [=, this] { inner_.copy(dst, src, n); });
  }
  void copy(ActPtr dst, ConstActPtr src, size_t n) override {
    op("copy", [=, this] { inner_.copy(dst, src, n); });
  }
  void embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, int B, int T,
                         int C) override {
    op("embedding_forward", [=, this] { inner_.embedding_forward(out, tokens, wte, wpe, B, T, C); });
  }
  void embedding_forward_at(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, const int32_t* first,
                            int B, int T, int C) override {
    op("embedding_forward_at", [=, this] { inner_.embedding_forward_at(out, tokens, wte, wpe, first, B, T, C); });
  }
  void embedding_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T,
                          int C) override {
    op("embedding_backward", [=, this] { inner_.embedding_backward(dwte, dwpe, dout, tokens, B, T, C); });
  }
  void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, ConstActPtr weight,
                         ConstActPtr bias, int N, int C) override {
    op("layernorm_forward", [=, this] { inner_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C); });
  }
  void residual_layernorm_forward(ActPtr residual, ActPtr out, float* mean, float* rstd, ConstActPtr a, ConstActPtr b,
                                  ConstActPtr weight, ConstActPtr bias, int N, int C) override {
    op("residual_layernorm_forward",
       [=, this] { inner_.residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C); });
  }
  void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                          ConstActPtr weight, const float* mean, const float* rstd, int N, int C) override {
    op("layernorm_backward",
       [=, this] { inner_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C); });
  }
  void matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias, int N, int C,
                      int OC) override {
    op("matmul_forward", [=, this] { inner_.matmul_forward(out, inp, weight, bias, N, C, OC); });
  }
  void matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                       ConstActPtr weight, int N, int C, int OC, float dout_scale) override {
    op("matmul_backward",
       [=, this] { inner_.matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, dout_scale); });
  }
  void matmul_gelu_forward(ActPtr out, ActPtr pre, ConstActPtr inp, ConstActPtr weight, ConstActPtr bias, int N,
                           int C, int OC) override {
    op("matmul_gelu_forward", [=, this] { inner_.matmul_gelu_forward(out, pre, inp, weight, bias, N, C, OC); });
  }
  void matmul_gelu_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                            ConstActPtr weight, ConstActPtr pre_gelu, int N, int C, int OC,
                            float dout_scale) override {
    op("matmul_gelu_backward", [=, this] {
      inner_.matmul_gelu_backward(dinp, dweight, dbias, dout, inp, weight, pre_gelu, N, C, OC, dout_scale);
    });
  }
  void attention_forward(ActPtr out, float* saved, ConstActPtr qkv, float* scratch, int B, int T, int C,
                         int NH) override {
    op("attention_forward", [=, this] { inner_.attention_forward(out, saved, qkv, scratch, B, T, C, NH); });
  }
  void attention_backward(ActPtr dqkv, ConstActPtr dout, ConstActPtr qkv, ConstActPtr out, const float* saved,
                          float* scratch, int B, int T, int C, int NH) override {
    op("attention_backward",
       [=, this] { inner_.attention_backward(dqkv, dout, qkv, out, saved, scratch, B, T, C, NH); });
  }
  void attention_step(ActPtr out, ActPtr cache, ConstActPtr qkv, const int32_t* position, int B, int T, int C,
                      int NH) override {
    op("attention_step", [=, this] { inner_.attention_step(out, cache, qkv, position, B, T, C, NH); });
  }
  void gelu_forward(ActPtr out, ConstActPtr inp, size_t n) override {
    op("gelu_forward", [=, this] { inner_.gelu_forward(out, inp, n); });
  }
  void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) override {
    op("gelu_backward", [=, this] { inner_.gelu_backward(dinp, inp, dout, n); });
  }
  void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) override {
    op("residual_forward", [=, this] { inner_.residual_forward(out, a, b, n); });
  }
  void softmax_cross_entropy(ActPtr logits, float* losses, const int32_t* targets, float dloss, int N, int V,
                             int Vp) override {
    op("softmax_cross_entropy",
       [=, this] { inner_.softmax_cross_entropy(logits, losses, targets, dloss, N, V, Vp); });
  }
  void adamw_update(float* params, ActPtr weights, const float* grads, float* m, float* v, size_t n,
                    const AdamWHyper& h) override {
    op("adamw_update", [=, this] { inner_.adamw_update(params, weights, grads, m, v, n, h); });
  }
  void scale(float* x, float s, size_t n) override {
    op("scale", [=, this] { inner_.scale(x, s, n); });
  }

  // ---- recording ------------------------------------------------------------------------------
  bool can_record() const override { return options_.records; }
  void begin_recording() override {
    if (!options_.records) return Backend::begin_recording();
    if (recording_) throw std::logic_error("WrappedBackend: already recording");
    recording_ = true;
    recordings_.emplace_back();
  }
  int end_recording() override {
    if (!recording_) throw std::logic_error("WrappedBackend: end_recording without begin_recording");
    recording_ = false;
    return static_cast<int>(recordings_.size() - 1);
  }
  void abort_recording() override {
    if (!recording_) return;
    recording_ = false;
    recordings_.pop_back();
  }
  void replay(int id) override {
    if (recording_ || id < 0 || id >= static_cast<int>(recordings_.size())) {
      throw std::logic_error("WrappedBackend: no recording " + std::to_string(id));
    }
    ++replays_;
    for (const auto& work : recordings_[static_cast<size_t>(id)]) work();
  }
  void drop_recordings() noexcept override {
    if (recording_) return;  // kept, as on CUDA
    recordings_.clear();
  }

 private:
  template <class P>
  P* remember(P* p, size_t Counts::*kind, size_t n) {
    if (recording_) {
      inner_.free(p);
      throw std::logic_error("WrappedBackend: an allocation while recording");
    }
    live_.*kind += n;
    total_.*kind += n;
    sizes_[p] = {kind, n};
    return p;
  }
  void* remember(void* p, size_t Counts::*kind, size_t n) { return remember(static_cast<char*>(p), kind, n); }

  // Calls that wait for the device or move data to or from the host: counted, and refused while
  // recording.
  int host(const char* what) {
    if (recording_) throw std::logic_error(std::string("WrappedBackend: ") + what + " while recording");
    ++calls_[what];
    return 0;
  }
  void op(const std::string& what, std::function<void()> work) {
    ++calls_[what];
    if (!recording_) return work();
    if (what == options_.fail_recording_at) throw std::runtime_error(what + " cannot be recorded (test)");
    recordings_.back().push_back(std::move(work));
  }

  Backend& inner_;
  Options options_;
  Counts live_, total_;
  std::map<const void*, std::pair<size_t Counts::*, size_t>> sizes_;
  bool recording_ = false;
  std::vector<std::vector<std::function<void()>>> recordings_;
  int replays_ = 0;
  std::map<std::string, int> calls_;
};

}  // namespace xtrain::test
