#include "worker/formats/hf_model.hpp"

#include <algorithm>
#include <map>

#include "common/model_file.hpp"
#include "worker/formats/transpose.hpp"

namespace xtrain {
namespace {

constexpr const char* kPrefix = "transformer.";
constexpr const char* kLmHead = "lm_head.weight";

// The shape a parameter has in the Hugging Face file: wte without its padding rows, Conv1D
// weights (in, out).
std::vector<std::int64_t> hf_shape(const ParamLayout& layout, const ParamTensor& t) {
  if (t.offset == layout.wte()) return {layout.dims().V, layout.dims().C};
  std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
  if (t.hf_transposed) std::swap(shape[0], shape[1]);
  return shape;
}

// h.N.attn.bias and h.N.attn.masked_bias: the causal mask GPT2Attention keeps as a buffer.
bool is_mask_buffer(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return false;
  const size_t dot = name.find('.', 2);
  if (dot == std::string::npos || dot == 2) return false;
  for (size_t i = 2; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  const std::string rest = name.substr(dot);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

}  // namespace

nlohmann::json hf_config(const ModelDims& d, StoredAs stored_as) {
  nlohmann::json config = {{"architectures", {"GPT2LMHeadModel"}},
                          {"model_type", "gpt2"},
                          {"vocab_size", d.V},
                          {"n_positions", d.T},
                          {"n_ctx", d.T},
                          {"n_embd", d.C},
                          {"n_layer", d.L},
                          {"n_head", d.NH},
                          {"n_inner", nullptr},
                          {"activation_function", "gelu_new"},  // GELU, tanh approximation
                          {"layer_norm_epsilon", 1e-5},
                          {"resid_pdrop", 0.0},
                          {"embd_pdrop", 0.0},
                          {"attn_pdrop", 0.0},
                          {"tie_word_embeddings", true},
                          {"torch_dtype", stored_as == StoredAs::kBF16 ? "bfloat16" : "float32"}};
  // A byte-level model has no special token: GPT2Config's default bos and eos (50256) would name
  // one it lacks, and generate would take it for its end.
  if (d.V == kByteVocabulary) config["bos_token_id"] = config["eos_token_id"] = nullptr;
  return config;
}

FileChecksum write_hf_model(const std::string& path, const ParamLayout& layout, const float* params,
                            const HostAccess& memory, StoredAs stored_as) {
  std::vector<SafetensorsTensor> tensors;  // Conv1D weights transposed as they are written
  for (const auto& t : layout.tensors()) {
    tensors.push_back({t.name, hf_shape(layout, t), params + t.offset, t.hf_transposed, stored_as});
  }
  return write_safetensors(path, tensors, {{"format", "pt"}}, memory);  // transformers refuses files without "format"
}

HfModelReader::HfModelReader(const std::string& path, const ParamLayout& layout, std::int64_t positions)
    : file_(path), layout_(layout) {
  const ModelDims& d = layout.dims();
  std::map<std::string, const SafetensorsEntry*> by_name;  // without the prefix
  for (const auto& e : file_.tensors()) {
    const bool prefixed = e.name.rfind(kPrefix, 0) == 0;
    const std::string name = prefixed ? e.name.substr(std::string(kPrefix).size()) : e.name;
    if (is_mask_buffer(name)) continue;
    if (name == kLmHead) {
      lm_head_ = &e;
      continue;
    }
    if (!by_name.emplace(name, &e).second) {
      throw FileError(path, "tensor " + name + " appears twice, with and without the \"transformer.\" prefix");
    }
  }
  for (const auto& t : layout.tensors()) {
    const auto it = by_name.find(t.name);
    if (it == by_name.end()) throw FileError(path, "tensor " + t.name + " is missing");
    const SafetensorsEntry& e = *it->second;
    std::vector<std::int64_t> shape = hf_shape(layout, t);
    if (t.offset == layout.wpe() && e.shape.size() == 2 && e.shape[1] == d.C) {
      if (e.shape[0] != positions) {  // GPT-2 builds wpe (n_positions, n_embd) from its config
        throw FileError(path, "tensor " + e.name + " has " + std::to_string(e.shape[0]) +
                                  " rows (positions) but the model's config gives n_positions " +
                                  std::to_string(positions));
      }
      shape[0] = positions;  // the first T rows are used
    }
    entries_.push_back(&file_.get(e.name, shape));
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    throw FileError(path, "unexpected tensor " + by_name.begin()->second->name + " (not a GPT-2 parameter)");
  }
  if (lm_head_) file_.get(lm_head_->name, {d.V, d.C});
}

void HfModelReader::load(float* params, const HostAccess& memory, const RecordedChecksum* recorded) {
  const ModelDims& d = layout_.dims();
  const auto C = static_cast<size_t>(d.C);
  file_.load(recorded);
  if (lm_head_) {  // compared row by row: the whole matrix is 0.3 GB for gpt2-xl
    const SafetensorsEntry& wte = *entries_[0];  // the layout's first tensor
    std::vector<float> a(C), b(C);
    for (size_t row = 0; row < static_cast<size_t>(d.V); ++row) {
      file_.copy_elements(wte, row * C, C, a.data());
      file_.copy_elements(*lm_head_, row * C, C, b.data());
      const auto diff = std::mismatch(a.begin(), a.end(), b.begin());
      if (diff.first != a.end()) {
        throw FileError(file_.path(), "tensor " + lm_head_->name + " differs from " + wte.name + " (first at row " +
                                          std::to_string(row) + ", column " +
                                          std::to_string(diff.first - a.begin()) +
                                          "): the model ties its output layer to the token embedding, so an untied "
                                          "lm_head cannot be loaded");
      }
    }
  }
  // Nothing can fail from here on.
  std::vector<float> scratch;
  for (size_t i = 0; i < layout_.tensors().size(); ++i) {
    const ParamTensor& t = layout_.tensors()[i];
    const SafetensorsEntry& e = *entries_[i];
    float* dst = params + t.offset;
    if (t.offset == layout_.wte()) {
      const size_t real = static_cast<size_t>(d.V) * C;
      memory.fill(dst, t.count, [&](float* host, size_t offset, size_t n) {
        const size_t from_file = offset < real ? std::min(n, real - offset) : 0;
        if (from_file > 0) file_.copy_elements(e, offset, from_file, host);
        std::fill(host + from_file, host + n, 0.0f);  // the padding rows
      });
    } else if (!t.hf_transposed) {
      memory.fill(dst, t.count, [&](float* host, size_t offset, size_t n) {
        file_.copy_elements(e, offset, n, host);  // wpe: its first T rows
      });
    } else {
      scratch.resize(t.count);
      file_.copy_elements(e, 0, t.count, scratch.data());
      memory.fill_whole(dst, t.count, [&](float* host) {
        const auto rows = static_cast<size_t>(t.shape[1]), cols = static_cast<size_t>(t.shape[0]);
        transpose(scratch.data(), rows, cols, cols, host, rows);  // the file's (in, out) -> (out, in)
      });
    }
  }
}

}  // namespace xtrain
