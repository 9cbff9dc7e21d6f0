// Where every parameter lives in the one flat parameter buffer (and, at the same offsets, in the
// gradient buffer and the AdamW moment buffers).
//
// Order: [wte (Vp,C)] [wpe (T,C)] [lnf_w (C)] [lnf_b (C)] then one block per layer l = 0..L-1:
//   ln1_w (C), ln1_b (C), qkv_w (3C,C), qkv_b (3C), attn_proj_w (C,C), attn_proj_b (C),
//   ln2_w (C), ln2_b (C), fc_w (4C,C), fc_b (4C), fc_proj_w (C,4C), fc_proj_b (C)
// so each layer's gradients form one contiguous span (one gradient bucket), and the tensors that
// are only complete at the very end of backward (wte, wpe, lnf) form one more, the first span.
// Weights are stored (out, in) row-major, like llm.c; Hugging Face's Conv1D stores (in, out).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/job_spec.hpp"

namespace xtrain {

struct ModelDims {
  int L = 0;   // layers
  int NH = 0;  // heads
  int C = 0;   // channels
  int T = 0;   // max sequence length
  int V = 0;   // vocabulary
  int Vp = 0;  // vocabulary padded to a multiple of 128

  static ModelDims from(const ModelSpec& m);
};

struct ParamTensor {
  std::string name;            // Hugging Face GPT-2 name, e.g. "h.3.attn.c_attn.weight"
  std::vector<long> shape;     // our shape, (out, in) for weights
  size_t offset = 0;           // into the flat buffer, in floats
  size_t count = 0;
  int layer = -1;              // -1: embeddings and final layernorm
  bool decay = false;          // AdamW weight decay applies (2-D weights only)
  bool hf_transposed = false;  // stored transposed in Hugging Face's Conv1D layout
};

struct LayerOffsets {
  size_t ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
  size_t ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
};

struct Span {
  size_t offset = 0;  // floats
  size_t count = 0;
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelDims& d);

  const ModelDims& dims() const { return dims_; }
  size_t total() const { return total_; }                       // floats in the flat buffer
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ParamTensor& find(const std::string& name) const;       // throws std::out_of_range

  size_t wte() const { return wte_; }     // (Vp, C)
  size_t wpe() const { return wpe_; }     // (T, C)
  size_t lnf_w() const { return lnf_w_; } // (C)
  size_t lnf_b() const { return lnf_b_; } // (C)
  const LayerOffsets& layer(int l) const { return layers_[static_cast<size_t>(l)]; }

  Span layer_span(int l) const;           // all of layer l's parameters
  Span embedding_span() const;            // wte, wpe, lnf_w, lnf_b

 private:
  ModelDims dims_;
  size_t total_ = 0;
  size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  std::vector<LayerOffsets> layers_;
  std::vector<ParamTensor> tensors_;
};

}  // namespace xtrain
