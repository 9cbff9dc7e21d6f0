#include "worker/model/weight_init.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string_view>
#include <thread>
#include <vector>

namespace xtrain {
namespace {

// The pair of normals from draws u1, u2 in (0, 1]: r cos(a) and r sin(a).
struct NormalPair {
  double cosine, sine;
};
NormalPair box_muller(double u1, double u2) {
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 2.0 * std::numbers::pi * u2;
  return {r * std::cos(a), r * std::sin(a)};
}

}  // namespace

void NormalStream::fill(float* out, size_t n, float scale, int threads, size_t chunk_pairs) {
  size_t i = 0;
  if (n > 0 && has_spare_) {
    out[i++] = scale * static_cast<float>(spare_);
    has_spare_ = false;
  }
  std::vector<double> draws;  // (2 x pairs of a chunk) the engine's, in order
  const size_t members = static_cast<size_t>(std::max(threads, 1));
  while (n - i >= 2) {
    const size_t pairs = std::min(chunk_pairs, (n - i) / 2);
    draws.resize(2 * pairs);
    for (double& u : draws) u = uniform_open();
    float* const at = out + i;
    const auto transform = [&](size_t member) {
      for (size_t p = pairs * member / members; p < pairs * (member + 1) / members; ++p) {
        const NormalPair z = box_muller(draws[2 * p], draws[2 * p + 1]);
        at[2 * p] = scale * static_cast<float>(z.cosine);
        at[2 * p + 1] = scale * static_cast<float>(z.sine);
      }
    };
    // Threads only where a chunk is worth their start (a few tens of microseconds each).
    const size_t helpers = pairs >= 4096 ? members - 1 : 0;
    std::vector<std::thread> started;
    for (size_t m = 1; m <= helpers; ++m) started.emplace_back(transform, m);
    if (helpers == 0) {
      for (size_t m = 0; m < members; ++m) transform(m);
    } else {
      transform(0);
    }
    for (std::thread& t : started) t.join();
    i += 2 * pairs;
  }
  if (i < n) {  // an odd sample left: the cosine now, the sine for the next call
    const double u1 = uniform_open();
    const NormalPair z = box_muller(u1, uniform_open());
    out[i] = scale * static_cast<float>(z.cosine);
    spare_ = z.sine;
    has_spare_ = true;
  }
}

void draw_initial_weights(const ParamLayout& layout, std::int64_t seed, float* out, int threads,
                          const HostAccess& memory) {
  const ModelDims& d = layout.dims();
  NormalStream normal(seed);
  const float std_dev = 0.02f;
  const float residual_std = std_dev / std::sqrt(2.0f * static_cast<float>(d.L));
  // Every tensor whole, in order (together they are the flat buffer): its normals first, then the
  // value of the rest. The stream runs on across the pieces as across one buffer.
  for (const ParamTensor& t : layout.tensors()) {
    const std::string_view name = t.name;
    // wte's padded rows (V..Vp-1) stay zero: they never see a token and never get gradient.
    const size_t normals = t.shape.size() != 2         ? 0
                           : t.offset == layout.wte() ? static_cast<size_t>(d.V) * d.C
                                                      : t.count;
    const float scale = name.ends_with("c_proj.weight") ? residual_std : std_dev;
    const float rest = t.shape.size() == 1 && name.ends_with(".weight") ? 1.0f : 0.0f;  // layernorm gains; biases
    memory.fill(out + t.offset, t.count, [&](float* host, size_t offset, size_t n) {
      const size_t drawn = offset < normals ? std::min(n, normals - offset) : 0;
      normal.fill(host, drawn, scale, threads);
      std::fill(host + drawn, host + n, rest);
    });
  }
}

}  // namespace xtrain
