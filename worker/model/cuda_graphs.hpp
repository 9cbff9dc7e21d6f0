// train.cuda_graph: whether the CUDA backend replays recorded layers (CUDA graphs; GPT's
// "recorded layers", worker/model/gpt.hpp) instead of launching every kernel from the host.
//   "off"   never;
//   "on"    always on CUDA (a recording that fails is an error); an error on CPU ranks;
//   "auto"  on CUDA where it pays, by the rule below; never on CPU ranks.
//
// The rule. Eager, the host issues every kernel and product of a micro-step itself: about
// kLaunchesPerLayer x L + kLaunchesOutside launches (counted from GPT's forward and backward:
// 10 per layer forward, 26 backward, 22 for the embeddings and the head), at about
// kHostMicrosPerLaunch each (cudaLaunchKernel takes 2-4 us of host time, a cuBLASLt product 5-8).
// The device meanwhile needs the micro-step's FLOPs (6N + 6LCT per token, as docs/PERF.md counts
// them) at an assumed rate of half the precision's dense peak on an H100-class GPU. Launches
// are asynchronous, so the host's time hides behind the device's unless it is comparable: auto
// replays when the host's issue time is at least kAutoShare of the device's time, where
// replaying (one launch per layer) takes that time off the step or the gaps it leaves. Below
// that share replaying gains under a few percent and auto keeps the eager path. The constants are
// estimates until measured: xtrain-bench-gpu --cuda-graph on|off times one shape both ways.
#pragma once

#include <string>

#include "common/job_spec.hpp"

namespace xtrain {

struct CudaGraphChoice {
  bool use = false;        // replay recorded layers
  bool required = false;   // "on": a failed recording is an error, not a fallback to eager
  double host_ms = 0;      // the rule's estimates for one micro-step, eager
  double device_ms = 0;
  std::string why;         // one line for the log and --dry-run
};

// Launches per micro-step, eager, and the host's cost of one (see above).
constexpr int kLaunchesPerLayer = 36;
constexpr int kLaunchesOutside = 22;
constexpr double kHostMicrosPerLaunch = 4.0;
constexpr double kAutoShare = 0.10;

// The choice for `device` ("cuda" or "cpu") at the resolved precision and the spec's micro-batch.
// Throws SpecError naming train.cuda_graph for "on" on CPU ranks.
CudaGraphChoice choose_cuda_graphs(const TrainSpec& train, const ModelSpec& model, const std::string& device,
                                   Precision precision);

}  // namespace xtrain
