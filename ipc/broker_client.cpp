#include "ipc/broker_client.h"

#include <algorithm>
#include <cstring>

#include "ipc/futex.h"

namespace hearth {

Result<BrokerClient> BrokerClient::connect(const std::filesystem::path& path) {
  HEARTH_ASSIGN_OR_RETURN(Broker broker, Broker::attach(path));
  BrokerClient c;
  c.broker_ = std::make_unique<Broker>(std::move(broker));
  HEARTH_ASSIGN_OR_RETURN(c.index_, c.broker_->frontend_register());
  return c;
}

BrokerClient::~BrokerClient() { leave(); }

void BrokerClient::leave() {
  if (broker_ && index_ >= 0) broker_->frontend_unregister(index_);
  index_ = -1;
}

Result<uint32_t> BrokerClient::submit(const SubmitRequest& r, uint32_t* generation) {
  if (r.prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  if (r.prompt.size() >= broker_->slot_tokens()) {
    return make_error(ErrorCode::kOutOfRange, "the prompt has {} tokens, but the context holds {}", r.prompt.size(),
                      broker_->slot_tokens());
  }
  HEARTH_RETURN_IF_ERROR(request_spec_check_shape(r.spec, broker_->grammar_capacity()));
  const auto slot = broker_->slot_claim(index_, generation);
  if (!slot) return make_error(ErrorCode::kResourceExhausted, "all {} request slots are busy", broker_->n_slots());
  const RequestSpec& spec = r.spec;
  SlotHeader& s = broker_->slot(*slot);
  s.sampling = spec.sampling;
  s.max_tokens = spec.max_tokens;
  s.n_prompt = static_cast<int32_t>(r.prompt.size());
  s.top_logprobs = spec.top_logprobs;
  s.flags = (spec.ignore_stop ? kSlotIgnoreStop : 0) | (static_cast<uint32_t>(spec.pooling) << kSlotPoolingShift) |
            (spec.reasoning_open ? kSlotReasoningOpen : 0) | (spec.reasoning_budget >= 0 ? kSlotThinkingBudget : 0);
  s.reasoning_budget = spec.reasoning_budget;
  s.reasoning_start = spec.reasoning_start;
  s.reasoning_end = spec.reasoning_end;
  s.n_stop_ids = static_cast<int32_t>(spec.stop_ids.size());
  std::copy(spec.stop_ids.begin(), spec.stop_ids.end(), s.stop_ids);
  s.min_tokens = spec.min_tokens;
  s.adapter = spec.adapter;
  s.adapter_id = spec.adapter_id;
  s.n_logit_bias = static_cast<int32_t>(spec.logit_bias.size());
  std::copy(spec.logit_bias.begin(), spec.logit_bias.end(), broker_->logit_bias(*slot));
  s.grammar_bytes = static_cast<uint32_t>(spec.grammar.size());
  std::copy(spec.grammar.begin(), spec.grammar.end(), broker_->grammar(*slot));
  std::copy(r.prompt.begin(), r.prompt.end(), broker_->prompt(*slot));
  std::memcpy(s.client_request_id, r.client_request_id.data(),
              std::min(r.client_request_id.size(), sizeof(s.client_request_id)));
  broker_->slot_submit(*slot);
  return *slot;
}

SlotProgress BrokerClient::progress(uint32_t slot) const {
  const SlotHeader& s = broker_->slot(slot);
  SlotProgress p;
  p.state = static_cast<SlotState>(s.state.load(std::memory_order_acquire));
  p.n_produced = s.n_produced.load(std::memory_order_acquire);
  p.generation = s.generation.load(std::memory_order_acquire);
  if (p.n_produced > 0) p.cached_tokens = s.cached_tokens;
  if (const uint64_t admitted = s.admitted_ns.load(std::memory_order_acquire); admitted != 0) {
    p.queue_ns = admitted > s.enqueued_ns ? admitted - s.enqueued_ns : 0;
  }
  if (p.terminal()) {
    p.finish = static_cast<FinishReason>(s.finish);
    p.error_code = static_cast<ErrorCode>(s.error_code);
    p.error = std::string(s.error, strnlen(s.error, sizeof(s.error)));
  }
  return p;
}

uint32_t BrokerClient::news() const { return broker_->header().frontends[index_].wake.load(std::memory_order_acquire); }

void BrokerClient::wait(uint32_t seen, std::chrono::microseconds timeout) const {
  futex_wait(broker_->header().frontends[index_].wake, seen, timeout);
}

}  // namespace hearth
