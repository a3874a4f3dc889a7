// BrokerClient: a frontend's side of the broker: register, submit requests into slots,
// follow the tokens the engine produces, cancel and release.
//
// One per frontend process; its methods may be called from several threads (slot
// operations on different slots are independent; a slot is used by the request that
// submitted it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "ipc/broker.h"

namespace hearth {

// One slot's request: the prompt and what it asks for (common/request_spec.h; the
// frontend validated it on admission).
struct SubmitRequest {
  std::vector<int32_t> prompt;
  RequestSpec spec;
  std::string client_request_id;  // for the engine's log lines; cut to kClientRequestIdBytes
};

// What a slot looks like from the frontend.
struct SlotProgress {
  int32_t n_produced = 0;
  SlotState state = SlotState::kQueued;
  FinishReason finish = FinishReason::kNone;
  ErrorCode error_code = ErrorCode::kOk;
  std::string error;
  uint64_t queue_ns = 0;  // QUEUED until the engine admitted it (0 until then)
  int32_t cached_tokens = 0;  // prompt tokens the engine found in its prefix cache (known with the first token)
  uint32_t generation = 0;    // the slot's claim count: another than at submit means it is no longer ours
  bool terminal() const {
    return state == SlotState::kDone || state == SlotState::kCancelled || state == SlotState::kFailed;
  }
  // Whether the slot is still the claim that got `claim` (not freed by an engine that
  // judged its frontend gone, nor claimed again since).
  bool held_by(uint32_t claim) const {
    return state != SlotState::kFree && state != SlotState::kFilling && generation == claim;
  }
};

class BrokerClient {
 public:
  // Attaches to the broker at `path` and registers this process as a frontend.
  static Result<BrokerClient> connect(const std::filesystem::path& path);
  BrokerClient(BrokerClient&&) noexcept = default;
  BrokerClient& operator=(BrokerClient&&) noexcept = default;
  ~BrokerClient();

  // Claims a slot and queues the request; kResourceExhausted when every slot is busy,
  // kInvalidArgument when it does not fit a slot (prompt, stop ids, logit bias, grammar).
  // `generation` (when given) receives the claim count the slot got from this claim.
  Result<uint32_t> submit(const SubmitRequest& request, uint32_t* generation = nullptr);
  SlotProgress progress(uint32_t slot) const;
  // Whether a slot submitted with claim count `generation` is still this frontend's: not
  // once the engine freed it (it judged this frontend gone) or another claim took it.
  bool holds(uint32_t slot, uint32_t generation) const { return progress(slot).held_by(generation); }
  const ProducedToken& token(uint32_t slot, int32_t i) const { return broker_->produced(slot)[i]; }
  // A DONE embedding slot's vector of `dim` values (the model's), copied into `out`.
  void embedding(uint32_t slot, size_t dim, std::vector<float>& out) const {
    const float* v = broker_->embedding(slot);
    out.assign(v, v + std::min(dim, broker_->embedding_capacity()));
  }
  void cancel(uint32_t slot) const { broker_->slot_cancel(slot); }
  // Frees a slot once its progress is terminal (or a submit was abandoned).
  void release(uint32_t slot) const { broker_->slot_release(slot); }
  // Frees a slot whose progress was the terminal `state`, unless it moved on since (the
  // engine freed it first, and another claim may hold it now).
  void release_from(uint32_t slot, SlotState state) const { broker_->slot_release_from(slot, state); }
  // Frees a slot the engine has not taken yet (QUEUED); false when it has.
  bool withdraw(uint32_t slot) const { return broker_->slot_withdraw(slot); }

  // The counter the engine bumps when any of this frontend's slots has news; wait()
  // sleeps until it differs from `seen` (or the timeout).
  uint32_t news() const;
  void wait(uint32_t seen, std::chrono::microseconds timeout) const;
  void heartbeat() const { broker_->frontend_heartbeat(index_); }
  // Deregisters now (the destructor does otherwise): slots this frontend still holds are
  // then reclaimed by the engine. No slot operation may follow.
  void leave();
  bool engine_alive(std::chrono::milliseconds max_age) const { return broker_->engine_alive(max_age); }
  int index() const { return index_; }
  uint32_t grammar_capacity() const { return broker_->grammar_capacity(); }
  Broker& broker() const { return *broker_; }

 private:
  BrokerClient() = default;
  std::unique_ptr<Broker> broker_;
  int index_ = -1;
};

}  // namespace hearth
