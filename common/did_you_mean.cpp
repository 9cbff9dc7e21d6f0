#include "common/did_you_mean.hpp"

#include <algorithm>

namespace xtrain {

std::size_t spelling_distance(const std::string& a, const std::string& b) {
  // d[i][j]: edits from a's first i characters to b's first j; three rows suffice for the swap.
  std::vector<std::size_t> before(b.size() + 1), last(b.size() + 1), row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) last[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      row[j] = std::min({last[j] + 1, row[j - 1] + 1, last[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) row[j] = std::min(row[j], before[j - 2] + 1);
    }
    std::swap(before, last);
    std::swap(last, row);
  }
  return last[b.size()];
}

std::string closest_name(const std::string& given, const std::vector<std::string>& known, std::size_t max_edits) {
  std::string best;
  std::size_t best_edits = max_edits + 1;
  for (const std::string& name : known) {
    const std::size_t edits = spelling_distance(given, name);
    if (edits < best_edits) best_edits = edits, best = name;
  }
  return best;
}

std::size_t typo_edits(const std::string& given) { return given.size() <= 7 ? 1 : 2; }

}  // namespace xtrain
