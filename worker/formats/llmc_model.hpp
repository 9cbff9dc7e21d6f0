// llm.c's model file (train_gpt2.py's write_model writes it, train_gpt2.c/.cu read it):
//   header: 256 int32 [magic 20240326, version, maxT, V, L, NH, C, Vp, 0...]
//   then every parameter, tensor by tensor, each tensor across all layers:
//     wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C),
//     attprojw (L, C, C), attprojb (L, C), ln2w (L, C), ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
//     fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C)
//   all fp32 (version 3) or all bf16 (version 5); wte's padding rows V..Vp-1 are zero.
// Weights are (out, in) there as here; only the grouping differs (llm.c groups by tensor kind,
// our flat buffer by layer), so export and import are a reordering of spans. The header is read
// by common/model_file.hpp, which also checks the file's size against it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/model_file.hpp"
#include "worker/model/host_access.hpp"
#include "worker/model/param_layout.hpp"

namespace xtrain {

// Our parameter spans in the order llm.c stores them (wte with all Vp rows).
std::vector<Span> llmc_parameter_order(const ParamLayout& layout);

// Writes `params` (layout.total() floats) atomically (temporary name, fsync, rename), as
// version kLlmcVersionFp32 or kLlmcVersionBf16 (rounded to nearest even, as PyTorch does).
void export_llmc_model(const std::string& path, const ParamLayout& layout, const float* params,
                       int version = kLlmcVersionFp32);

// Reads the llm.c model file `file` (either version; its header checked by read_model_file_info)
// into `params` (layout.total() floats in `memory`), whose shape import_model
// (worker/formats/model_io.hpp) has checked against the header: the first T rows of wpe are taken,
// the file's own padding rows are never read and ours are set to zero.
void import_llmc_model(const ModelFileInfo& file, const ParamLayout& layout, float* params,
                       const HostAccess& memory = {});

}  // namespace xtrain
