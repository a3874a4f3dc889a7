// ShardServer: what hearth-engine --rank R (R >= 1) runs: one shard of a tensor-parallel
// group's model, fed by rank 0.
//
// It attaches to the weights (its rank's tensors) and to the instance's `tp` segment
// once rank 0 has made it, registers its rank, builds its share of the KV cache and
// activations from the geometry rank 0 wrote there, and then, epoch after epoch: joins
// the group rank 0 forms, runs every step rank 0 publishes (the same forward pass on
// its heads and FFN columns, no LM head), and when the epoch ends (tp_group.h) waits
// for the next one. It never touches the broker: requests, sampling and their resume
// are rank 0's. A segment replaced by a new rank 0 (other geometry or weights) is
// attached again from scratch. Owned by one thread (run()); stop() from any.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/status.h"
#include "engine/serve/engine_server.h"

namespace hearth {

class ShardServer {
 public:
  // Attaches the weights and starts the compute threads (checks: engine_rank_start).
  static Result<std::unique_ptr<ShardServer>> create(const EngineOptions& options);
  ~ShardServer();

  // Serves until stop(). Fails for a group it cannot be part of (another TP size or
  // other weights than rank 0's, its rank held by a live process) and for failures of
  // its own.
  Status run();
  void stop();

  std::string describe() const;

 private:
  ShardServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearth
