// The open-file limit (RLIMIT_NOFILE) of a process that holds many sockets: node 0's rendezvous
// store holds a few connections per node, so thousands of nodes outgrow the usual soft limit of
// 1024 long before the hard limit.
#pragma once

#include <cstddef>
#include <string>

namespace xtrain {

// Makes room for `more` descriptors beyond those open now: raises the soft limit as far as needed,
// never beyond the hard limit. Throws std::runtime_error naming `what`, the numbers (needed
// against the hard limit) and how to raise the hard limit when it is too low. Returns the limit.
std::size_t reserve_open_files(std::size_t more, const std::string& what);

}  // namespace xtrain
