// What a PyTorch script run as a rank says of its own failure, for the root cause's message:
//   - torch.distributed.elastic's error file: xlaunch gives every rank TORCHELASTIC_ERROR_FILE as
//     torchrun does, and a script whose entry point carries @record
//     (torch.distributed.elastic.multiprocessing.errors) writes its uncaught exception there:
//     {"message": {"message": "ValueError: ...", "extraInfo": {"py_callstack": ..., "timestamp": ...}}}
//     (older PyTorch: "message" a string);
//   - else, for a rank that exited 1 (Python's code for an uncaught exception), the exception that
//     the traceback in its last lines ends with.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xtrain::launcher {

// The error file at `path` as the rank's result: {"error": "ValueError: ...", "traceback": ...,
// "error_file": path} (traceback when it records one); null when there is no file;
// {"unreadable": why} when it is not an error file (a rank killed while writing it).
nlohmann::json read_elastic_error_file(const std::string& path);

// "ValueError: ..." from the last traceback in `lines` (the line after its frames, which Python
// does not indent), or "ExceptionGroup: ... (N sub-exceptions)" when that is an exception group's;
// "" when the lines hold no traceback or only its start.
std::string python_exception(const std::vector<std::string>& lines);

}  // namespace xtrain::launcher
