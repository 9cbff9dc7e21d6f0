// A world of one rank: every collective is the identity (the average of one value is itself).
// Used when xtrain-worker runs alone, so the training loop has no special case for it.
#pragma once

#include "worker/comm/communicator.hpp"

namespace xtrain {

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string name() const override { return "single"; }

  void start_all_reduce_average(GradBucket) override {}
  void finish_all_reduces() override {}
  void all_reduce_average(float*, size_t) override {}
  void broadcast(float*, size_t, int) override {}
  void barrier() override {}
};

}  // namespace xtrain
