#include "worker/model/cuda_graphs.hpp"

#include <cstdio>

#include "worker/model/param_layout.hpp"

namespace xtrain {
namespace {

// Half of an H100/H200's dense peak per precision (bf16 989, tf32 495, fp32 67 TFLOP/s): what a
// well-shaped step reaches, the device's side of the rule.
double assumed_tflops(Precision p) { return p == Precision::bf16 ? 495.0 : p == Precision::tf32 ? 247.0 : 33.0; }

}  // namespace

CudaGraphChoice choose_cuda_graphs(const TrainSpec& train, const ModelSpec& model, const std::string& device,
                                   Precision precision) {
  CudaGraphChoice c;
  if (device != "cuda") {
    if (train.cuda_graph == "on") {
      throw SpecError("train.cuda_graph", "\"on\" records CUDA graphs, and this job runs on CPU ranks; use \"auto\" "
                                          "or \"off\"");
    }
    c.why = "off (CPU ranks)";
    return c;
  }
  const ModelDims d = ModelDims::from(model);
  const double params = static_cast<double>(ParamLayout(d).total()) - static_cast<double>(d.Vp - d.V) * d.C;
  const double tokens = static_cast<double>(train.micro_batch_size) * d.T;
  const double flops = tokens * (6.0 * params + 6.0 * d.L * d.C * d.T);
  const int launches = kLaunchesPerLayer * d.L + kLaunchesOutside;
  c.host_ms = launches * kHostMicrosPerLaunch / 1000.0;
  c.device_ms = flops / (assumed_tflops(precision) * 1e12) * 1000.0;
  c.required = train.cuda_graph == "on";
  const bool pays = c.host_ms >= kAutoShare * c.device_ms;
  c.use = train.cuda_graph == "on" || (train.cuda_graph == "auto" && pays);
  char estimate[200];
  std::snprintf(estimate, sizeof estimate,
                "a micro-step's ~%d launches take ~%.2f ms to issue, %.1f%% of the ~%.2f ms its %.3g TFLOP take on "
                "the device at %.0f TFLOP/s %s",
                launches, c.host_ms, 100.0 * c.host_ms / c.device_ms, c.device_ms, flops / 1e12,
                assumed_tflops(precision), precision_name(precision));
  if (train.cuda_graph == "auto") {
    c.why = std::string(c.use ? "on" : "off") + " (auto: " + estimate + (pays ? ", at least " : ", under ") +
            std::to_string(static_cast<int>(kAutoShare * 100)) + "%)";
  } else {
    c.why = train.cuda_graph + " (train.cuda_graph; " + estimate + ")";
  }
  return c;
}

}  // namespace xtrain
