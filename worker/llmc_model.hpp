// llm.c's fp32 model file (train_gpt2.c's gpt2_build_from_checkpoint reads it):
//   header: 256 int32 [magic 20240326, version 3, maxT, V, L, NH, C, Vp, 0...]
//   then every parameter as fp32, tensor by tensor, each tensor across all layers:
//     wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C),
//     attprojw (L, C, C), attprojb (L, C), ln2w (L, C), ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
//     fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C)
// Weights are (out, in) there as here; only the grouping differs (llm.c groups by tensor kind,
// our flat buffer by layer), so export and import are a reordering of spans.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/param_layout.hpp"

namespace xtrain {

inline constexpr std::int32_t kLlmcModelMagic = 20240326;
inline constexpr std::int32_t kLlmcModelVersion = 3;  // fp32 (llm.c's version 5 is bf16)
inline constexpr std::uint64_t kLlmcHeaderBytes = 256 * sizeof(std::int32_t);

// Our parameter spans in the order llm.c stores them (wte with all Vp rows).
std::vector<Span> llmc_parameter_order(const ParamLayout& layout);

// Writes `params` (layout.total() floats) atomically (temporary name, fsync, rename).
void export_llmc_model(const std::string& path, const ParamLayout& layout, const float* params);

// Reads a model file whose shape matches `layout` into `params`; throws FileError naming the file
// and the mismatch. `params` is untouched unless the whole file was read. A file padded to a
// different Vp is accepted: its V real rows are taken and our padding rows set to zero.
void import_llmc_model(const std::string& path, const ParamLayout& layout, float* params);

}  // namespace xtrain
