// A model file (worker/train/model_argument.hpp) loaded to run forward only (a GPT built for
// inference: no gradients, one layer's activations besides the KV cache): its weights at a
// context of T (the first T rows of wpe), on the backend of a device choice
// (worker/device/device_choice.hpp; by default the CPU in fp32), its layers recorded where the
// backend records. The one way the eval and generate commands and the device check's logits tool
// (scripts/check/logits.cpp) hold such a model.
#pragma once

#include <memory>
#include <vector>

#include "common/model_file.hpp"
#include "worker/device/device_choice.hpp"
#include "worker/formats/model_io.hpp"
#include "worker/model/gpt.hpp"
#include "worker/model/host_access.hpp"

namespace xtrain {

struct LoadedModel {
  ParamLayout layout;
  std::unique_ptr<Backend> backend;
  GPT gpt;
  // `use`: kInference (eval, the logits tool) or kDecoding (generate).
  LoadedModel(const ModelFileInfo& model, int T, int max_batch, const DeviceChoice& device = {},
              ModelUse use = ModelUse::kInference)
      : layout(ModelDims::from(spec_of(model, T))),
        backend(make_backend(device)),
        gpt(spec_of(model, T), *backend, max_batch, use) {
    // The weights are read straight into the backend's: in place on the CPU in fp32, else 4 MiB
    // at a time (on a GPU, or into the bf16 copy of a model without fp32 weights).
    gpt.load_weights([&](float* params, const HostAccess& memory) { import_model(model, layout, params, memory); });
    // On a GPU each forward of the full batch replays one CUDA graph per layer (GPT's recorded
    // layers) from its third run on, and a decoder's step one graph whole: a step is launch-bound.
    if (backend->can_record()) gpt.set_replay(GPT::Replay::kPreferred);
  }
};

}  // namespace xtrain
