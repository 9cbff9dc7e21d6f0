#include "worker/llmc_model.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "worker/file_io.hpp"

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

void export_llmc_model(const std::string& path, const ParamLayout& layout, const float* params) {
  const ModelDims& d = layout.dims();
  std::array<std::int32_t, 256> header{};
  header[0] = kLlmcModelMagic;
  header[1] = kLlmcModelVersion;
  header[2] = d.T;
  header[3] = d.V;
  header[4] = d.L;
  header[5] = d.NH;
  header[6] = d.C;
  header[7] = d.Vp;
  write_file_atomically(path, [&](OutputFile& out) {
    out.write(header.data(), sizeof header);
    for (const Span& s : llmc_parameter_order(layout)) out.write(params + s.offset, s.count * sizeof(float));
  });
}

void import_llmc_model(const std::string& path, const ParamLayout& layout, float* params) {
  const ModelDims& d = layout.dims();
  InputFile in(path);
  if (in.size() < kLlmcHeaderBytes) {
    throw FileError(path, "truncated: " + std::to_string(in.size()) + " bytes, less than the llm.c model header (" +
                              std::to_string(kLlmcHeaderBytes) + ")");
  }
  std::array<std::int32_t, 256> header{};
  in.read_at(0, header.data(), sizeof header);
  if (header[0] != kLlmcModelMagic) {
    throw FileError(path, "not an llm.c model file: magic is " + std::to_string(header[0]) + ", expected " +
                              std::to_string(kLlmcModelMagic));
  }
  if (header[1] != kLlmcModelVersion) {
    throw FileError(path, "llm.c model file version is " + std::to_string(header[1]) + ", expected " +
                              std::to_string(kLlmcModelVersion) + " (fp32)");
  }
  const struct {
    int file;
    int ours;
    const char* field;
  } dims[] = {{header[2], d.T, "model.seq_len"},
              {header[3], d.V, "model.vocab_size"},
              {header[4], d.L, "model.n_layer"},
              {header[5], d.NH, "model.n_head"},
              {header[6], d.C, "model.n_embd"}};
  for (const auto& x : dims) {
    if (x.file != x.ours) {
      throw FileError(path, "the file has " + std::string(x.field) + " " + std::to_string(x.file) +
                                " but the spec says " + std::to_string(x.ours));
    }
  }
  const int file_Vp = header[7];
  if (file_Vp < d.V) {
    throw FileError(path, "padded vocabulary " + std::to_string(file_Vp) + " is smaller than the vocabulary " +
                              std::to_string(d.V));
  }
  const auto C = static_cast<size_t>(d.C);
  const std::vector<Span> order = llmc_parameter_order(layout);
  const size_t file_wte = static_cast<size_t>(file_Vp) * C;
  size_t file_total = file_wte;
  for (size_t i = 1; i < order.size(); ++i) file_total += order[i].count;
  const std::uint64_t expected = kLlmcHeaderBytes + file_total * sizeof(float);
  if (in.size() != expected) {
    throw FileError(path, "size is " + std::to_string(in.size()) + " bytes but its header's shape needs " +
                              std::to_string(expected));
  }
  std::vector<float> file(file_total);  // (file order)
  in.read_at(kLlmcHeaderBytes, file.data(), file_total * sizeof(float));

  // Nothing can fail from here on: scatter into params.
  const size_t rows = file_Vp == d.Vp ? static_cast<size_t>(d.Vp) : static_cast<size_t>(d.V);
  std::memcpy(params + layout.wte(), file.data(), rows * C * sizeof(float));
  std::fill(params + layout.wte() + rows * C, params + layout.wte() + order[0].count, 0.0f);
  size_t at = file_wte;
  for (size_t i = 1; i < order.size(); ++i) {
    std::memcpy(params + order[i].offset, file.data() + at, order[i].count * sizeof(float));
    at += order[i].count;
  }
}

}  // namespace xtrain
