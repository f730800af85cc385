#include "worker/server/scheduler.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/json_log.h"
#include "common/status_macros.h"
#include "worker/server/scheduling_policy.h"
#include "worker/speculative/verification.h"

namespace walsh {
namespace {

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool Expired(const ActiveRequest& r) {
  return r.deadline && std::chrono::system_clock::now() >= *r.deadline;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(Engine* engine,
                                                             const CacheOptions& caches,
                                                             const SchedulerOptions& options,
                                                             WorkerMetrics* metrics) {
  ASSIGN_OR_RETURN(std::unique_ptr<KvManager> kv, MakeKvManager(*engine, caches));
  if (const absl::Status canary = SequenceRunner(engine, kv.get()).Canary(); !canary.ok()) {
    return absl::Status(canary.code(), absl::StrCat("canary step: ", canary.message()));
  }
  return std::unique_ptr<Scheduler>(new Scheduler(engine, std::move(kv), options, metrics));
}

Scheduler::Scheduler(Engine* engine, std::unique_ptr<KvManager> kv, const SchedulerOptions& options,
                     WorkerMetrics* metrics)
    : engine_(engine),
      kv_(std::move(kv)),
      sequences_(engine, kv_.get()),
      cache_size_{.page_size = kv_->page_size(),
                  .pages = kv_->total_pages(),
                  .bytes_per_token = sequences_.kv_bytes_per_token(),
                  .prefix_caching = kv_->prefix_caching()},
      options_(options),
      metrics_(metrics) {
  engine_stats_ = kv_->Stats();
  UpdateGauges();
  {
    MutexLock l(&mask_waker_->mu);
    mask_waker_->scheduler = this;
  }
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() {
  {
    MutexLock l(&mask_waker_->mu);
    mask_waker_->scheduler = nullptr;
  }
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
  MutexLock l(&mu_);
  for (auto& r : running_) EndWithStatus(*r, absl::UnavailableError("worker stopped"), "error");
  for (auto& r : waiting_) EndWithStatus(*r, absl::UnavailableError("worker stopped"), "error");
  DeliverEvents();
}

void Scheduler::DeliverEvents() {
  if (outbox_.empty()) return;
  std::vector<std::function<void()>> events;
  events.swap(outbox_);
  mu_.Unlock();
  for (const auto& event : events) event();
  mu_.Lock();
}

absl::Status Scheduler::Submit(std::shared_ptr<ActiveRequest> r) {
  {
    MutexLock l(&mu_);
    if (!admitting_) return absl::UnavailableError("the worker is draining");
    if (static_cast<int64_t>(waiting_.size()) >= options_.max_queue) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the queue is full (", options_.max_queue, " waiting requests)"));
    }
    r->arrival = arrivals_++;
    // An image's tokens go to the engine as its cache keys (image_prompt.h).
    r->tokens = r->images ? KeyImageTokens(r->prompt, *r->images) : r->prompt;
    for (int32_t id : r->generation->output()) r->tokens.push_back(id);
    waiting_.push_back(std::move(r));
    ++wakes_;
  }
  cv_.SignalAll();
  return absl::OkStatus();
}

void Scheduler::StopAdmitting() {
  MutexLock l(&mu_);
  admitting_ = false;
}

void Scheduler::Wake() {
  {
    MutexLock l(&mu_);
    ++wakes_;
  }
  cv_.SignalAll();
}

void Scheduler::CancelAll(const absl::Status& status) {
  MutexLock l(&mu_);
  for (auto& r : waiting_) r->cancelled = true;
  // Running requests are ended by the loop at its next step; mark them.
  cancel_all_status_ = status;
  cancel_all_ = true;
  ++wakes_;
  cv_.SignalAll();
}

SchedulerLoad Scheduler::Load() const {
  MutexLock l(&mu_);
  SchedulerLoad load;
  load.running = running_count_;
  load.waiting = static_cast<int64_t>(waiting_.size());
  load.engine = engine_stats_;
  int64_t tokens = 0;
  const auto cutoff = Clock::now() - std::chrono::seconds(10);
  for (const auto& [t, n] : token_times_) {
    if (t >= cutoff) tokens += n;
  }
  load.tokens_per_second = tokens / 10.0;
  return load;
}

double Scheduler::StepSeconds() const {
  const int64_t started = step_started_ns_.load(std::memory_order_relaxed);
  if (started == 0) return 0;
  return std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(started))
      .count();
}

absl::Status Scheduler::StepFailure(const absl::Status& s) const {
  // A lost tensor-parallel rank is the worker's failure, not the request's: the gateway resumes
  // the stream elsewhere.
  if (engine_->broken()) return absl::UnavailableError(s.message());
  return absl::InternalError(s.message());
}

void Scheduler::Loop() {
  MutexLock l(&mu_);
  for (;;) {
    while (!(stop_ || !waiting_.empty() || !running_.empty() || cancel_all_)) cv_.Wait(&mu_);
    if (stop_) return;
    const uint64_t wakes = wakes_;
    step_started_ns_.store(Clock::now().time_since_epoch().count() | 1, std::memory_order_relaxed);
    Step();
    step_started_ns_.store(0, std::memory_order_relaxed);
    DeliverEvents();
    // Nothing ran but held requests: wait for a sink with room (its writer wakes us), a cancel or
    // a new request; deadlines are looked at again within 100 ms.
    if (only_held_ && wakes_ == wakes) cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  }
}

void Scheduler::Release(ActiveRequest& r) {
  if (options_.drafter != nullptr) options_.drafter->Forget(r.arrival);
  if (r.sequence) {
    (void)sequences_.RemoveSequence(*r.sequence);
    r.sequence.reset();
  }
  r.fed = 0;
  r.deferred_logits.clear();  // recomputed, if it runs again, by its prefill
}

void Scheduler::EndWithStatus(ActiveRequest& r, const absl::Status& status, const char* reason) {
  Release(r);
  metrics_->requests.counter({reason}).Inc();
  metrics_->e2e_latency.Observe(Since(r.arrived_at));
  LogJson("info", "request_end",
          {{"request_id", r.request_id},
           {"finish_reason", reason},
           {"status", std::string(status.message())}});
  outbox_.push_back([sink = r.sink, status] { sink->Failed(status); });
}

void Scheduler::TakeSnapshot(ActiveRequest& r, const char* at) {
  absl::StatusOr<bool> taken = sequences_.Snapshot(*r.sequence, std::string_view(at) == "interval");
  if (taken.ok() && *taken) metrics_->prefix_snapshots.counter({at}).Inc();
  if (!taken.ok()) {
    LogJson("warning", "snapshot_failed",
            {{"request_id", r.request_id}, {"error", std::string(taken.status().message())}});
  }
}

void Scheduler::Finish(ActiveRequest& r, FinishReason reason, const std::string& matched) {
  if (r.sequence &&
      SnapshotAtFinish(r.prefix, static_cast<int64_t>(r.fed), options_.prefix_min_tokens)) {
    TakeSnapshot(r, "finish");
  }
  Release(r);
  RequestFinished f;
  f.reason = reason;
  f.matched_stop = matched;
  f.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  f.completion_tokens = static_cast<int64_t>(r.generation->output().size());
  const double total = Since(r.arrived_at);
  f.queue_seconds = std::chrono::duration<double>(r.admitted_at - r.arrived_at).count();
  f.time_to_first_token_seconds =
      std::chrono::duration<double>(r.first_token_at - r.arrived_at).count();
  f.total_seconds = total;
  metrics_->requests.counter({FinishReasonName(reason)}).Inc();
  metrics_->e2e_latency.Observe(total);
  LogJson("info", "request_end",
          {{"request_id", r.request_id},
           {"finish_reason", FinishReasonName(reason)},
           {"completion_tokens", r.generation->output().size()},
           {"seconds", total}});
  outbox_.push_back([sink = r.sink, f] { sink->Finished(f); });
}

void Scheduler::DropFinished() {
  // Called with mu_ held. Ends what was cancelled, expired, or swept by CancelAll.
  auto ended = [&](ActiveRequest& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (cancel_all_) {
      EndWithStatus(r, cancel_all_status_, "cancelled");
    } else if (r.cancelled) {
      EndWithStatus(r, absl::CancelledError("cancelled"), "cancelled");
    } else if (Expired(r)) {
      EndWithStatus(r, absl::DeadlineExceededError("deadline exceeded"), "cancelled");
    } else {
      return false;
    }
    return true;
  };
  std::erase_if(waiting_,
                [&](const auto& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended(*r); });
  std::erase_if(running_,
                [&](const auto& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended(*r); });
  cancel_all_ = false;
}

void Scheduler::Admit() {
  // Called with mu_ held.
  std::stable_sort(waiting_.begin(), waiting_.end(), [](const auto& a, const auto& b) {
    return AdmittedBefore({a->priority, a->arrival}, {b->priority, b->arrival});
  });
  while (!waiting_.empty()) {
    ActiveRequest& r = *waiting_.front();
    const EngineStats s = kv_->Stats();
    const Capacity capacity{.running = static_cast<int64_t>(running_.size()),
                            .max_running = options_.max_running,
                            .state_slots_free = s.state_slots_total - s.state_slots_used,
                            .kv_pages_free = s.kv_pages_total - s.kv_pages_used,
                            .kv_pages_total = s.kv_pages_total,
                            .page_size = kv_->page_size(),
                            .uses_kv = engine_->model().attention_layers() > 0,
                            .shared_pages = kv_->SharedPagesInUse(r.tokens),
                            .kv_pages_reserved = ReservedPages()};
    const Admission admission = DecideAdmission(static_cast<int64_t>(r.tokens.size()), capacity);
    if (admission == Admission::kWait) break;
    if (admission == Admission::kNeverFits) {
      EndWithStatus(
          r,
          absl::ResourceExhaustedError(absl::StrCat(
              "the request's ", r.tokens.size(), " tokens need more KV cache than the worker has (",
              capacity.kv_pages_total, " pages of ", capacity.page_size, " tokens)")),
          "error");
      waiting_.pop_front();
      continue;
    }
    auto seq = sequences_.AddSequence(r.tokens, &r.prefix);
    if (!seq.ok()) {
      // No slot free: it waits. Anything else (a lost tensor-parallel rank) ends it.
      if (seq.status().code() == absl::StatusCode::kResourceExhausted && !engine_->broken()) break;
      EndWithStatus(r, StepFailure(seq.status()), "error");
      waiting_.pop_front();
      continue;
    }
    r.sequence = *seq;
    r.fed = static_cast<size_t>(r.prefix.hit_tokens);
    if (r.prefix.outcome != PrefixOutcome::kOff) {
      metrics_->prefix_queries.Inc(static_cast<double>(r.tokens.size()));
      metrics_->prefix_hits.Inc(static_cast<double>(r.prefix.hit_tokens));
      metrics_->prefix_lookups.counter({PrefixOutcomeName(r.prefix.outcome)}).Inc();
    }
    r.snapshot_points =
        PlanSnapshots(static_cast<int64_t>(r.tokens.size()), r.prefix, capacity.page_size,
                      options_.prefix_min_tokens, options_.prefix_snapshot_interval);
    if (r.admitted_at == Clock::time_point{}) {
      r.admitted_at = Clock::now();
      metrics_->queue_time.Observe(Since(r.arrived_at));
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

int64_t Scheduler::ReservedPages() const {
  int64_t reserved = 0;
  for (const auto& r : running_) {
    if (!r->sequence) continue;
    reserved += PagesStillToTake(static_cast<int64_t>(r->tokens.size()),
                                 kv_->PagesHeld(*r->sequence), kv_->page_size());
  }
  return reserved;
}

bool Scheduler::Preempt() {
  std::vector<uint64_t> arrivals;
  for (const auto& r : running_) arrivals.push_back(r->arrival);
  const int64_t index = PreemptionVictim(arrivals);
  if (index < 0) return false;
  // It keeps its outputs and recomputes.
  auto victim = running_.begin() + index;
  std::shared_ptr<ActiveRequest> r = *victim;
  running_.erase(victim);
  Release(*r);
  metrics_->preemptions.Inc();
  LogJson("info", "preempted", {{"request_id", r->request_id}});
  waiting_.push_front(std::move(r));
  return true;
}

void Scheduler::UpdateGauges() {
  engine_stats_ = kv_->Stats();
  running_count_ = static_cast<int64_t>(running_.size());
  metrics_->kv_pages_used.Set(engine_stats_.kv_pages_used);
  metrics_->kv_pages_total.Set(engine_stats_.kv_pages_total);
  metrics_->state_slots_used.Set(engine_stats_.state_slots_used);
  metrics_->state_slots_total.Set(engine_stats_.state_slots_total);
  metrics_->running.Set(running_count_);
  metrics_->waiting.Set(static_cast<double>(waiting_.size()));
  metrics_->vllm_running.Set(running_count_);
  metrics_->vllm_waiting.Set(static_cast<double>(waiting_.size()));
  metrics_->vllm_kv_usage.Set(engine_stats_.kv_pages_total > 0
                                  ? static_cast<double>(engine_stats_.kv_pages_used) /
                                        static_cast<double>(engine_stats_.kv_pages_total)
                                  : 0.0);
  const PrefixCacheStats p = kv_->PrefixStats();
  metrics_->prefix_cache_bytes.gauge({"pages"}).Set(static_cast<double>(p.page_bytes));
  metrics_->prefix_cache_bytes.gauge({"snapshots"}).Set(static_cast<double>(p.snapshot_bytes));
  metrics_->prefix_cache_entries.gauge({"pages"}).Set(static_cast<double>(p.pages));
  metrics_->prefix_cache_entries.gauge({"snapshots"}).Set(static_cast<double>(p.snapshots));
  metrics_->prefix_evictions.counter({"page"}).Inc(
      static_cast<double>(p.page_evictions - prefix_seen_.page_evictions));
  metrics_->prefix_evictions.counter({"snapshot"})
      .Inc(static_cast<double>(p.snapshot_evictions - prefix_seen_.snapshot_evictions));
  prefix_seen_ = p;
  const BackendMemory m = engine_->Memory();
  metrics_->device_memory.gauge({"used"}).Set(static_cast<double>(m.device_used));
  metrics_->device_memory.gauge({"total"}).Set(static_cast<double>(m.device_total));
  metrics_->device_memory.gauge({"weights"}).Set(static_cast<double>(m.weights));
  metrics_->device_memory.gauge({"kv_cache"}).Set(static_cast<double>(m.kv_cache));
  metrics_->device_memory.gauge({"state"}).Set(static_cast<double>(m.state));
  for (int r = 0; r < engine_->local_ranks(); ++r) {
    const BackendMemory rm = engine_->RankMemory(r);
    metrics_->rank_cache.gauge({std::to_string(r), "kv_cache"})
        .Set(static_cast<double>(rm.kv_cache));
    metrics_->rank_cache.gauge({std::to_string(r), "state"}).Set(static_cast<double>(rm.state));
  }
}

// plan -> draft -> batch -> reserve -> forward (and verify) -> commit.
void Scheduler::Step() {
  only_held_ = false;
  DropFinished();
  // Right after a preemption, let the running batch make progress before admitting again.
  if (!preempted_this_step_) Admit();
  preempted_this_step_ = false;
  SampleDeferred();
  UpdateGauges();
  if (running_.empty()) return;
  StepWork w = PlanStep();
  DraftStep(w);
  BatchStep(w);
  metrics_->held_requests.Set(static_cast<double>(w.held));
  if (w.batch.empty()) {
    only_held_ = w.held + w.awaiting_masks > 0;  // a ready mask wakes the loop too
    return;
  }
  if (!ReserveStep(w)) return;
  DeliverEvents();  // what DropFinished and Admit decided, before the step's wait
  mu_.Unlock();
  RunStep(w);
  mu_.Lock();
  if (!w.out.ok()) {
    for (ActiveRequest* r : w.members) EndWithStatus(*r, StepFailure(w.out.status()), "error");
    std::erase_if(running_, [&](const auto& p) { return !p->sequence; });
    return;
  }
  CommitStep(w);
}

Scheduler::StepWork Scheduler::PlanStep() {
  StepWork w;
  // Decode tokens first (with their drafts), then prefill chunks, within the token budget.
  const bool speculate = options_.speculative_tokens > 0 && options_.drafter != nullptr &&
                         static_cast<int64_t>(running_.size()) <= options_.speculative_max_batch;
  // A speculative step keeps a state plane per draft, from the free state slots (as
  // UpdateGauges just read them).
  int64_t planes_free = engine_stats_.state_slots_total - engine_stats_.state_slots_used;
  for (size_t i = 0; i < running_.size(); ++i) {
    ActiveRequest& r = *running_[i];
    if (!r.deferred_logits.empty()) {  // waits for its mask (SampleDeferred)
      ++w.awaiting_masks;
      w.candidates.push_back({.remaining = 0, .decode = false, .until_snapshot = -1});
      continue;
    }
    while (!r.snapshot_points.empty() &&
           r.snapshot_points.front().position <= static_cast<int64_t>(r.fed)) {
      r.snapshot_points.erase(r.snapshot_points.begin());
    }
    const int64_t remaining = static_cast<int64_t>(r.tokens.size() - r.fed);
    const bool decode = remaining == 1 && !r.generation->output().empty();
    if (decode && !r.sink->HasRoom()) {  // its client has not read: no more output for now
      ++w.held;
      w.candidates.push_back({.remaining = 0, .decode = false, .until_snapshot = -1});
      continue;
    }
    if (const int64_t limit = decode && speculate ? DraftLimit(r, planes_free) : 0; limit > 0) {
      w.asks.push_back({.key = r.arrival, .tokens = r.tokens, .max_tokens = limit});
      w.asked.push_back(i);
      planes_free -= limit;
    }
    w.candidates.push_back(
        {.remaining = remaining,
         .decode = decode,
         .until_snapshot = r.snapshot_points.empty()
                               ? -1
                               : r.snapshot_points.front().position - static_cast<int64_t>(r.fed)});
  }
  return w;
}

void Scheduler::DraftStep(StepWork& w) {
  w.drafts.assign(running_.size(), {});
  if (!w.asks.empty()) {
    // A draft model runs steps of its own: not under the lock. Only this thread touches the
    // running requests' tokens.
    DeliverEvents();  // what DropFinished and Admit decided goes out first
    mu_.Unlock();
    std::vector<std::vector<int32_t>> proposed = options_.drafter->Draft(w.asks);
    mu_.Lock();
    const int64_t vocab = engine_->model().config().vocab_size;
    for (size_t j = 0; j < w.asks.size() && j < proposed.size(); ++j) {
      w.drafts[w.asked[j]] = TrimDraft(std::move(proposed[j]), vocab, w.asks[j].max_tokens);
    }
  }
  std::vector<bool> decode;
  for (const BatchCandidate& c : w.candidates) decode.push_back(c.decode);
  const std::vector<int64_t> kept = ShareDraftBudget(options_.max_batch_tokens, decode, w.drafts);
  for (size_t i = 0; i < w.candidates.size(); ++i) w.candidates[i].remaining += kept[i];
}

void Scheduler::BatchStep(StepWork& w) {
  const std::vector<int64_t> take = PlanBatch(w.candidates, options_.max_batch_tokens);
  for (size_t pass = 0; pass < 2; ++pass) {  // the engine sees decodes first, as planned
    for (size_t i = 0; i < running_.size(); ++i) {
      if (take[i] == 0 || w.candidates[i].decode != (pass == 0)) continue;
      ActiveRequest& r = *running_[i];
      if (w.candidates[i].decode && !w.drafts[i].empty()) {
        // The token sampled last, then the drafts the budget leaves room for: verified at once.
        std::vector<int32_t> d(w.drafts[i].begin(), w.drafts[i].begin() + (take[i] - 1));
        std::vector<int32_t> input = {r.tokens[r.fed]};
        input.insert(input.end(), d.begin(), d.end());
        w.batch.push_back({*r.sequence, std::move(input), /*all_logits=*/!d.empty(),
                           /*keep_states=*/!d.empty()});
        w.member_drafts.push_back(std::move(d));
      } else {
        w.batch.push_back(
            {*r.sequence,
             std::vector<int32_t>(r.tokens.begin() + r.fed, r.tokens.begin() + r.fed + take[i]),
             false});
        w.member_drafts.emplace_back();
      }
      if (r.images) AttachImageInputs(*r.images, static_cast<int64_t>(r.fed), w.batch.back());
      w.members.push_back(&r);
    }
  }
}

bool Scheduler::ReserveStep(StepWork& w) {
  // The step's pages (and a speculative step's state planes) are reserved before it runs, so it
  // cannot run out of them mid-way. When the pool cannot give them, the last to arrive gives way
  // and the next step is planned again; a request running alone that outgrows the whole pool
  // ends.
  absl::Status reserved = kv_->Reserve(w.batch);
  if (!reserved.ok()) {
    // Drafts are never worth a preemption: the step runs without them if that fits.
    bool drafted = false;
    for (size_t i = 0; i < w.batch.size(); ++i) {
      if (w.member_drafts[i].empty()) continue;
      w.batch[i] = {w.batch[i].id, {w.batch[i].tokens[0]}, false, false};
      w.member_drafts[i].clear();
      drafted = true;
    }
    if (drafted) reserved = kv_->Reserve(w.batch);
  }
  if (reserved.ok()) return true;
  if (Preempt()) {
    preempted_this_step_ = true;
    return false;
  }
  for (ActiveRequest* r : w.members) {
    EndWithStatus(*r,
                  absl::ResourceExhaustedError(absl::StrCat(
                      "the request outgrew the KV cache (", kv_->total_pages(), " pages of ",
                      kv_->page_size(), " tokens): ", reserved.message())),
                  "error");
  }
  std::erase_if(running_, [&](const auto& p) { return !p->sequence; });
  return false;
}

void Scheduler::RunStep(StepWork& w) {
  const size_t n = w.members.size();
  // Members whose input reaches their last token: this step samples them.
  w.samples.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    ActiveRequest& r = *w.members[i];
    w.samples[i] = r.fed + w.batch[i].tokens.size() - w.member_drafts[i].size() == r.tokens.size();
    if (w.samples[i] && options_.mask_prefetcher != nullptr) {
      r.generation->PrefetchMask(*options_.mask_prefetcher, [waker = mask_waker_] {
        MutexLock l(&waker->mu);
        if (waker->scheduler != nullptr) waker->scheduler->Wake();
      });
    }
  }
  const auto step_start = Clock::now();
  w.out = sequences_.Forward(w.batch);
  w.seconds = Since(step_start);
  w.sampled.assign(n, {});
  w.rolled_back.assign(n, absl::OkStatus());
  w.sampling.assign(n, absl::OkStatus());
  w.deferred.assign(n, false);
  if (!w.out.ok()) {
    // Their requests end under the lock: a mask still computing is not waited for there.
    for (ActiveRequest* r : w.members) r->generation->DropPrefetchedMask();
    return;
  }
  // Sampling, logprobs, detokenizing and stop rules run outside the lock too: only this thread
  // touches a running request's generation and the engine (other threads only flag a
  // cancellation). A speculative member keeps what verification accepted and rolls back the
  // rest.
  size_t row = 0;
  for (size_t i = 0; i < n; ++i) {
    ActiveRequest& r = *w.members[i];
    const size_t rows = w.batch[i].all_logits ? w.batch[i].tokens.size() : 1;
    // A mask still computing holds up its own request, not the step: its logits wait for it.
    // (A speculative member's later rows need masks after its first token's: it waits.)
    w.deferred[i] = w.samples[i] && w.member_drafts[i].empty() && !r.generation->MaskReady();
    if (w.deferred[i]) {
      r.deferred_logits.assign(w.out->RowLogits(row), w.out->RowLogits(row) + w.out->vocab);
    } else if (w.samples[i]) {
      w.sampling[i] = SampleWhileDraftsHold(*r.generation, w.out->RowLogits(row), w.out->vocab,
                                            rows, w.member_drafts[i], &w.sampled[i]);
    }
    if (w.batch[i].keep_states) {
      w.rolled_back[i] =
          sequences_.Rollback(*r.sequence, static_cast<int64_t>(r.fed + w.sampled[i].size()));
    }
    row += rows;
  }
}

void Scheduler::RecordVerified(ActiveRequest& r, const std::vector<int32_t>& drafts,
                               const std::vector<GeneratedToken>& sampled) {
  const size_t accepted = AcceptedDrafts(sampled, drafts);
  metrics_->spec_drafts.Inc();
  metrics_->spec_draft_tokens.Inc(static_cast<double>(drafts.size()));
  metrics_->spec_accepted_tokens.Inc(static_cast<double>(accepted));
  for (size_t j = 0; j < accepted; ++j) {
    metrics_->spec_accepted_at.counter({std::to_string(j + 1)}).Inc();
  }
  RecordVerification(r.draft_backoff, static_cast<int64_t>(drafts.size()),
                     static_cast<int64_t>(accepted), options_.speculative_min_acceptance);
}

void Scheduler::CommitStep(StepWork& w) {
  metrics_->step_duration.Observe(w.seconds);
  int64_t step_tokens = 0;
  for (const auto& b : w.batch) step_tokens += static_cast<int64_t>(b.tokens.size());
  metrics_->batch_size.Observe(static_cast<double>(step_tokens));

  int64_t generated = 0;
  for (size_t i = 0; i < w.members.size(); ++i) {
    ActiveRequest& r = *w.members[i];
    if (!w.sampling[i].ok()) {
      EndSamplingFailed(r, w.sampling[i]);
      continue;
    }
    if (!w.rolled_back[i].ok()) {
      EndWithStatus(r, absl::InternalError(w.rolled_back[i].message()), "error");
      continue;
    }
    if (w.deferred[i]) metrics_->constraint_deferred.Inc();
    const std::vector<int32_t>& d = w.member_drafts[i];
    if (!d.empty()) RecordVerified(r, d, w.sampled[i]);
    // A speculative member kept the sampled token and the accepted drafts: one per token it
    // sampled. A plain one fed its whole input.
    const size_t fed_now = d.empty() ? w.batch[i].tokens.size() : w.sampled[i].size();
    if (r.fed < r.prompt.size()) {
      metrics_->prompt_tokens.Inc(
          static_cast<double>(std::min(r.fed + fed_now, r.prompt.size()) - r.fed));
    }
    r.fed += fed_now;
    if (!r.snapshot_points.empty() &&
        static_cast<int64_t>(r.fed) == r.snapshot_points.front().position) {
      TakeSnapshot(r, r.snapshot_points.front().at);
      r.snapshot_points.erase(r.snapshot_points.begin());
    }
    if (r.fed < r.tokens.size()) continue;  // more prefill to come
    if (!r.started_sent) {
      RequestStarted started{.request_id = r.request_id,
                             .prompt_tokens = static_cast<int64_t>(r.prompt.size()),
                             .seed = r.seed};
      if (r.return_prompt_ids) started.prompt_ids = r.prompt;
      outbox_.push_back([sink = r.sink, started] { sink->Started(started); });
      r.started_sent = true;
    }
    generated += Emit(r, w.sampled[i]);
  }
  metrics_->generation_tokens.Inc(static_cast<double>(generated));
  token_times_.emplace_back(Clock::now(), generated);
  while (!token_times_.empty() &&
         token_times_.front().first < Clock::now() - std::chrono::seconds(10)) {
    token_times_.pop_front();
  }
  std::erase_if(running_, [](const auto& p) { return !p->sequence; });
  UpdateGauges();
}

void Scheduler::EndSamplingFailed(ActiveRequest& r, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    metrics_->constraint_exhausted.Inc();
  }
  EndWithStatus(r, status, status.code() == absl::StatusCode::kCancelled ? "cancelled" : "error");
}

void Scheduler::SampleDeferred() {
  std::vector<std::shared_ptr<ActiveRequest>> ready;
  for (const auto& r : running_) {
    if (!r->deferred_logits.empty() && r->generation->MaskReady()) ready.push_back(r);
  }
  if (ready.empty()) return;
  // Only this thread touches a running request's generation and logits: sampled unlocked.
  DeliverEvents();
  mu_.Unlock();
  std::vector<absl::StatusOr<GeneratedToken>> drawn;
  for (const auto& r : ready) {
    drawn.push_back(r->generation->Advance(r->deferred_logits.data(),
                                           static_cast<int64_t>(r->deferred_logits.size())));
    r->deferred_logits.clear();
  }
  mu_.Lock();
  int64_t generated = 0;
  for (size_t i = 0; i < ready.size(); ++i) {
    ActiveRequest& r = *ready[i];
    if (!r.sequence) continue;  // ended meanwhile
    if (!drawn[i].ok()) {
      EndSamplingFailed(r, drawn[i].status());
      continue;
    }
    std::vector<GeneratedToken> sampled{*std::move(drawn[i])};
    generated += Emit(r, sampled);
  }
  metrics_->generation_tokens.Inc(static_cast<double>(generated));
  token_times_.emplace_back(Clock::now(), generated);
  std::erase_if(running_, [](const auto& p) { return !p->sequence; });
}

int64_t Scheduler::Emit(ActiveRequest& r, std::vector<GeneratedToken>& sampled) {
  if (sampled.empty()) return 0;
  const auto now = Clock::now();
  // Tokens of one accepted run arrive together: each is observed at the run's mean spacing.
  const double spacing = std::chrono::duration<double>(now - r.last_token_at).count() /
                         static_cast<double>(sampled.size());
  int64_t generated = 0;
  for (GeneratedToken& t : sampled) {
    r.tokens.push_back(t.id);
    ++generated;
    if (r.first_token_at == Clock::time_point{}) {
      r.first_token_at = now;
      metrics_->time_to_first_token.Observe(Since(r.arrived_at));
    } else {
      metrics_->inter_token_latency.Observe(spacing);
    }
    const FinishReason finish = t.finish;
    const std::string matched = t.matched_stop;
    outbox_.push_back([sink = r.sink, token = std::move(t)] { sink->Token(token); });
    if (finish != FinishReason::kNone) {
      Finish(r, finish, matched);
      break;
    }
  }
  r.last_token_at = now;
  return generated;
}

int64_t Scheduler::DraftLimit(ActiveRequest& r, int64_t planes_free) const {
  const int64_t wanted = r.speculative_tokens >= 0
                             ? std::min(r.speculative_tokens, options_.speculative_tokens)
                             : options_.speculative_tokens;
  // A request with images drafts nothing: a drafter reads token ids, and an image's are keys.
  if (wanted < 1 || r.images || !DraftsThisStep(r.draft_backoff)) return 0;
  const StopConfig& stop = r.generation->request().stop;
  // Room after the token sampled last: outputs left under max_tokens, and positions left in
  // the context (the verified tokens all take one).
  const int64_t outputs_left =
      stop.max_tokens - static_cast<int64_t>(r.generation->output().size()) - 1;
  const int64_t context_left = engine_->max_context() - static_cast<int64_t>(r.fed) - 1;
  return std::max<int64_t>(0, std::min({wanted, outputs_left, context_left, planes_free}));
}

}  // namespace walsh
