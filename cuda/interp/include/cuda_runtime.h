// Interpret mode (cuda/interp/): what nvcc's cuda_runtime.h gives a .cu file: the runtime API and
// the device side (thread indices, barriers, warp collectives, shared memory, atomics).
#pragma once

#include "cuda_runtime_api.h"
#include "cuda/interp/device_builtins.hpp"
