#include "worker/model/cuda_graphs.hpp"

#include <cmath>
#include <cstdio>

#include "common/number_format.hpp"
#include "worker/model/param_layout.hpp"

namespace xtrain {
namespace {

// Half of an H100/H200's dense peak per precision (bf16 989, tf32 495, fp32 67 TFLOP/s): what a
// well-shaped step reaches, the device's side of the rule.
double assumed_tflops(Precision p) { return p == Precision::bf16 ? 495.0 : p == Precision::tf32 ? 247.0 : 33.0; }

// "38.35 ms", "0.15 ms", "13.7 us", "0.0137 us": a small model's device time stays readable.
std::string time_text(double ms) {
  char text[32];
  if (ms >= 0.1) {
    std::snprintf(text, sizeof text, "%.2f ms", ms);
  } else {
    std::snprintf(text, sizeof text, "%.3g us", ms * 1000.0);
  }
  return text;
}

// "13.16 TFLOP", "53.7 GFLOP", "6.76 MFLOP"
std::string work_text(double flops) {
  char text[32];
  const char* unit = flops >= 1e12 ? "TFLOP" : flops >= 1e9 ? "GFLOP" : "MFLOP";
  std::snprintf(text, sizeof text, "%.3g %s", flops / (flops >= 1e12 ? 1e12 : flops >= 1e9 ? 1e9 : 1e6), unit);
  return text;
}

// The host's issue time against the device's: "12.5% of", "3.2 times", "27,539 times".
std::string ratio_text(double host_ms, double device_ms) {
  const double ratio = host_ms / device_ms;
  char text[32];
  if (ratio < 1.0) {
    std::snprintf(text, sizeof text, "%.1f%% of", 100.0 * ratio);
  } else if (ratio < 10.0) {
    std::snprintf(text, sizeof text, "%.1f times", ratio);
  } else {
    return with_thousands(std::llround(ratio)) + " times";
  }
  return text;
}

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
  char peak[64];
  std::snprintf(peak, sizeof peak, " take on the device at %.0f TFLOP/s %s", assumed_tflops(precision),
                precision_name(precision));
  const std::string estimate = "a micro-step's ~" + std::to_string(launches) + " launches take ~" +
                               time_text(c.host_ms) + " to issue, " + ratio_text(c.host_ms, c.device_ms) + " the ~" +
                               time_text(c.device_ms) + " its " + work_text(flops) + peak;
  if (train.cuda_graph == "auto") {
    c.why = std::string(c.use ? "on" : "off") + " (auto: " + estimate + (pays ? ", at least " : ", under ") +
            std::to_string(static_cast<int>(kAutoShare * 100)) + "%)";
  } else {
    c.why = train.cuda_graph + " (train.cuda_graph; " + estimate + ")";
  }
  return c;
}

}  // namespace xtrain
