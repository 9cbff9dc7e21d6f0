// CudaBackend: its construction, device memory, transfers through the pinned staging ring, and
// the recording of CUDA graphs; host code only (the operations, each a kernel launcher or a
// product: cuda_backend.cu).
#include "cuda/cuda_backend.hpp"

#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "worker/math/bf16.hpp"

namespace xtrain::cuda {
namespace {

cudaStream_t select_device_and_create_stream(int device) {
  XTRAIN_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  XTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

// std::bad_alloc as the interface asks, with the sizes in its message.
class DeviceOutOfMemory : public std::bad_alloc {
 public:
  explicit DeviceOutOfMemory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

[[noreturn]] void throw_out_of_memory(size_t bytes, int device, cudaError_t err) {
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  constexpr double kMiB = 1024.0 * 1024.0;
  throw DeviceOutOfMemory("cudaMalloc of " + std::to_string(bytes / kMiB) + " MiB on GPU " + std::to_string(device) +
                          " failed (" + cudaGetErrorString(err) + "); " + std::to_string(free_bytes / kMiB) +
                          " MiB free of " + std::to_string(total_bytes / kMiB));
}

}  // namespace

// ---- ScratchBuffer ------------------------------------------------------------------------------

ScratchBuffer::~ScratchBuffer() { cudaFree(data_); }

void* ScratchBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return data_;
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier work may still use the old buffer
  XTRAIN_CUDA_CHECK(cudaFree(data_));
  data_ = nullptr;
  bytes_ = 0;
  XTRAIN_CUDA_CHECK(cudaMalloc(&data_, bytes));
  bytes_ = bytes;
  return data_;
}

// ---- memory -------------------------------------------------------------------------------------

CudaBackend::CudaBackend(int device, Precision precision, bool deterministic)
    : device_(device),
      precision_(precision),
      atomic_dq_(cuda_buffers::attention_dq_by_atomics(precision, deterministic)),
      stream_(select_device_and_create_stream(device)),
      gemm_(stream_, precision == Precision::tf32),
      scratch_(stream_),
      pinned_(stream_, [this] { wait_for_stream("the pinned staging ring's drain"); }) {
  XTRAIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sum_partials_), cuda_buffers::kSumSquaresPartialsBytes));
}

CudaBackend::~CudaBackend() {
  abort_recording();
  cudaStreamSynchronize(stream_);
  for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
  cudaFree(sum_partials_);
  cudaStreamDestroy(stream_);
}

void CudaBackend::refuse_while_recording(const char* what) const {
  if (recording_) {
    throw std::logic_error(std::string("CudaBackend: ") + what +
                           " while recording (it would wait for the GPU or allocate)");
  }
}

size_t CudaBackend::own_bytes() const {
  return cuda_buffers::kGemmWorkspaceBytes + scratch_.capacity() + cuda_buffers::kSumSquaresPartialsBytes;
}

// Growing moves the buffer: not while recording (it waits for the stream), and not under
// recorded graphs, which would go on using the old one.
void* CudaBackend::reserve_scratch_bytes(size_t bytes) {
  if (bytes > scratch_.capacity()) {
    refuse_while_recording("growing the scratch buffer");
    if (!graphs_.empty()) {
      throw std::logic_error("CudaBackend: the scratch buffer cannot grow under recorded graphs (drop them first)");
    }
  }
  return scratch_.reserve(bytes);
}

void* CudaBackend::alloc_zeroed(size_t bytes) {
  refuse_while_recording("an allocation");
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it, so the next launch check does not report it again
    throw_out_of_memory(bytes, device_, err);
  }
  XTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // zeroed before any other stream sees it
  allocations_[p] = bytes;
  allocated_bytes_ += bytes;
  return p;
}

float* CudaBackend::alloc_floats(size_t n) { return static_cast<float*>(alloc_zeroed(n * sizeof(float))); }
int32_t* CudaBackend::alloc_ints(size_t n) { return static_cast<int32_t*>(alloc_zeroed(n * sizeof(int32_t))); }
ActPtr CudaBackend::alloc_acts(size_t n) { return {alloc_zeroed(n * dtype_bytes(act_dtype())), act_dtype()}; }

// free and drop_recordings never throw (worker/model/backend.hpp): what they cannot do is said on
// stderr, and the memory stays allocated until the process ends.
namespace {
void report_kept(const char* what, const char* why) noexcept {
  std::fprintf(stderr, "warning: CUDA backend: %s: %s; the memory stays allocated until the process ends\n", what, why);
}
}  // namespace

void CudaBackend::free(void* p) noexcept {
  if (p == nullptr) return;
  if (recording_) return report_kept("free", "called while recording (it would wait for the GPU)");
  const cudaError_t err = cudaFree(p);
  if (err != cudaSuccess) return report_kept("cudaFree", cudaGetErrorString(err));
  const auto found = allocations_.find(p);
  if (found != allocations_.end()) {
    allocated_bytes_ -= found->second;
    allocations_.erase(found);
  }
}

void CudaBackend::wait_for_stream(const char* what) {
  if (stream_wait_) return stream_wait_(stream_, what);
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::upload_bytes(void* dst, size_t bytes, const void* plain, const std::function<void(void*)>& fill) {
  refuse_while_recording("an upload");
  if (bytes == 0) return;
  if (bytes <= PinnedStaging::kMaxBytes) {
    pinned_.use(bytes, [&](void* buffer) {
      if (plain != nullptr) {
        std::memcpy(buffer, plain, bytes);
      } else {
        fill(buffer);
      }
      XTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, buffer, bytes, cudaMemcpyHostToDevice, stream_));
    });
    return;
  }
  // Pageable: cudaMemcpyAsync returns once the source is staged, which is the interface's
  // "host_src may be reused", and lets a converted copy go at once. Such copies are whole
  // parameter sets (a bf16 model's weights at load): kept, one would hold 2 bytes a parameter
  // of host memory to the process's end.
  std::vector<std::uint8_t> converted;
  if (plain == nullptr) {
    converted.resize(bytes);
    fill(converted.data());
    plain = converted.data();
  }
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, plain, bytes, cudaMemcpyHostToDevice, stream_));
}

const void* CudaBackend::arrive(const void* src, size_t bytes, const char* what, void* pageable) {
  refuse_while_recording(what);
  const void* arrived = pageable;
  if (bytes <= PinnedStaging::kMaxBytes) {
    arrived = pinned_.use(bytes, [&](void* buffer) {
      XTRAIN_CUDA_CHECK(cudaMemcpyAsync(buffer, src, bytes, cudaMemcpyDeviceToHost, stream_));
    });
  } else {
    XTRAIN_CUDA_CHECK(cudaMemcpyAsync(pageable, src, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  wait_for_stream(what);
  return arrived;
}

void CudaBackend::download_bytes(const void* src, size_t bytes, const char* what, void* plain,
                                 const std::function<void(const void*)>& take) {
  if (bytes == 0) {
    refuse_while_recording(what);
    return;
  }
  std::vector<std::uint8_t> converted;  // a large copy's host side before conversion (as upload_bytes')
  if (plain == nullptr && bytes > PinnedStaging::kMaxBytes) converted.resize(bytes);
  const void* arrived = arrive(src, bytes, what, plain != nullptr ? plain : converted.data());
  if (plain == nullptr) {
    take(arrived);
  } else if (arrived != plain) {
    std::memcpy(plain, arrived, bytes);
  }
}

const void* CudaBackend::download_view(ConstActPtr src, size_t n) {
  const size_t bytes = n * dtype_bytes(src.dtype());
  // Past the ring's size, into a buffer of the backend's own that the next view reuses.
  if (bytes > PinnedStaging::kMaxBytes && large_view_.size() < bytes) large_view_.resize(bytes);
  return arrive(src.data(), bytes, "a download", large_view_.data());
}

void CudaBackend::upload(float* dst, const float* host_src, size_t n) {
  upload_bytes(dst, n * sizeof(float), host_src, {});
}
void CudaBackend::upload(int32_t* dst, const int32_t* host_src, size_t n) {
  upload_bytes(dst, n * sizeof(int32_t), host_src, {});
}
void CudaBackend::download(float* host_dst, const float* src, size_t n) {
  download_bytes(src, n * sizeof(float), "a download", host_dst, {});
}
void CudaBackend::download(int32_t* host_dst, const int32_t* src, size_t n) {
  download_bytes(src, n * sizeof(int32_t), "a download", host_dst, {});
}
// bf16 activations are converted on the host, with the rounding the kernels use (bit-identical
// to __float2bfloat16_rn), and cross the bus at half the size.
void CudaBackend::upload(ActPtr dst, const float* host_src, size_t n) {
  if (dst.dtype() == DType::f32) return upload(dst.as<float>(), host_src, n);
  upload_bytes(dst.data(), n * sizeof(std::uint16_t), nullptr, [=](void* buffer) {
    auto* bits = static_cast<std::uint16_t*>(buffer);
    for (size_t i = 0; i < n; ++i) bits[i] = math::bf16_bits_from_float(host_src[i]);
  });
}
void CudaBackend::download(float* host_dst, ConstActPtr src, size_t n) {
  if (src.dtype() == DType::f32) return download(host_dst, src.as<float>(), n);
  download_bytes(src.data(), n * sizeof(std::uint16_t), "a download", nullptr, [=](const void* buffer) {
    const auto* bits = static_cast<const std::uint16_t*>(buffer);
    for (size_t i = 0; i < n; ++i) host_dst[i] = math::float_from_bf16_bits(bits[i]);
  });
}
void CudaBackend::fill_zero(float* p, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), stream_));
}
void CudaBackend::fill_zero(ActPtr p, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemsetAsync(p.data(), 0, n * dtype_bytes(p.dtype()), stream_));
}
void CudaBackend::copy(float* dst, const float* src, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
}
void CudaBackend::copy(ActPtr dst, ConstActPtr src, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), n * dtype_bytes(dst.dtype()), cudaMemcpyDeviceToDevice,
                                    stream_));
}
void CudaBackend::synchronize() {
  refuse_while_recording("synchronize");
  wait_for_stream("synchronize");
}

// ---- recording ----------------------------------------------------------------------------------

void CudaBackend::begin_recording() {
  if (recording_) throw std::logic_error("CudaBackend: a recording is already under way");
  XTRAIN_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  recording_ = true;
}

// A capture that an illegal call invalidated fails here, at its end (the capture is over either
// way); the error is cleared so that the next launch check does not report it again.
int CudaBackend::end_recording() {
  if (!recording_) throw std::logic_error("CudaBackend: end_recording without begin_recording");
  recording_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = ended == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : ended;
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string(ended != cudaSuccess ? "cudaStreamEndCapture" : "cudaGraphInstantiate") +
                             ": " + cudaGetErrorName(instantiated) + " (" + cudaGetErrorString(instantiated) + ")");
  }
  graphs_.push_back(exec);
  return static_cast<int>(graphs_.size() - 1);
}

// Ends the capture, even one that an illegal call invalidated, so the stream runs work again.
void CudaBackend::abort_recording() {
  if (!recording_) return;
  recording_ = false;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();  // the capture's error is the caller's exception already
}

void CudaBackend::replay(int recording) {
  if (recording < 0 || recording >= static_cast<int>(graphs_.size()) || graphs_[recording] == nullptr) {
    throw std::logic_error("CudaBackend: no recording " + std::to_string(recording));
  }
  XTRAIN_CUDA_CHECK(cudaGraphLaunch(graphs_[recording], stream_));
}

void CudaBackend::drop_recordings() noexcept {
  if (recording_) return report_kept("drop_recordings", "called while recording");
  const cudaError_t err = cudaStreamSynchronize(stream_);  // no graph is destroyed while it runs
  if (err != cudaSuccess) return report_kept("drop_recordings", cudaGetErrorString(err));
  for (cudaGraphExec_t g : graphs_) {
    const cudaError_t destroyed = cudaGraphExecDestroy(g);
    if (destroyed != cudaSuccess) report_kept("cudaGraphExecDestroy", cudaGetErrorString(destroyed));
  }
  graphs_.clear();
}

}  // namespace xtrain::cuda
