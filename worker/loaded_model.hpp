// A model file (worker/train/model_argument.hpp) loaded for scoring: its weights at a context of T
// (the first T rows of wpe), on the CPU in fp32. The eval command's and the device check's logits
// tool's (scripts/check/logits.cpp) one way of holding a model they only run forward.
#pragma once

#include <vector>

#include "common/model_file.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/formats/model_io.hpp"
#include "worker/model/gpt.hpp"

namespace xtrain {

struct LoadedModel {
  ParamLayout layout;
  CpuBackend backend{Precision::fp32};
  GPT gpt;
  LoadedModel(const ModelFileInfo& model, int T, int max_batch)
      : layout(ModelDims::from(spec_of(model, T))), gpt(spec_of(model, T), backend, max_batch) {
    std::vector<float> params(layout.total());
    import_model(model, layout, params.data());
    gpt.set_params(params.data());
  }
};

}  // namespace xtrain
