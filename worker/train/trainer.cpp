#include "worker/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/number_format.hpp"
#include "worker/train/checkpoint.hpp"
#include "worker/train/choice_scoring.hpp"
#include "worker/model/cuda_graphs.hpp"
#include "worker/train/lr_schedule.hpp"
#include "worker/formats/crc32c.hpp"
#include "worker/formats/model_io.hpp"
#include "worker/model/memory_plan.hpp"
#include "worker/train/text_sampler.hpp"

namespace xtrain {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The error of a step (1-based) whose loss or gradient norm is not finite, with the way on: a resume
// takes a new learning rate, warmup or clip and keeps AdamW's moments (docs/job-spec.md), but not
// from the checkpoint this very step started from, whose batch gives the same gradient again.
std::string diverged_message(long step, double loss, double grad_norm, const TrainSpec& train,
                             std::optional<long> checkpoint, const std::string& resume) {
  const auto value = [](double x) { return std::isnan(x) ? std::string("NaN") : fmt::format("{:.4g}", x); };
  std::string message = fmt::format("step {}: training diverged (loss {}, gradient norm {}): stopped before the "
                                    "step's update, so the parameters",
                                    step, value(loss), value(grad_norm));
  message += checkpoint ? fmt::format(" and the checkpoint of step {} stay finite", *checkpoint)
                        : std::string(" stay finite (no checkpoint was written yet)");
  const std::string clip = train.grad_clip > 0 ? fmt::format("a lower train.grad_clip (now {:g})", train.grad_clip)
                                               : std::string("a train.grad_clip (now off)");
  const std::string change = fmt::format("a lower train.lr ({:.2e} at this step), a longer train.warmup_steps (now "
                                         "{}) or {}",
                                         learning_rate(train, step - 1), train.warmup_steps, clip);
  if (checkpoint && *checkpoint == step - 1) {
    return message + ", but this step started from that checkpoint, so a resume from it meets the same gradient: "
                     "run again from an earlier checkpoint (checkpoint.resume set to its path) or from the start "
                     "(checkpoint.resume \"never\"), with " + change;
  }
  message += "; run again with " + change;
  if (checkpoint && resume == "auto") return message + ": it resumes from that checkpoint with them, keeping AdamW's "
                                                       "moments";
  if (checkpoint) return message + ", and checkpoint.resume \"auto\" to resume from that checkpoint";
  return message;
}

}  // namespace

Trainer::Trainer(const JobSpec& spec, std::string run_dir, int rank, int world_size, Backend& backend,
                 RunReport& report, FaultInjection fault)
    : spec_(spec),
      run_dir_(std::move(run_dir)),
      rank_(rank),
      world_(world_size),
      micro_batch_(spec.train.micro_batch_size),
      accum_(spec.train.batch_size / (world_size * spec.train.micro_batch_size)),
      backend_(backend),
      report_(report),
      fault_(fault) {
  const auto& t = spec_.train;
  // Before anything is read or allocated: "on" on CPU ranks is a spec error.
  const CudaGraphChoice graphs = choose_cuda_graphs(t, spec_.model, backend_.name(), backend_.precision());
  data_ = load_data(spec_.data, spec_.model, t.eval_every > 0);
  report_.heartbeat().beat();
  text_ = TextCodec::for_run(spec_, data_.byte_level);
  // Rank 0 writes checkpoints, each with the tokenizer's files (a byte-level run's too, for
  // Hugging Face's loaders). Read now: a resumed run's tokenizer is its checkpoint's copy, which a
  // later save may remove (checkpoint.keep).
  if (rank_ == 0 && (!spec_.tokenizer.empty() || data_.byte_level)) {
    tokenizer_files_ = read_tokenizer_files(spec_.tokenizer, spec_.model.seq_len);
  }
  if (spec_.sample.tokens > 0 && text_.has_text()) {
    prompt_ = text_.prompt_tokens(spec_.sample.prompt);
    for (const std::int32_t token : prompt_) {
      if (token >= spec_.model.vocab_size) {
        throw SpecError("sample.prompt", "token " + std::to_string(token) + " is outside model.vocab_size " +
                                             std::to_string(spec_.model.vocab_size));
      }
    }
  }
  sampler_ = std::make_unique<BatchSampler>(data_.train, spec_.model.seq_len, static_cast<std::uint64_t>(t.seed));
  if (t.eval_every > 0) {
    // train.eval_batches global batches of train.batch_size sequences: the same windows whatever
    // the world size, so validation losses compare across runs.
    val_starts_ = validation_starts(data_.val, spec_.model.seq_len, t.eval_batches * t.batch_size);
  }
  if (!t.eval_multiple_choice.empty()) {
    std::vector<ChoiceExample> all = read_spec_choices(t, spec_.model);
    choices_total_ = all.size();
    for (size_t e = static_cast<size_t>(rank_); e < all.size(); e += static_cast<size_t>(world_)) {
      choices_.push_back(std::move(all[e]));
    }
  }

  // Each allocation of a large model takes seconds (the pages are zeroed): a beat after each, so
  // that the watchdog's limit need only exceed the longest of them.
  model_ = std::make_unique<GPT>(spec_.model, backend_, micro_batch_);
  report_.heartbeat().beat();
  if (graphs.use) model_->set_replay(graphs.required ? GPT::Replay::kRequired : GPT::Replay::kPreferred);
  if (rank_ == 0 && backend_.name() == "cuda") spdlog::info("cuda graphs: {}", graphs.why);
  adamw_ = std::make_unique<AdamW>(backend_, model_->layout(), AdamWConfig::from(t));
  report_.heartbeat().beat();
  host_scalars_.resize(step_scalar_floats(world_));
  scalars_ = backend_.alloc_floats(host_scalars_.size());
  const size_t bt = static_cast<size_t>(micro_batch_) * static_cast<size_t>(spec_.model.seq_len);
  inputs_.resize(bt);
  targets_.resize(bt);

  model_->set_layer_observer([this](GPT::Pass pass, int layer) {
    if (!in_step_) return;  // validation and sampling run forward too: they report their own phase
    Heartbeat& live = report_.heartbeat();
    if (pass == GPT::Pass::kForward) return live.phase(WorkerPhase::kForward, layer);
    live.phase(WorkerPhase::kBackward, layer);
    fault_.at_backward_layer(rank_, current_step_, layer);
  });
  if (!val_starts_.empty() && text_.has_text()) bits_per_nat_ = validation_bits_per_nat();

  // Where the weights come from: the checkpoint a resume continues from, else model.init_from,
  // else the seed. Each beats as it goes (WorkProgress): at 1.5B parameters a draw alone takes tens
  // of seconds.
  const HostAccess memory = host_access(backend_);
  const auto resume_start = std::chrono::steady_clock::now();
  if (const auto resumed = resume_from_checkpoint(run_dir_, spec_, model_->layout(), data_.train.count,
                                                  model_->params(), adamw_->m(), adamw_->v(), memory)) {
    const TrainState& state = resumed->state;
    model_->refresh_weights();
    adamw_->set_step_count(state.adam_t);
    sampler_->set_state(state.sampler);
    start_step_ = state.step;
    completed_steps_ = state.step;
    resumed_from_ = resumed->dir;
    checkpoint_step_ = state.step;
    resume_seconds_ = seconds_since(resume_start);
  } else if (!spec_.model.init_from.empty()) {
    try {
      const ModelFileInfo file = read_model_file_info(spec_.model.init_from);
      import_model(file, model_->layout(), model_->params(), memory);
      model_->refresh_weights();
      initialised_from_ = xtrain::describe(file);
    } catch (const FileError& e) {
      throw SpecError("model.init_from", e.what());
    }
  } else {
    model_->init_weights(spec_.model.init_seed);
  }
  report_.heartbeat().beat();
}

Trainer::~Trainer() { backend_.free(scalars_); }

double Trainer::validation_bits_per_nat() const {
  // Every validation reads the same windows, so the bytes their targets stand for are counted once.
  const size_t T = static_cast<size_t>(spec_.model.seq_len);
  std::vector<std::int32_t> window(T + 1);
  std::uint64_t bytes = 0;
  for (const std::uint64_t start : val_starts_) {
    data_.val.copy(start, T + 1, window.data());
    bytes += text_.text_bytes(std::span(window).subspan(1));  // the targets
  }
  const double tokens = static_cast<double>(val_starts_.size() * T);
  return bytes > 0 ? tokens / (std::log(2.0) * static_cast<double>(bytes)) : 0.0;
}

std::string Trainer::describe() const {
  const auto& m = spec_.model;
  const auto& t = spec_.train;
  const double params_m = static_cast<double>(model_->layout().total()) / 1e6;
  return fmt::format(
      "model {}L {}H {}C T={} V={}: {:.2f}M parameters | batch {} = {} rank{} x {} seq x {} micro-step{} | "
      "train {} tokens{}, val {} tokens",
      m.n_layer, m.n_head, m.n_embd, m.seq_len, m.vocab_size, params_m, t.batch_size, world_, world_ == 1 ? "" : "s",
      micro_batch_, accum_, accum_ == 1 ? "" : "s", with_thousands(static_cast<long long>(data_.train.count)),
      data_.byte_level ? " (bytes)" : "", with_thousands(static_cast<long long>(data_.val.count)));
}

void Trainer::adopt_rank0_start(Communicator& comm) {
  if (comm.world_size() == 1) return;
  // The resume state travels as raw bytes in a float buffer (the collectives move floats).
  struct Start {
    std::int64_t step;
    std::int64_t adam_t;
    SamplerState sampler;
  };
  static_assert(std::is_trivially_copyable_v<Start> && sizeof(Start) % sizeof(float) == 0);
  constexpr size_t kFloats = sizeof(Start) / sizeof(float);
  const Start mine{start_step_, adamw_->step_count(), sampler_->state()};
  float bytes[kFloats];
  std::memcpy(bytes, &mine, sizeof mine);
  float* buffer = backend_.alloc_floats(kFloats);
  backend_.upload(buffer, bytes, kFloats);
  comm.broadcast(buffer, kFloats, 0);
  backend_.download(bytes, buffer, kFloats);
  Start root;
  std::memcpy(&root, bytes, sizeof root);
  // Every rank must learn whether any rank differs: the transfer below is collective.
  const float differs = std::memcmp(&mine, &root, sizeof mine) != 0 ? 1.0f : 0.0f;
  backend_.upload(buffer, &differs, 1);
  comm.all_reduce_average(buffer, 1);
  float any = 0;
  backend_.download(&any, buffer, 1);
  backend_.free(buffer);
  if (any == 0) return;

  if (differs > 0) {
    spdlog::warn("rank {} starts at step {} but rank 0 at step {} (checkpoints not shared?): taking rank 0's state",
                 rank_, mine.step, root.step);
  }
  const size_t n = model_->layout().total();
  comm.broadcast(model_->params(), n, 0);
  model_->refresh_weights();
  comm.broadcast(adamw_->m(), n, 0);
  comm.broadcast(adamw_->v(), n, 0);
  start_step_ = completed_steps_ = root.step;
  adamw_->set_step_count(root.adam_t);
  sampler_->set_state(root.sampler);
}

void Trainer::verify_replicas(Communicator& comm) {
  // Every rank built its weights alone (from the seed, or from the checkpoint); rank 0's must
  // match bit for bit, or the replicas would train apart.
  const std::string apart = replicas_apart(comm);
  if (apart.empty()) return;
  throw std::runtime_error("initial parameters of " + apart + " differ from rank 0's before the first step");
}

void Trainer::check_replicas_agree(Communicator& comm, long step) {
  // The ranks apply the same averaged gradients with the same optimizer, so their parameters stay
  // equal unless a collective handed ranks different results or memory changed under one of them
  // (a hardware fault). A checkpoint is rank 0's copy alone: written from replicas that drifted
  // apart, it would hide that the run is no longer one model.
  const std::string apart = replicas_apart(comm);
  if (apart.empty()) return;
  throw std::runtime_error("parameters of " + apart + " differ from rank 0's after step " + std::to_string(step) +
                           ": the replicas drifted apart (a collective that gave the ranks different results, or "
                           "memory that changed under a rank), so no checkpoint is written");
}

std::string Trainer::replicas_apart(Communicator& comm) {
  if (world_ == 1) return "";
  // A CRC-32C of each tensor, and of those CRCs for the whole: rank 0's against everyone's.
  const std::vector<ParamTensor>& tensors = model_->layout().tensors();
  std::vector<std::uint32_t> crcs;
  Crc32c whole;
  for (const ParamTensor& t : tensors) {
    Crc32c crc;
    host_access(backend_).read(model_->params() + t.offset, t.count,
                               [&](const float* host, size_t, size_t n) { crc.update(host, n * sizeof(float)); });
    crcs.push_back(crc.value());
    whole.update(&crcs.back(), sizeof(std::uint32_t));
  }
  // The collectives average floats: a value goes as two 16-bit halves in slots of its own, exact,
  // and comes back to every rank as the sum over the ranks (sum_over_ranks).
  const auto put = [](std::vector<float>& slots, size_t at, std::uint32_t value) {
    slots[2 * at] = static_cast<float>(value >> 16);
    slots[2 * at + 1] = static_cast<float>(value & 0xFFFFu);
  };
  const auto get = [](const std::vector<std::uint64_t>& sums, size_t at) {
    return static_cast<std::uint32_t>(sums[2 * at] << 16 | sums[2 * at + 1]);
  };
  const auto rank_slot = static_cast<size_t>(rank_);
  std::vector<float> mine(2 * static_cast<size_t>(world_), 0.0f);
  put(mine, rank_slot, whole.value());
  const std::vector<std::uint64_t> wholes = sum_over_ranks(comm, mine);
  std::vector<int> apart;
  for (int r = 1; r < world_; ++r) {
    if (get(wholes, static_cast<size_t>(r)) != get(wholes, 0)) apart.push_back(r);
  }
  if (apart.empty()) return "";
  // Some differ: rank 0's CRC of each tensor to every rank, then each rank's first tensor that differs.
  std::vector<float> rank0(2 * tensors.size(), 0.0f);
  if (rank_ == 0) {
    for (size_t i = 0; i < tensors.size(); ++i) put(rank0, i, crcs[i]);
  }
  const std::vector<std::uint64_t> reference = sum_over_ranks(comm, rank0);
  size_t first = 0;
  while (first < tensors.size() && crcs[first] == get(reference, first)) ++first;
  std::vector<float> firsts(static_cast<size_t>(world_), 0.0f);
  firsts[rank_slot] = static_cast<float>(first);
  const std::vector<std::uint64_t> where = sum_over_ranks(comm, firsts);
  std::string named = apart.size() > 1 ? "ranks " : "rank ";
  for (int r : apart) {
    const size_t t = where[static_cast<size_t>(r)];
    named += (r == apart.front() ? "" : ", ") + std::to_string(r) + " (first at " +
             (t < tensors.size() ? tensors[t].name : std::string("none: only their CRCs differ")) + ")";
  }
  return named;
}

std::vector<std::uint64_t> Trainer::sum_over_ranks(Communicator& comm, const std::vector<float>& mine) {
  // The collectives average floats: an average times the world size is the sum. fp32 holds each
  // count below 2^24 exactly and the average to a few parts in 1e7, so rounding recovers the exact
  // sum of counts below about a million.
  float* buffer = mine.size() <= host_scalars_.size() ? scalars_ : backend_.alloc_floats(mine.size());
  backend_.upload(buffer, mine.data(), mine.size());
  comm.all_reduce_average(buffer, mine.size());
  std::vector<float> averages(mine.size());
  backend_.download(averages.data(), buffer, averages.size());
  if (buffer != scalars_) backend_.free(buffer);
  std::vector<std::uint64_t> sums;
  for (float average : averages) sums.push_back(static_cast<std::uint64_t>(std::llround(double{average} * world_)));
  return sums;
}

void Trainer::flip_parameter_bit() {
  // The lowest bit of the first value of the middle tensor: the smallest change there is.
  const ParamTensor& t = model_->layout().tensors()[model_->layout().tensors().size() / 2];
  float value = 0;
  backend_.download(&value, model_->params() + t.offset, 1);
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  bits ^= 1u;
  std::memcpy(&value, &bits, sizeof bits);
  backend_.upload(model_->params() + t.offset, &value, 1);
  model_->refresh_weights();
  spdlog::warn("XTRAIN_FAULT_FLIP: rank {} flipped the lowest bit of {}'s first value", rank_, t.name);
}

double Trainer::average_scalar(Communicator& comm, double value) {
  const float x = static_cast<float>(value);
  backend_.upload(scalars_, &x, 1);
  comm.all_reduce_average(scalars_, 1);
  float out = 0;
  backend_.download(&out, scalars_, 1);
  return out;
}

int Trainer::bucket_id(Span span) const {
  const ParamLayout& layout = model_->layout();
  for (int l = 0; l < spec_.model.n_layer; ++l) {
    if (layout.layer_span(l).offset == span.offset) return l;
  }
  return spec_.model.n_layer;
}

Trainer::StepOutcome Trainer::train_step(Communicator& comm, BusyClock& busy, long step, bool stop_here) {
  using Clock = std::chrono::steady_clock;
  Heartbeat& live = report_.heartbeat();
  busy.start();
  const int T = spec_.model.seq_len;
  const std::vector<std::uint64_t> starts = sampler_->draw(spec_.train.batch_size);
  model_->zero_grads();
  float* grads = model_->grads();
  const auto start_bucket = [&](Span s) {
    comm.start_all_reduce_average(GradBucket{grads + s.offset, s.count, bucket_id(s)});
  };
  in_step_ = true;
  for (int micro = 0; micro < accum_; ++micro) {
    live.micro_step(micro);
    gather_micro_batch(data_.train, T, starts, rank_, world_, micro, micro_batch_, inputs_.data(), targets_.data());
    const auto c0 = Clock::now();
    model_->forward(inputs_.data(), targets_.data(), micro_batch_);
    const bool last = micro + 1 == accum_;
    // no_sync: the earlier micro-steps only accumulate locally; the last one hands each layer's
    // finished gradient to the communicator, so every parameter is all-reduced once per step.
    model_->backward(1.0f / static_cast<float>(accum_), last ? start_bucket : std::function<void(Span)>{});
    fault_.after_micro_step(rank_, seconds_since(c0));
  }
  in_step_ = false;
  StepOutcome out = finish_step(comm, stop_here, busy);
  const double lr = learning_rate(spec_.train, step);
  if (!std::isfinite(out.loss) || !std::isfinite(out.grad_norm)) {
    // Every rank holds the same averaged loss and gradient norm, so every rank stops here alike.
    // An update with them would make every parameter NaN, and each checkpoint after it worthless
    // (checkpoint.keep would rotate the sound ones away).
    throw TrainingDiverged(diverged_message(step + 1, out.loss, out.grad_norm, spec_.train, checkpoint_step_,
                                            spec_.checkpoint.resume));
  }
  live.phase(WorkerPhase::kOptimizer);
  const float clip = clip_scale(out.grad_norm, spec_.train.grad_clip);
  adamw_->step(*model_, static_cast<float>(lr), clip);
  return out;
}

Trainer::StepOutcome Trainer::finish_step(Communicator& comm, bool stop_here, const BusyClock& busy) {
  // Host waits of a step, on every world size (docs/architecture.md, "Host waits"): the loss's
  // download, and one download after the collectives. Nothing waits after the optimizer: the
  // next step's loss download covers it.
  Heartbeat& live = report_.heartbeat();
  StepOutcome out;
  // The loss's download waits for this rank's forward and backward and for nothing else: the
  // gradients' all-reduces run beside backward (Gloo's thread, NCCL's stream) and nothing has
  // waited for them yet. So the time to here is the rank's busy time, without its waits for peers
  // (and without the time the communication threads took from this thread: worker/train/busy_clock.hpp).
  const float loss = static_cast<float>(model_->take_loss());
  out.busy_ms = busy.elapsed_ms();

  // One small all-reduce, queued behind the gradients' buckets, carries the loss, whether any rank
  // was asked to stop, and every rank's busy time (each rank fills its own slot, scaled by the
  // world size so the average is exact).
  const size_t averaged = averaged_step_scalars(world_);
  std::fill(host_scalars_.begin(), host_scalars_.end(), 0.0f);
  host_scalars_[0] = loss;
  host_scalars_[1] = stop_here ? 1.0f : 0.0f;
  host_scalars_[2 + static_cast<size_t>(rank_)] = static_cast<float>(out.busy_ms * world_);
  backend_.upload(scalars_, host_scalars_.data(), averaged);
  live.phase(WorkerPhase::kGradientWait);
  comm.start_all_reduce_average(GradBucket{scalars_, averaged, -1});
  comm.finish_all_reduces();
  // The global gradient norm of the averaged gradients lands beside the scalars, so the one
  // download below brings both: a CUDA rank's wait for its peers happens there.
  float* const sum_squares = scalars_ + averaged;
  backend_.sum_squares_into(sum_squares, model_->grads(), model_->layout().total());
  live.phase(WorkerPhase::kStepSync);
  backend_.download(host_scalars_.data(), scalars_, host_scalars_.size());

  out.loss = host_scalars_[0];
  out.stop = host_scalars_[1] > 0;
  out.rank_busy_ms.assign(host_scalars_.begin() + 2, host_scalars_.begin() + static_cast<std::ptrdiff_t>(averaged));
  double squares = 0;
  std::memcpy(&squares, host_scalars_.data() + averaged, sizeof squares);
  out.grad_norm = std::sqrt(squares);
  return out;
}

double Trainer::evaluate(Communicator& comm) {
  const int T = spec_.model.seq_len;
  const int micro_steps = static_cast<int>(val_starts_.size()) / (world_ * micro_batch_);
  for (int micro = 0; micro < micro_steps; ++micro) {
    gather_micro_batch(data_.val, T, val_starts_, rank_, world_, micro, micro_batch_, inputs_.data(),
                       targets_.data());
    model_->forward(inputs_.data(), targets_.data(), micro_batch_);
    report_.heartbeat().beat();  // validation may take many steps' time (train.eval_batches)
  }
  return average_scalar(comm, model_->take_loss());
}

ChoiceAccuracy Trainer::score_multiple_choice(Communicator& comm) {
  const ChoiceScore mine =
      score_choices(*model_, choices_, [this](std::uint64_t, std::uint64_t) { report_.heartbeat().beat(); });
  const std::vector<std::uint64_t> sums =
      sum_over_ranks(comm, {static_cast<float>(mine.correct), static_cast<float>(mine.examples)});
  const ChoiceAccuracy all{sums[0], sums[1]};
  if (all.examples != choices_total_) {
    throw std::runtime_error("multiple-choice validation: the ranks scored " + std::to_string(all.examples) +
                             " examples, expected " + std::to_string(choices_total_));
  }
  return all;
}

void Trainer::save(Communicator& comm, long step) {
  report_.heartbeat().phase(WorkerPhase::kCheckpointWait);  // the replica check waits for every rank
  check_replicas_agree(comm, step);
  const auto t0 = std::chrono::steady_clock::now();
  std::string dir;
  if (rank_ == 0) {
    report_.heartbeat().phase(WorkerPhase::kCheckpoint);
    TrainState state;
    state.step = step;
    state.adam_t = adamw_->step_count();
    state.sampler = sampler_->state();
    state.train_tokens = data_.train.count;
    dir = save_checkpoint(run_dir_, spec_, model_->layout(), model_->params(), adamw_->m(), adamw_->v(), state,
                          tokenizer_files_, host_access(backend_));
  }
  // Nobody runs ahead (and nobody exits) before the checkpoint is complete.
  report_.heartbeat().phase(WorkerPhase::kCheckpointWait);
  {
    const BeatWhileWaiting beating(report_.heartbeat());
    comm.barrier();
  }
  checkpoint_step_ = step;
  report_.checkpoint(step, dir, seconds_since(t0));
}

std::string Trainer::param_digest() {
  Fnv1a digest;
  host_access(backend_).read(model_->params(), model_->layout().total(),
                             [&](const float* host, size_t, size_t n) { digest.add(host, n * sizeof(float)); });
  return digest.hex();
}

std::optional<std::string> Trainer::sample() {
  const auto& s = spec_.sample;
  if (s.tokens <= 0 || rank_ != 0) return std::nullopt;
  if (!text_.has_text()) {
    spdlog::info("sample: skipped (the data is token shards: name their tokenizer with the tokenizer key)");
    return std::nullopt;
  }
  SampleOptions o;
  o.tokens = s.tokens;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.seed = static_cast<std::uint64_t>(spec_.train.seed);
  o.end_token = text_.end_of_text();
  report_.heartbeat().phase(WorkerPhase::kSampling);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::int32_t> tokens = sample_tokens(*model_, prompt_, o);
  const std::string text = printable(text_.decode(tokens));
  const bool ended = static_cast<int>(tokens.size()) < s.tokens;
  spdlog::info("sample: {} {}{} at temperature {}, top-k {}, seed {}, {:.1f} s:", tokens.size(),
               data_.byte_level ? "bytes" : "tokens", ended ? " (then <|endoftext|>)" : "", s.temperature, s.top_k,
               o.seed, seconds_since(t0));
  // The text itself, unadorned so it reads as text, on the log's stream so it stays in order.
  std::fputs(((text_.encodes() ? printable(s.prompt) : "") + text + "\n").c_str(), stderr);
  return text;
}

RankResult Trainer::run(Communicator& comm, const std::atomic<bool>& stop_requested) {
  const auto& t = spec_.train;
  if (rank_ == 0) {
    spdlog::info("{}", describe());
    if (!resumed_from_.empty()) {
      spdlog::info("resumed from {} at step {}: {} verified and loaded in {:.2f} s{}", resumed_from_, start_step_,
                   format_bytes(checkpoint_bytes(resumed_from_)), resume_seconds_,
                   spec_.model.init_from.empty() ? "" : " (model.init_from is not read when resuming)");
    }
    if (!initialised_from_.empty()) {
      spdlog::info("weights from {}; the optimizer starts fresh (AdamW moments zero, step 0)", initialised_from_);
    }
  }
  Heartbeat& live = report_.heartbeat();
  live.set_plan(t.steps, accum_, spec_.model.n_layer, rank_ == 0 ? world_ : 0);
  comm.set_bucket_observer([&live](int bucket) { live.set_comm_bucket(bucket); });
  live.phase(WorkerPhase::kConnecting);
  adopt_rank0_start(comm);
  if (fault_.flips_after_step(rank_, start_step_)) flip_parameter_bit();
  verify_replicas(comm);
  live.beat();

  RankResult result;
  result.rank = rank_;
  result.step = start_step_;
  result.status = "completed";
  report_.start_training(start_step_, t.steps, static_cast<long>(t.batch_size) * spec_.model.seq_len, t.log_every);
  const int every = spec_.checkpoint.every;  // 0: only after the last step
  if (start_step_ >= t.steps && rank_ == 0) {
    spdlog::info("nothing to train: the checkpoint is at step {} and train.steps is {}", start_step_, t.steps);
  }

  BusyClock busy;  // of this thread, which trains
  for (long step = start_step_ + 1; step <= t.steps; ++step) {
    current_step_ = step;
    live.begin_step(step);
    live.beat();
    fault_.at_step_start(rank_, step);
    const auto t0 = std::chrono::steady_clock::now();
    StepOutcome o = train_step(comm, busy, step - 1, stop_requested.load());
    if (fault_.flips_after_step(rank_, step)) flip_parameter_bit();
    completed_steps_ = step;
    result.step = step;
    result.loss = o.loss;
    report_.step({step, o.loss, learning_rate(t, step - 1), o.grad_norm, seconds_since(t0) * 1000.0, o.busy_ms,
                  rank_ == 0 ? std::move(o.rank_busy_ms) : std::vector<double>{}});

    if (t.eval_every > 0 && (step % t.eval_every == 0 || step == t.steps)) {
      live.phase(WorkerPhase::kValidation);
      const auto v0 = std::chrono::steady_clock::now();
      result.val_loss = evaluate(comm);
      if (bits_per_nat_ > 0) result.val_bpb = *result.val_loss * bits_per_nat_;
      if (choices_total_ > 0) result.mc = score_multiple_choice(comm);
      report_.validation(step, *result.val_loss, result.val_bpb, result.mc, seconds_since(v0));
    }
    if (o.stop || step == t.steps || (every > 0 && step % every == 0)) {
      save(comm, step);
    }
    if (o.stop) {
      if (rank_ == 0) spdlog::info("stop requested (SIGUSR1): checkpoint written at step {}; exiting", step);
      result.status = "preempted";
      break;
    }
  }

  result.param_digest = param_digest();
  result.extra = {{"world_size", world_},
                  {"backend", backend_.name()},
                  {"communicator", comm.name()},
                  {"start_step", start_step_},
                  {"tokens_per_s", report_.tokens_per_second()},
                  {"train_s", report_.training_seconds()}};
  if (result.status == "completed") {
    if (const auto text = sample()) result.extra["sample"] = *text;
  }
  live.phase(WorkerPhase::kDone);
  return result;
}

}  // namespace xtrain
