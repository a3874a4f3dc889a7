// The CPUs a process runs on: parsing lists such as "0-3,8", splitting the CPUs this
// process may use among the ranks of a tensor-parallel group, and pinning to them.
// Pinning applies to the calling thread and to every thread it creates afterwards, so
// a process pins before it starts its workers. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hearth {

struct CpuSet {
  std::vector<int> cpus;  // ascending, distinct

  // "0-3,8" (the list syntax of taskset and cgroups).
  std::string describe() const;
  // Bit i for CPU i < 64.
  uint64_t mask64() const;
};

// A list such as "0-3,8,10-11"; kInvalidArgument naming what is wrong.
Result<CpuSet> cpu_set_parse(std::string_view list);
// What sched_getaffinity allows this thread.
CpuSet cpu_set_current();
// Share `part` of `parts` contiguous shares of `set`, the first ones one larger when it
// does not divide evenly; kInvalidArgument when there are fewer CPUs than parts.
Result<CpuSet> cpu_set_share(const CpuSet& set, int part, int parts);
// Pins the calling thread (and the threads it creates from now on) to `set`.
Status cpu_set_pin(const CpuSet& set);

}  // namespace hearth
