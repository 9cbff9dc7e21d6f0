// The repacked weights of inference: packing keeps every row (read back as it was), and the
// product equals a plain double-precision one, with the same bits for a position whether it is
// alone or one of several, or whether its rows were split into parts (as the decoder's threads
// split them); for shapes whose rows and columns are not multiples of the groups.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "worker/cpu/packed_matmul.hpp"
#include "worker/cpu/thread_team.hpp"

using namespace xtrain;

TEST_CASE("Packed products equal the plain ones, alone or several positions at a time", "[packed]") {
  for (const auto& [rows, cols] : {std::pair{8, 16}, std::pair{13, 21}, std::pair{3, 5}, std::pair{64, 768}}) {
    INFO(rows << " x " << cols);
    std::mt19937 rng(static_cast<unsigned>(rows * cols));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> W(static_cast<size_t>(rows) * cols), x(static_cast<size_t>(3) * cols);
    for (auto& v : W) v = normal(rng);
    for (auto& v : x) v = normal(rng);
    std::vector<float> packed = W, scratch;
    pack_rows(packed.data(), rows, cols, scratch);
    if (rows >= 4) CHECK(packed != W);  // something moved

    std::vector<float> row(static_cast<size_t>(cols));
    for (int r = 0; r < rows; ++r) {
      packed_row(row.data(), packed.data(), r, rows, cols);
      CHECK(std::memcmp(row.data(), W.data() + static_cast<size_t>(r) * cols, cols * sizeof(float)) == 0);
    }

    std::vector<float> several(static_cast<size_t>(3) * rows, 1.0f);
    packed_matmul_accumulate(several.data(), packed.data(), x.data(), 3, rows, cols);
    for (int i = 0; i < 3; ++i) {
      std::vector<float> alone(static_cast<size_t>(rows), 1.0f);
      packed_matmul_accumulate(alone.data(), packed.data(), x.data() + static_cast<size_t>(i) * cols, 1, rows, cols);
      CHECK(std::memcmp(alone.data(), several.data() + static_cast<size_t>(i) * rows, rows * sizeof(float)) == 0);
      for (int r = 0; r < rows; ++r) {
        double dot = 1.0;
        for (int c = 0; c < cols; ++c) dot += static_cast<double>(W[static_cast<size_t>(r) * cols + c]) * x[static_cast<size_t>(i) * cols + c];
        CHECK(alone[static_cast<size_t>(r)] == Approx(dot).margin(1e-4 * std::sqrt(static_cast<double>(cols))));
      }
    }

    // Split by rows over 1 to 6 members (more members than groups of four leaves some empty).
    for (int members = 1; members <= 6; ++members) {
      INFO(members << " parts");
      std::vector<float> parts(static_cast<size_t>(3) * rows, 1.0f);
      ThreadTeam team(members);
      std::mutex m;
      std::vector<std::pair<size_t, size_t>> shares;  // as the decoder splits a product
      team.split(static_cast<size_t>(rows), kPackedRowGroup, kPackedRowGroup, [&](size_t first, size_t last) {
        const std::lock_guard<std::mutex> lock(m);
        shares.emplace_back(first, last);
      });
      std::sort(shares.begin(), shares.end());
      int next = 0;
      for (const auto& [first, last] : shares) {
        const TeamShare share{static_cast<int>(first), static_cast<int>(last)};
        CHECK(share.first == next);
        CHECK((share.first % 4 == 0 && (share.last % 4 == 0 || share.last == rows)));
        next = share.last;
        packed_matmul_accumulate_rows(parts.data(), packed.data(), x.data(), 3, rows, cols, share.first, share.last);
      }
      CHECK(next == rows);
      CHECK(std::memcmp(parts.data(), several.data(), parts.size() * sizeof(float)) == 0);
    }
  }
}
