// "Did you mean" for a name nobody knows (a spec key, a command-line option, a subcommand): the
// known name closest in spelling, counting a swap of two neighbouring letters as one edit, as a
// typist makes them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace xtrain {

// Edits between a and b: insertions, deletions, substitutions and swaps of neighbours (the
// optimal string alignment distance).
std::size_t spelling_distance(const std::string& a, const std::string& b);

// The first of `known` closest to `given`, when at most `max_edits` away; else "".
std::string closest_name(const std::string& given, const std::vector<std::string>& known, std::size_t max_edits);

// For a command-line word: at most one edit for a short one (7 characters or fewer: "--foo" is not
// a typo of "--job"), two for a longer one.
std::size_t typo_edits(const std::string& given);

}  // namespace xtrain
