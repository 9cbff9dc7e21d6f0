// Crash-safe file output: write to a temporary name in the same directory, fsync, rename, fsync
// the directory. A reader sees the old file or the new one, never a half-written one.
#pragma once

#include <string>
#include <string_view>

namespace xtrain {

// Throws std::runtime_error naming the path and the errno text on failure; leaves no temp file.
// durable = false skips both fsyncs: readers still see the old file or the new one, but a power
// loss may lose the update (for live status files rewritten many times a second).
void write_file_atomic(const std::string& path, std::string_view contents, bool durable = true);

// fsync a directory so that a rename inside it survives a power loss.
void fsync_directory(const std::string& dir);

}  // namespace xtrain
