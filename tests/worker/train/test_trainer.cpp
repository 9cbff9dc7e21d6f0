// The training loop's contract with the communicator, observed through a recording one: with
// gradient accumulation every parameter is all-reduced exactly once per optimizer step (no_sync
// on the earlier micro-steps), buckets arrive last layer first and tile the gradient buffer, and
// a stop request checkpoints at the end of the current step.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "worker/comm/communicator.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/train/run_report.hpp"
#include "worker/train/trainer.hpp"
#include "tests/worker/gpt_test_util.hpp"

namespace fs = std::filesystem;
using namespace xtrain;

namespace {

// A world of one that records what the trainer asks of it.
class RecordingCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string name() const override { return "recording"; }
  void start_all_reduce_average(GradBucket b) override { buckets.push_back(b); }
  void finish_all_reduces() override { ++finishes; }
  void all_reduce_average(float*, size_t count) override { blocking_floats.push_back(count); }
  void broadcast(float*, size_t, int) override { ++broadcasts; }
  void barrier() override { ++barriers; }

  std::vector<GradBucket> buckets;
  std::vector<size_t> blocking_floats;
  int finishes = 0, broadcasts = 0, barriers = 0;
};

struct Fixture {
  Fixture() {
    dir = fs::temp_directory_path() /
          ("xtrain-trainer-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(dir);
    std::ofstream text(dir / "train.txt");
    for (int i = 0; i < 400; ++i) text << "line " << i << " of a small training text.\n";
    spec.name = "t";
    spec.run_dir = (dir / "run").string();
    spec.model = test::model_spec(3, 2, 16, 8, 256);
    spec.data.train = (dir / "train.txt").string();
    spec.train.steps = 3;
    spec.train.batch_size = 8;
    spec.train.micro_batch_size = 2;  // 4 micro-steps per optimizer step
    spec.train.log_every = 1;
  }
  ~Fixture() { fs::remove_all(dir); }

  // Builds a trainer for `spec` and runs it to the end or to the stop request.
  RankResult train(bool stop_requested) {
    trainer = std::make_unique<Trainer>(spec, spec.run_dir, 0, 1, backend, report);
    const std::atomic<bool> stop{stop_requested};
    return trainer->run(comm, stop);
  }

  fs::path dir;
  JobSpec spec;
  CpuBackend backend;
  RunReport report{0, "", "", ""};  // no metrics file, heartbeat or result file
  RecordingCommunicator comm;
  std::unique_ptr<Trainer> trainer;
};

}  // namespace

TEST_CASE("with 4 micro-steps, each parameter is all-reduced exactly once per optimizer step") {
  Fixture f;
  const RankResult result = f.train(false);
  CHECK(result.status == "completed");
  CHECK(result.step == 3);

  const RecordingCommunicator& comm = f.comm;
  const ParamLayout& layout = f.trainer->model().layout();
  const int L = f.spec.model.n_layer;
  // Per step: the layers' buckets, then the step's scalars [loss, stop flag, each rank's busy
  // time] queued behind them, so that one finish_all_reduces and one download serve both.
  const size_t per_step = static_cast<size_t>(L + 2);
  REQUIRE(comm.buckets.size() == 3 * per_step);
  CHECK(comm.finishes == 3);
  for (size_t step = 0; step < 3; ++step) {
    // Layers L-1 .. 0, then the embeddings: together the whole gradient buffer, once.
    size_t covered = 0;
    for (int j = 0; j <= L; ++j) {
      const GradBucket& b = comm.buckets[step * per_step + static_cast<size_t>(j)];
      const Span expected = j < L ? layout.layer_span(L - 1 - j) : layout.embedding_span();
      CHECK(b.data == f.trainer->model().grads() + expected.offset);
      CHECK(b.count == expected.count);
      covered += b.count;
    }
    CHECK(covered == layout.total());
    const GradBucket& scalars = comm.buckets[step * per_step + per_step - 1];
    CHECK(scalars.count == 3);  // 2 + the world size
    CHECK(scalars.id == -1);    // no layer's
    CHECK(scalars.data == comm.buckets[per_step - 1].data);  // the same buffer every step
  }
  // Nothing blocking in a step: the scalars ride with the gradients.
  CHECK(comm.blocking_floats.empty());
  // Each bucket says which layer it holds (L for the embeddings), for the progress record.
  for (int j = 0; j <= L; ++j) CHECK(comm.buckets[static_cast<size_t>(j)].id == (j < L ? L - 1 - j : L));
}

TEST_CASE("a stop request checkpoints at the end of the current step and reports preempted") {
  Fixture f;
  f.spec.train.steps = 50;
  const RankResult result = f.train(true);
  CHECK(result.status == "preempted");
  CHECK(result.step == 1);
  CHECK(fs::exists(fs::path(f.spec.run_dir) / "checkpoints" / "step-00000001" / "model.safetensors"));
  CHECK(f.comm.barriers == 1);  // nobody leaves before rank 0's checkpoint is complete

  // The next run resumes from it.
  const RankResult resumed = f.train(false);
  CHECK(f.trainer->start_step() == 1);
  CHECK(resumed.step == 50);
}

TEST_CASE("train.cuda_graph \"on\" on CPU ranks is refused before the data is read, naming the key") {
  Fixture f;
  f.spec.train.cuda_graph = "on";
  f.spec.data.train = (f.dir / "no-such.txt").string();  // would be the error if the data came first
  CHECK_THROWS_WITH(Trainer(f.spec, f.spec.run_dir, 0, 1, f.backend, f.report),
                    Catch::Matchers::StartsWith("train.cuda_graph: \"on\" records CUDA graphs"));
  f.spec.train.cuda_graph = "auto";  // auto: off on the CPU, no error
  f.spec.data.train = (f.dir / "train.txt").string();
  CHECK_NOTHROW(Trainer(f.spec, f.spec.run_dir, 0, 1, f.backend, f.report));
}
