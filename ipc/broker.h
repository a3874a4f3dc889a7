// Broker: the shared segment through which frontends hand requests to the engine and
// read back the tokens it produces (layout in broker_layout.h, protocol in README.md).
//
// The engine creates it (or attaches to the one a previous engine left: slots survive an
// engine restart); frontends attach. Every operation is lock-free on always-lock-free
// atomics in the segment; wake-ups are futexes. A Broker object is a mapping plus views
// and may be shared by threads of one process; slot-level operations follow the slot
// state machine, where only the slot's current holder (the frontend that owns it, or the
// engine while it runs it) writes.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/status.h"
#include "ipc/broker_layout.h"
#include "ipc/ring.h"
#include "ipc/segment.h"

namespace hearth {

struct BrokerConfig {
  uint32_t n_slots = 128;
  uint32_t slot_tokens = 4096;      // prompt plus output tokens per request (the context)
  uint32_t grammar_bytes = 65536;   // GBNF text of one request's constraint, at most
};

// The frontend that owns a slot, as the engine judges it: alive; silent (registered, but
// its heartbeat is older than the stale bound: wedged, or gone without a trace); or
// exited (its registry entry was released or taken by another process, or its pid is
// gone; a zombie counts as gone).
enum class OwnerState { kAlive, kSilent, kExited };

// A slot's request as the engine reads it: another process wrote it, so read_request
// checks its counts and sizes before copying anything out, then every value with
// request_spec_validate (the frontend's admission ran the same function, so a request
// refused here is refused with the same code).
struct SlotRequest {
  uint32_t generation = 0;
  int owner = -1;
  int32_t owner_pid = 0;
  int32_t n_prompt = 0;
  RequestSpec spec;
  std::string client_request_id;      // the client's x-request-id, printable; may be empty
  std::vector<int32_t> tokens;  // the prompt, then the tokens produced before (on resume)
  int32_t n_produced() const { return static_cast<int32_t>(tokens.size()) - n_prompt; }
};

class Broker {
 public:
  // Attaches to the broker at `path` when a valid one exists (keeping its slots), else
  // creates it. The engine's entry point.
  static Result<Broker> open_or_create(const std::filesystem::path& path, const BrokerConfig& config);
  // Attaches to an existing broker. The frontend's entry point.
  static Result<Broker> attach(const std::filesystem::path& path);

  BrokerHeader& header() const { return *header_; }
  // This broker among all that were ever created: its creation time and nonce (what a
  // resident KV segment records, so that it never trusts tables of another broker's slots).
  uint64_t id() const { return (header_->created_unix_ms << 20) ^ header_->nonce; }
  uint32_t n_slots() const { return header_->n_slots; }
  uint32_t slot_tokens() const { return header_->slot_tokens; }
  uint32_t grammar_capacity() const { return header_->slot_grammar_bytes; }
  SlotHeader& slot(uint32_t index) const;
  int32_t* prompt(uint32_t index) const;           // [slot_tokens]
  ProducedToken* produced(uint32_t index) const;   // [slot_tokens]
  // An embedding's vector, over the produced area: [embedding_capacity()].
  float* embedding(uint32_t index) const { return reinterpret_cast<float*>(produced(index)); }
  size_t embedding_capacity() const { return size_t{header_->slot_tokens} * sizeof(ProducedToken) / sizeof(float); }
  LogitBias* logit_bias(uint32_t index) const;      // [kMaxLogitBias]
  char* grammar(uint32_t index) const;              // [grammar_capacity()]
  Ring ring() const { return Ring(segment_.data() + header_->ring_offset); }
  const std::filesystem::path& path() const { return segment_.path(); }

  // --- frontend side ---
  // Takes a registry entry for this process; kResourceExhausted when all are held by
  // live processes.
  Result<int> frontend_register();
  void frontend_heartbeat(int frontend) const;
  void frontend_unregister(int frontend) const;
  // FREE -> FILLING for the first free slot, owned by `frontend`; nullopt when none is free.
  // `generation` (when given) receives the slot's claim count as this claim set it.
  std::optional<uint32_t> slot_claim(int frontend, uint32_t* generation = nullptr) const;
  // FILLING -> QUEUED, into the ring, engine woken. The request fields must be written.
  void slot_submit(uint32_t index) const;
  // Asks the engine to stop the slot at its next step.
  void slot_cancel(uint32_t index) const;
  // A terminal (or still FILLING) slot back to FREE.
  void slot_release(uint32_t index) const;
  // The same, only if the slot is still in state `from` (a CAS): what the engine and the
  // owner may both try for one slot, so that the loser cannot free another's new claim.
  bool slot_release_from(uint32_t index, SlotState from) const;
  // A QUEUED slot its owner gives up on, back to FREE at once, unless the engine admitted
  // it first (then false: cancel it and wait for the engine). Its ring entry, if still
  // there, finds the slot no longer QUEUED (or queued anew, which is then admitted once).
  bool slot_withdraw(uint32_t index) const;
  // Whether an engine heartbeat is younger than `max_age`.
  bool engine_alive(std::chrono::milliseconds max_age) const;

  // --- engine side ---
  // Marks this process as the engine: new epoch, pid, heartbeat. Returns the epoch.
  uint64_t engine_start() const;
  void engine_heartbeat() const;
  void engine_stop() const;  // clears the heartbeat so frontends see no engine at once
  // Publishes produced token `n` of a slot (already written) and wakes its owner later.
  void slot_publish(uint32_t index, int32_t n_produced) const;
  // RUNNING / QUEUED -> terminal; wakes the owner.
  void slot_finish(uint32_t index, SlotState state, FinishReason finish, int32_t error_code = 0,
                   std::string_view error = {}) const;
  // Reads slot `index`'s request (and, with `resume`, the tokens it has produced):
  // kOutOfRange when prompt plus output do not fit `context` tokens, a token id is not in
  // 0..vocab_size-1 or a value of the spec is outside its range, kInvalidArgument when a
  // count or flag is malformed. The grammar text is read as is (the engine parses it).
  Result<SlotRequest> read_request(uint32_t index, bool resume, int32_t context, int32_t vocab_size) const;
  // Wakes every frontend with news (call once per step).
  void wake_frontend(int frontend) const;
  // How the frontend at registry `index`, recorded as `owner_pid` by a slot, looks at
  // `now_ns`: a heartbeat older than `stale` makes a live process silent.
  OwnerState owner_state(int index, int32_t owner_pid, std::chrono::milliseconds stale, uint64_t now_ns) const;
  // Returns to FREE the slots the engine is not running (`engine_holds[i] == 0`) whose
  // owner is gone: QUEUED and terminal ones when it is silent or exited; FILLING ones only
  // once it has surely exited (a silent owner might still be writing), seen so by two
  // sweeps in a row: `filling_suspects` (one entry per slot, zeros at first) carries the
  // first sighting from one call to the next. Each is a CAS from the state seen, so a
  // slot that moved meanwhile is left alone. Returns how many it freed (also added to
  // `stat_reclaimed`).
  uint32_t sweep_orphans(std::span<const uint64_t> engine_holds, std::span<uint64_t> filling_suspects,
                         std::chrono::milliseconds stale, uint64_t now_ns) const;

 private:
  Broker() = default;
  Status validate(uint64_t file_bytes) const;

  ShmSegment segment_;
  BrokerHeader* header_ = nullptr;
};

// Bytes of a broker with `config`.
uint64_t broker_bytes(const BrokerConfig& config);

}  // namespace hearth
