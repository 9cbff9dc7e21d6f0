#include "worker/formats/llmc_model.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>

#include "common/atomic_file.hpp"
#include "worker/formats/file_io.hpp"
#include "worker/formats/float16.hpp"

namespace xtrain {
namespace {

// llm.c's per-layer tensors in its file order, with each one's size in units of C (and C*C).
struct LayerTensor {
  size_t LayerOffsets::*offset;
  size_t c_factor;  // count = c_factor * C, times C again when `matrix`
  bool matrix;
};
constexpr std::array<LayerTensor, 12> kLayerOrder{{
    {&LayerOffsets::ln1_w, 1, false},        // ln1w (L, C)
    {&LayerOffsets::ln1_b, 1, false},        // ln1b (L, C)
    {&LayerOffsets::qkv_w, 3, true},         // qkvw (L, 3C, C)
    {&LayerOffsets::qkv_b, 3, false},        // qkvb (L, 3C)
    {&LayerOffsets::attn_proj_w, 1, true},   // attprojw (L, C, C)
    {&LayerOffsets::attn_proj_b, 1, false},  // attprojb (L, C)
    {&LayerOffsets::ln2_w, 1, false},        // ln2w (L, C)
    {&LayerOffsets::ln2_b, 1, false},        // ln2b (L, C)
    {&LayerOffsets::fc_w, 4, true},          // fcw (L, 4C, C)
    {&LayerOffsets::fc_b, 4, false},         // fcb (L, 4C)
    {&LayerOffsets::fc_proj_w, 4, true},     // fcprojw (L, C, 4C)
    {&LayerOffsets::fc_proj_b, 1, false},    // fcprojb (L, C)
}};

void write_bf16(OutputFile& out, const float* data, size_t count) {
  std::array<std::uint16_t, 4096> chunk;
  for (size_t at = 0; at < count; at += chunk.size()) {
    const size_t n = std::min(chunk.size(), count - at);
    for (size_t i = 0; i < n; ++i) chunk[i] = float_to_bf16(data[at + i]);
    out.write(chunk.data(), n * sizeof(std::uint16_t));
  }
}

void read_bf16(const std::uint8_t* data, size_t count, float* out) {
  for (size_t i = 0; i < count; ++i) {
    std::uint16_t h;
    std::memcpy(&h, data + 2 * i, 2);
    out[i] = bf16_to_float(h);
  }
}

}  // namespace

std::vector<Span> llmc_parameter_order(const ParamLayout& layout) {
  const ModelDims& d = layout.dims();
  const auto C = static_cast<size_t>(d.C);
  std::vector<Span> order;
  order.push_back({layout.wte(), static_cast<size_t>(d.Vp) * C});  // (Vp, C)
  order.push_back({layout.wpe(), static_cast<size_t>(d.T) * C});   // (maxT, C)
  for (const auto& t : kLayerOrder) {
    const size_t count = t.c_factor * C * (t.matrix ? C : 1);
    for (int l = 0; l < d.L; ++l) order.push_back({layout.layer(l).*t.offset, count});
  }
  order.push_back({layout.lnf_w(), C});
  order.push_back({layout.lnf_b(), C});
  return order;
}

void export_llmc_model(const std::string& path, const ParamLayout& layout, const float* params, int version) {
  if (version != kLlmcVersionFp32 && version != kLlmcVersionBf16) {
    throw std::invalid_argument("export_llmc_model: version " + std::to_string(version) + " is neither 3 nor 5");
  }
  const ModelDims& d = layout.dims();
  std::array<std::int32_t, 256> header{};
  header[0] = kLlmcModelMagic;
  header[1] = version;
  header[2] = d.T;
  header[3] = d.V;
  header[4] = d.L;
  header[5] = d.NH;
  header[6] = d.C;
  header[7] = d.Vp;
  write_file_atomically(path, [&](OutputFile& out) {
    out.write(header.data(), sizeof header);
    for (const Span& s : llmc_parameter_order(layout)) {
      if (version == kLlmcVersionFp32) {
        out.write(params + s.offset, s.count * sizeof(float));
      } else {
        write_bf16(out, params + s.offset, s.count);
      }
    }
  });
}

void import_llmc_model(const ModelFileInfo& file, const ParamLayout& layout, float* params,
                       const HostAccess& memory) {
  const ModelDims& d = layout.dims();
  const std::string& path = file.weights;
  const MappedFile mapped(path);
  const size_t element = file.llmc_version == kLlmcVersionFp32 ? sizeof(float) : sizeof(std::uint16_t);
  const std::uint8_t* at = mapped.data() + kLlmcHeaderBytes;
  const auto C = static_cast<size_t>(d.C);
  const std::vector<Span> order = llmc_parameter_order(layout);
  // wte and wpe may have more rows in the file (its Vp, its maxT) than we take (V, T).
  const auto in_file = [&](size_t i) {
    return i == 0 ? static_cast<size_t>(file.llmc_padded_vocab) * C
           : i == 1 ? static_cast<size_t>(file.n_positions) * C
                    : order[i].count;
  };
  std::uint64_t bytes = kLlmcHeaderBytes;
  for (size_t i = 0; i < order.size(); ++i) bytes += in_file(i) * element;
  if (mapped.size() != bytes) throw FileError(path, "changed size while being read");
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t take = i == 0 ? static_cast<size_t>(d.V) * C : order[i].count;
    memory.fill(params + order[i].offset, order[i].count, [&](float* host, size_t offset, size_t n) {
      const size_t from_file = offset < take ? std::min(n, take - offset) : 0;
      if (from_file > 0 && element == sizeof(float)) {
        std::memcpy(host, at + offset * element, from_file * sizeof(float));
      } else if (from_file > 0) {
        read_bf16(at + offset * element, from_file, host);
      }
      std::fill(host + from_file, host + n, 0.0f);  // our padding rows (of wte)
    });
    at += in_file(i) * element;
  }
}

}  // namespace xtrain
