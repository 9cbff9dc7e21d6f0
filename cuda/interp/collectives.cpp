// The warp shuffles and votes of device_builtins.hpp, computed once every lane of the mask is
// there (block_run.cpp calls them). Sources per the CUDA Programming Guide, "Warp Shuffle
// Functions" and "Warp Vote Functions".
#include <cstring>
#include <string>

#include "cuda/interp/device_builtins.hpp"

namespace xtrain::interp {
namespace {

bool width_ok(int width) { return width >= 1 && width <= 32 && (width & (width - 1)) == 0; }

// Every lane of the mask gets lane source(lane)'s value; reading a lane that takes no part is
// undefined on a GPU, so it is a fault here.
template <class Source>
std::string shuffle(WarpLanes& w, Source source) {
  for (int lane = 0; lane < 32; ++lane) {
    if (!(w.mask >> lane & 1u)) continue;
    if (!width_ok(w.width[lane])) return "width " + std::to_string(w.width[lane]) + " is not a power of two up to 32";
    const int src = source(lane, w.arg[lane], w.width[lane]);
    if (!(w.mask >> src & 1u)) {
      return "lane " + std::to_string(lane) + " reads lane " + std::to_string(src) + ", which takes no part (mask)";
    }
    std::memcpy(w.out[lane], w.in[src], w.in_bytes);
  }
  return {};
}

unsigned ballot(const WarpLanes& w) {
  unsigned bits = 0;
  for (int lane = 0; lane < 32; ++lane) {
    int p = 0;
    if (w.mask >> lane & 1u) std::memcpy(&p, w.in[lane], sizeof p);
    if (p != 0) bits |= 1u << lane;
  }
  return bits;
}

std::string vote(WarpLanes& w, unsigned result) {
  for (int lane = 0; lane < 32; ++lane) {
    if (w.mask >> lane & 1u) std::memcpy(w.out[lane], &result, sizeof result);
  }
  return {};
}

}  // namespace

std::string shuffle_combine_index(WarpLanes& w) {
  return shuffle(w, [](int lane, int src, int width) { return (lane & ~(width - 1)) + (src % width + width) % width; });
}
std::string shuffle_combine_up(WarpLanes& w) {
  return shuffle(w, [](int lane, int delta, int width) { return lane % width - delta >= 0 ? lane - delta : lane; });
}
std::string shuffle_combine_down(WarpLanes& w) {
  return shuffle(w, [](int lane, int delta, int width) { return lane % width + delta < width ? lane + delta : lane; });
}
std::string shuffle_combine_xor(WarpLanes& w) {
  // A lane of a later subsection is out of reach: the lane keeps its own value.
  return shuffle(w, [](int lane, int lane_mask, int width) {
    const int src = lane ^ lane_mask;
    return src / width > lane / width || src > 31 ? lane : src;
  });
}
std::string vote_combine_all(WarpLanes& w) { return vote(w, ballot(w) == w.mask ? 1u : 0u); }
std::string vote_combine_any(WarpLanes& w) { return vote(w, ballot(w) != 0 ? 1u : 0u); }
std::string vote_combine_ballot(WarpLanes& w) { return vote(w, ballot(w)); }

}  // namespace xtrain::interp
