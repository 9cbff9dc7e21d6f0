// Interpret mode: what the runtime knows of device memory, for the library emulations (cuBLASLt,
// CUB) to refuse a pointer that a GPU could not dereference, before the work runs.
#pragma once

#include <cstddef>

namespace xtrain::interp {

// True when [p, p + bytes) lies inside one live device allocation (cudaMalloc'd, not freed).
bool is_device_range(const void* p, size_t bytes);

}  // namespace xtrain::interp
