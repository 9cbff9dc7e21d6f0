// Interpret mode's NCCL between two processes (cuda/interp/nccl.cpp), through the backend's own
// communicator (cuda/nccl_communicator.cpp): this process is rank 0 and starts this test binary
// again as rank 1, running the hidden peer case below with the scenario in its environment. Both
// ranks check their own results; the peer's exit code is its count of failed checks. Then two
// ranks of training through the real xlaunch and worker, and one of them lost.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <nccl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/gpu/nccl_id.hpp"
#include "common/worker_env.hpp"
#include "cuda/cuda_api.hpp"
#include "tests/cuda/cuda_test_util.hpp"
#include "tests/cuda/training_job.hpp"
#include "worker/comm/communicator.hpp"

extern char** environ;

using namespace xtrain;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

constexpr const char* kScenario = "XTRAIN_TEST_NCCL_SCENARIO";
constexpr const char* kId = "XTRAIN_TEST_NCCL_ID";
constexpr double kInitTimeoutS = 60.0;

WorkerEnv env_of(int rank, const std::string& id_hex) {
  WorkerEnv env;
  env.where.rank = env.where.local_rank = rank;
  env.where.world_size = env.where.local_world_size = 2;
  env.nccl_id_hex = id_hex;
  return env;
}

std::string fresh_id_hex() {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  NcclIdBytes bytes;
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return encode_nccl_id(bytes);
}

// A rank's own values: distinct per rank and element, exact in fp32.
std::vector<float> values_of(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank + 1) * 0.25f + static_cast<float>(i % 97) * 0.125f;
  return v;
}

// NCCL's average of floats across the two ranks: each part scaled by 1/2, summed in rank order.
std::vector<float> average_of_ranks(size_t n) {
  const std::vector<float> a = values_of(0, n), b = values_of(1, n);
  std::vector<float> avg(n);
  for (size_t i = 0; i < n; ++i) avg[i] = a[i] * 0.5f + b[i] * 0.5f;
  return avg;
}

// Rank 1, started by rank 0 with the scenario and the id in its environment, with its output in a
// file that rank 0 prints when the peer fails.
class Peer {
 public:
  Peer(const std::string& scenario, const std::string& id_hex, const fs::path& dir) : log_(dir / "peer.log") {
    const std::string exe = fs::read_symlink("/proc/self/exe").string();
    std::vector<std::string> env = {std::string(kScenario) + "=" + scenario, std::string(kId) + "=" + id_hex};
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string name = "peer rank of the interpret-mode NCCL cases";
    std::vector<char*> argv = {const_cast<char*>(exe.c_str()), name.data(), nullptr};
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    const int spawned = posix_spawn(&pid_, exe.c_str(), &files, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&files);
    REQUIRE(spawned == 0);
  }
  ~Peer() {
    if (pid_ <= 0) return;  // a failed case: no rank is left behind
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  // Its exit code (-1: killed by a signal), after waiting for it.
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string output() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  fs::path log_;
  pid_t pid_ = 0;
};

// A temporary directory for the ranks' meeting (TMPDIR, which both ranks read), and the peer's log.
struct MeetingDir {
  fs::path dir = fs::temp_directory_path() / ("xtrain-nccl-ranks-" + std::to_string(::getpid()));
  std::string old_tmpdir = std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "";
  MeetingDir() {
    fs::create_directories(dir / "tmp");
    ::setenv("TMPDIR", (dir / "tmp").c_str(), 1);
  }
  ~MeetingDir() {
    old_tmpdir.empty() ? ::unsetenv("TMPDIR") : ::setenv("TMPDIR", old_tmpdir.c_str(), 1);
    fs::remove_all(dir);
  }
  bool meeting_left_behind() const { return !fs::is_empty(dir / "tmp"); }
};

constexpr size_t kCount = 1000;

// One rank of the two: its emulated GPU, its NCCL communicator, and its own values on the device.
struct RankOfTwo {
  std::unique_ptr<Backend> gpu;
  std::unique_ptr<Communicator> comm;
  test::DeviceFloats data;
  RankOfTwo(int rank, const std::string& id_hex)
      : gpu(cuda::make_backend(0, Precision::fp32)),
        comm(cuda::make_nccl_communicator(env_of(rank, id_hex), *gpu, kInitTimeoutS)),
        data(*gpu, values_of(rank, kCount)) {}
};

// Both ranks: every collective of the communicator, each result checked on this rank.
void run_agreeing_rank(int rank, const std::string& id_hex) {
  RankOfTwo me(rank, id_hex);
  CHECK(me.comm->world_size() == 2);
  const std::vector<float> mine = values_of(rank, kCount), avg = average_of_ranks(kCount);
  me.comm->all_reduce_average(me.data.get(), kCount);  // blocking, device memory
  CHECK(me.data.host() == avg);

  test::DeviceFloats grads(*me.gpu, mine);
  me.comm->start_all_reduce_average({grads.get(), 600});  // two buckets, ordered on the compute stream
  me.comm->start_all_reduce_average({grads.get() + 600, kCount - 600});
  me.comm->finish_all_reduces();
  me.gpu->scale(grads.get(), 2.0f, kCount);
  std::vector<float> doubled = avg;
  for (float& v : doubled) v *= 2.0f;
  CHECK(grads.host() == doubled);

  float scalar = static_cast<float>(rank + 1);  // host memory: the staging path
  me.comm->all_reduce_average(&scalar, 1);
  CHECK(scalar == 1.5f);
  test::DeviceFloats sent(*me.gpu, mine);
  me.comm->broadcast(sent.get(), kCount, 1);
  CHECK(sent.host() == values_of(1, kCount));
  me.comm->barrier();
}

}  // namespace

// Rank 1 of the cases below; hidden from the suite (it runs only when a case starts it).
TEST_CASE("peer rank of the interpret-mode NCCL cases", "[.]") {
  const char* scenario = std::getenv(kScenario);
  const char* id = std::getenv(kId);
  REQUIRE(scenario != nullptr);
  REQUIRE(id != nullptr);
  const std::string what = scenario;
  if (what == "agree") {
    run_agreeing_rank(1, id);
  } else if (what == "exit") {
    RankOfTwo me(1, id);
    me.comm->all_reduce_average(me.data.get(), kCount);
    std::_Exit(3);  // dies before its next collective, as a crashed rank: no teardown
  } else if (what == "mismatch") {
    {
      RankOfTwo me(1, id);
      CHECK_THROWS_WITH(me.comm->broadcast(me.data.get(), kCount, 0),
                        Contains("rank 0's part-0 is collective 0: ncclAllReduce of 1000 float32 values (ncclAvg), "
                                 "but this rank's is collective 0: ncclBroadcast of 1000 float32 values from rank 0"));
    }
    cudaDeviceReset();  // the fault is the device's: it outlives the backend
  } else {
    FAIL("unknown scenario " << what);
  }
}

TEST_CASE("interpret mode's NCCL joins two processes: every collective gives both ranks the same bits",
          "[interp][nccl]") {
  MeetingDir meeting;
  const std::string id = fresh_id_hex();
  Peer peer("agree", id, meeting.dir);
  run_agreeing_rank(0, id);
  const int peer_failures = peer.wait();
  INFO("rank 1's output:\n" << peer.output());
  CHECK(peer_failures == 0);
  CHECK_FALSE(meeting.meeting_left_behind());  // the last rank out removed the ranks' files
}

TEST_CASE("interpret mode's NCCL: a peer that dies before its part is a lost peer at once, not a hang",
          "[interp][nccl]") {
  MeetingDir meeting;
  const std::string id = fresh_id_hex();
  Peer peer("exit", id, meeting.dir);
  {
    RankOfTwo me(0, id);
    me.comm->all_reduce_average(me.data.get(), kCount);
    CHECK(me.data.host() == average_of_ranks(kCount));
    const auto start = std::chrono::steady_clock::now();
    me.comm->start_all_reduce_average({me.data.get(), kCount});
    me.comm->finish_all_reduces();
    // The backend's wait for the bucket is the communicator's poll of the stream and of NCCL's
    // asynchronous error (its stream wait), which reports the peer as NCCL does: a remote error.
    std::vector<float> back(kCount);
    std::string lost;
    try {
      me.gpu->download(back.data(), me.data.get(), kCount);
    } catch (const CommunicatorError& e) {  // failure_kind peer_lost
      lost = e.what();
    }
    CHECK_THAT(lost, Contains("NCCL: rank 0 of 2: ") &&
                         Contains(" failed with remote process exited or there was a network error: interpret mode: "
                                  "ncclAllReduce: rank 1 (process ") &&
                         Contains(") exited without its part-1"));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(waited < 10.0);  // the collective timeout is 600 s
  }
  INFO("rank 1's output:\n" << peer.output());
  CHECK(peer.wait() == 3);
  CHECK_FALSE(meeting.meeting_left_behind());  // the survivor, last out, removed the dead rank's files too
}

TEST_CASE("interpret mode's NCCL: ranks that issue different collectives fail, naming both", "[interp][nccl]") {
  MeetingDir meeting;
  const std::string id = fresh_id_hex();
  Peer peer("mismatch", id, meeting.dir);
  {
    RankOfTwo me(0, id);
    CHECK_THROWS_WITH(me.comm->all_reduce_average(me.data.get(), kCount),
                      Contains("rank 1's part-0 is collective 0: ncclBroadcast of 1000 float32 values from rank 0, "
                               "but this rank's is collective 0: ncclAllReduce of 1000 float32 values (ncclAvg)") &&
                          Contains("on a GPU NCCL would hang or mix the data"));
  }
  cudaDeviceReset();  // the fault is the device's: it outlives the backend
  const int peer_failures = peer.wait();
  INFO("rank 1's output:\n" << peer.output());
  CHECK(peer_failures == 0);
}

namespace {

xtrain::test::TrainingJob small_job(const std::string& name) {
  return xtrain::test::TrainingJob::small_interpreted(name, 2, 8);
}

}  // namespace

TEST_CASE("two interpreted ranks train over interpret mode's NCCL through xlaunch, bit for bit as over Gloo",
          "[interp_training]") {
  xtrain::test::TrainingJob job = small_job("nccl-ranks");  // before TMPDIR moves
  MeetingDir meeting;
  job.launch("gloo", 2, [](nlohmann::json& s) { s["backend"] = "gloo"; });
  const auto o = job.run_xlaunch("nccl", 2, [](nlohmann::json& s) { s["backend"] = "nccl"; },
                                 "TMPDIR='" + (meeting.dir / "tmp").string() + "'");
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  CHECK_THAT(o.output, Contains("nccl (interpret mode's, between the ranks of this machine)"));
  const auto nccl = job.losses("nccl");
  CHECK(nccl.size() == 8);
  // Both average two ranks' fp32 values exactly as (a + b) / 2 (a scale by 1/2 is exact).
  CHECK(nccl == job.losses("gloo"));
  CHECK(job.digest("nccl", 0) == job.digest("nccl", 1));
  CHECK(job.digest("nccl", 0) == job.digest("gloo", 0));
  CHECK_FALSE(meeting.meeting_left_behind());
}

TEST_CASE("three interpreted ranks over interpret mode's NCCL hold the same parameters, close to Gloo's",
          "[interp_training]") {
  xtrain::test::TrainingJob job = xtrain::test::TrainingJob::small_interpreted("nccl-three", 1, 4);
  MeetingDir meeting;
  const auto three = [](const char* backend) {
    return [backend](nlohmann::json& s) {
      s["backend"] = backend;
      s["train"]["batch_size"] = 6;  // 3 ranks x 1 micro-batch of 2
    };
  };
  job.launch("gloo", 3, three("gloo"));
  job.launch("nccl", 3, three("nccl"));
  // One third is not exact in floats: NCCL scales each part by it and sums (here in rank order;
  // on GPUs in its ring's or tree's), Gloo sums and then scales, so the two averages differ in their
  // last bit now and then (the losses here by one fp32 ulp at one step of four; 1e-5 is about 20
  // ulps). What must hold exactly is that every rank of a run ends with the same parameters: each
  // rank summing in its own order would not (with two ranks, whose sums commute, it would).
  for (int rank : {1, 2}) CHECK(job.digest("nccl", rank) == job.digest("nccl", 0));
  const auto nccl = job.losses("nccl"), gloo = job.losses("gloo");
  REQUIRE(nccl.size() == 4);
  REQUIRE(gloo.size() == 4);
  for (const auto& [step, loss] : nccl) {
    INFO("step " << step << ": nccl " << std::setprecision(9) << loss << ", gloo " << gloo.at(step));
    CHECK(std::abs(loss - gloo.at(step)) <= 1e-5 * std::abs(gloo.at(step)));
  }
  CHECK_FALSE(meeting.meeting_left_behind());
}

TEST_CASE("interpreted ranks whose parameters drift apart fail before the checkpoint, over NCCL as over Gloo",
          "[interp_training]") {
  xtrain::test::TrainingJob job = xtrain::test::TrainingJob::small_interpreted("nccl-drift", 1, 2);
  MeetingDir meeting;
  // Rank 1 flips a bit of its parameters after step 1; the check before step 2's checkpoint (the
  // last step's) finds it with the CRCs, and then the tensor with rank 0's CRC of each, which
  // travels in a device buffer of its own.
  const auto o = job.run_xlaunch("run", 2, [](nlohmann::json& s) { s["backend"] = "nccl"; },
                                 "XTRAIN_FAULT_FLIP=1:1");
  INFO(o.output);
  CHECK(o.exit_code == 1);
  CHECK_THAT(o.output, Contains("message: parameters of rank 1 (first at h.0.") &&
                           Contains(") differ from rank 0's after step 2: the replicas drifted apart"));
  CHECK_FALSE(std::filesystem::exists(job.run_dir("run") / "checkpoints" / "step-00000002"));
  CHECK_FALSE(meeting.meeting_left_behind());
}

TEST_CASE("interpreted ranks whose training diverges stop before the update, exit 3 and are not restarted",
          "[interp_training]") {
  xtrain::test::TrainingJob job = xtrain::test::TrainingJob::small_interpreted("nccl-diverge", 1, 8);
  MeetingDir meeting;
  // A learning rate of 1e4 overflows the CUDA backend's gradients within a few steps: its loss and
  // gradient norm (the norm a kernel's sum of squares) come back not finite on both ranks alike.
  const auto o = job.run_xlaunch("run", 2, [](nlohmann::json& s) {
    s["backend"] = "nccl";
    s["train"]["lr"] = 1e4;
    s["train"]["grad_clip"] = 0;
    s["launcher"]["max_restarts"] = 1;
  });
  INFO(o.output);
  CHECK(o.exit_code == 3);
  CHECK_THAT(o.output, Contains(": training diverged (loss ") && Contains("no restart: training diverged"));
  std::ifstream in(job.run_dir("run") / "summary.json");
  const nlohmann::json summary = nlohmann::json::parse(in);
  CHECK(summary.at("attempts") == 1);
  // The first rank out is the cause; the other saw the same values and diverged too: xlaunch waits
  // for it to say so (exit 3) before it would stop it.
  const int cause = summary.at("root_cause").at("rank").get<int>();
  CHECK(summary.at("ranks").at(cause).at("result").at("failure_kind") == "diverged");
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json& rank = summary.at("ranks").at(r);
    INFO(rank.dump());
    CHECK(rank.at("result").at("failure_kind") == "diverged");
    CHECK(rank.at("status") == "failed");
    CHECK(rank.at("exit_code") == 3);
  }
  CHECK_FALSE(meeting.meeting_left_behind());
}

TEST_CASE("an interpreted rank's lost NCCL peer is reported as on GPUs: peer_lost, the rank that died the cause",
          "[interp_training]") {
  xtrain::test::TrainingJob job = small_job("nccl-lost-peer");  // before TMPDIR moves
  MeetingDir meeting;
  // Rank 1 fails at step 5, tears its communicator down and exits 3 a second later, while rank
  // 0's stream runs a gradient all-reduce that waits for its part.
  const auto o = job.run_xlaunch("run", 2, [](nlohmann::json& s) { s["backend"] = "nccl"; },
                                 "TMPDIR='" + (meeting.dir / "tmp").string() + "' XTRAIN_FAULT_EXIT=1:5:3:1");
  job.check_rank_one_lost("run", o);
}

TEST_CASE("xlaunch removes the NCCL meeting files of interpreted ranks that it stopped", "[interp_training]") {
  xtrain::test::TrainingJob job = small_job("nccl-stopped");  // before TMPDIR moves
  MeetingDir meeting;
  // The ranks' TMPDIR is the spec's worker.env's, not xlaunch's: xlaunch looks where they meet.
  const fs::path ranks_tmp = meeting.dir / "ranks-tmp";
  fs::create_directories(ranks_tmp);
  // Rank 1 sleeps in step 2's backward while rank 0's all-reduce waits for its part; the watchdog
  // stops both with SIGTERM, which kills them where they are, files and all.
  const auto o = job.run_xlaunch(
      "run", 2,
      [&](nlohmann::json& s) {
        s["backend"] = "nccl";
        s["launcher"]["heartbeat_timeout_s"] = 6;
        s["worker"]["env"]["TMPDIR"] = ranks_tmp.string();
      },
      "XTRAIN_FAULT_SLEEP=1:2:0");
  INFO(o.output);
  CHECK(o.exit_code == 124);
  CHECK_THAT(o.output, Contains("removed " + (ranks_tmp / "xtrain-interp-nccl-").string()) &&
                           Contains(": interpret mode's NCCL files of ranks that were stopped"));
  CHECK(fs::is_empty(ranks_tmp));
  CHECK_FALSE(meeting.meeting_left_behind());
}

TEST_CASE("interpret mode's NCCL refuses to capture a collective between ranks",
          "[interp][nccl]") {
  MeetingDir meeting;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  // Both ranks in this process: the refusal comes before any exchange.
  ncclComm_t comms[2] = {nullptr, nullptr};
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  for (int r = 0; r < 2; ++r) CHECK(ncclCommInitRankConfig(&comms[r], 2, id, r, &config) == ncclInProgress);
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) REQUIRE(ncclCommGetAsyncError(comms[0], &state) == ncclSuccess);
  REQUIRE(state == ncclSuccess);
  float* data = nullptr;
  REQUIRE(cudaMalloc(&data, 16 * sizeof(float)) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(ncclAllReduce(data, data, 16, ncclFloat32, ncclSum, comms[0], stream) == ncclInvalidUsage);
  CHECK_THAT(ncclGetLastError(comms[0]), Contains("interpret mode does not capture collectives between processes"));
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  if (graph != nullptr) cudaGraphDestroy(graph);
  for (ncclComm_t comm : comms) ncclCommAbort(comm);
  cudaStreamDestroy(stream);
  cudaFree(data);
  CHECK_FALSE(meeting.meeting_left_behind());
}
