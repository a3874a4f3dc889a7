// Communicator: what the ranks of a tensor-parallel engine group say to each other.
//
// The model calls all_reduce_sum after each row-parallel matmul (attention output,
// FFN down), so every rank ends a layer with the full hidden state; the driver on rank 0
// broadcasts each step's ModelInput bytes. Buffers are backend memory (host memory for
// the CPU backend). A single rank needs none of it: make_single_rank_communicator's ops
// do nothing. Implementations for more ranks (shared memory on CPU, NCCL on GPUs) plug
// in here. Called from the step loop's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hearth {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[i] = the sum over ranks of data[i], on every rank.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // Every rank's `bytes` bytes at `data` become root's.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;
};

// One rank, alone: rank 0 of 1, every op a no-op.
std::unique_ptr<Communicator> make_single_rank_communicator();

}  // namespace hearth
