#include "worker/model/param_layout.hpp"

#include <stdexcept>

namespace xtrain {

ModelDims ModelDims::from(const ModelSpec& m) {
  ModelDims d;
  d.L = m.n_layer;
  d.NH = m.n_head;
  d.C = m.n_embd;
  d.T = m.seq_len;
  d.V = m.vocab_size;
  d.Vp = (m.vocab_size + 127) / 128 * 128;
  return d;
}

ParamLayout::ParamLayout(const ModelDims& d) : dims_(d) {
  const long C = d.C;
  auto add = [&](std::string name, std::vector<long> shape, int layer, bool hf_transposed) {
    ParamTensor t;
    t.name = std::move(name);
    t.count = 1;
    for (long s : shape) t.count *= static_cast<size_t>(s);
    t.shape = std::move(shape);
    t.offset = total_;
    t.layer = layer;
    t.decay = t.shape.size() == 2;
    t.hf_transposed = hf_transposed;
    total_ += t.count;
    tensors_.push_back(std::move(t));
    return tensors_.back().offset;
  };
  wte_ = add("wte.weight", {d.Vp, C}, -1, false);
  wpe_ = add("wpe.weight", {d.T, C}, -1, false);
  lnf_w_ = add("ln_f.weight", {C}, -1, false);
  lnf_b_ = add("ln_f.bias", {C}, -1, false);
  for (int l = 0; l < d.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    LayerOffsets o{};
    o.ln1_w = add(h + "ln_1.weight", {C}, l, false);
    o.ln1_b = add(h + "ln_1.bias", {C}, l, false);
    o.qkv_w = add(h + "attn.c_attn.weight", {3 * C, C}, l, true);
    o.qkv_b = add(h + "attn.c_attn.bias", {3 * C}, l, false);
    o.attn_proj_w = add(h + "attn.c_proj.weight", {C, C}, l, true);
    o.attn_proj_b = add(h + "attn.c_proj.bias", {C}, l, false);
    o.ln2_w = add(h + "ln_2.weight", {C}, l, false);
    o.ln2_b = add(h + "ln_2.bias", {C}, l, false);
    o.fc_w = add(h + "mlp.c_fc.weight", {4 * C, C}, l, true);
    o.fc_b = add(h + "mlp.c_fc.bias", {4 * C}, l, false);
    o.fc_proj_w = add(h + "mlp.c_proj.weight", {C, 4 * C}, l, true);
    o.fc_proj_b = add(h + "mlp.c_proj.bias", {C}, l, false);
    layers_.push_back(o);
  }
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return t;
  }
  throw std::out_of_range("no parameter named " + name);
}

Span ParamLayout::layer_span(int l) const {
  const size_t begin = layers_.at(static_cast<size_t>(l)).ln1_w;
  const size_t end = l + 1 < dims_.L ? layers_[static_cast<size_t>(l) + 1].ln1_w : total_;
  return {begin, end - begin};
}

Span ParamLayout::embedding_span() const { return {wte_, lnf_b_ + static_cast<size_t>(dims_.C) - wte_}; }

}  // namespace xtrain
