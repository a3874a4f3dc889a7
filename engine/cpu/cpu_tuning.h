// The CPU kernels' per-host setting: how far ahead a decode step's weight stream is
// prefetched in software (kernels/cpu/isa.h). Hardware prefetchers differ by vendor and
// generation, so the best distance differs by host (on Zen 5 the prefetches Intel
// decode wants cost bandwidth). The engine measures the candidates once at start over
// its own weights, on its own thread pool, and caches the winner per CPU model, path,
// thread count and weight type, so later starts read it back instead.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace hearth {

inline constexpr std::array<int, 4> kPrefetchCandidates = {0, 2048, 4096, 8192};

struct PrefetchTuningOptions {
  // What the choice holds for: CPU model, instruction-set path, threads, weight type.
  std::string key;
  // Where choices are cached (one "key<TAB>bytes" line each); empty: not cached.
  std::filesystem::path cache_file;
  // Interleaved rounds of every candidate; each candidate's best round counts.
  int rounds = 5;
  // Bytes one pass reads, for the log's GB/s.
  double pass_bytes = 0;
};

struct PrefetchTuning {
  int bytes = 0;        // the distance now in use
  std::string source;   // "HEARTH_CPU_PREFETCH", "cached", "measured"
  // Per candidate measured: its best seconds per pass.
  std::vector<std::pair<int, double>> seconds;
  double elapsed_ms = 0;  // time the choice took
  std::string describe(double pass_bytes) const;  // one log line's worth
};

// Chooses and sets (set_weight_prefetch_bytes) the distance: HEARTH_CPU_PREFETCH when
// set; else the cache's entry for o.key; else the candidate whose pass(distance) (seconds,
// run with that distance set
// for one decode-like pass over weights too large for the caches) is least, where no
// software prefetch (0) stays unless a distance is at least 3% faster: it must earn its
// place (on Zen 5 the windows measured 8 KiB within 1-2% of none while whole decode steps
// ran 12% slower with it; on an Intel host it was worth 30-40%). A measured choice is
// written to the cache (failure to write is not an error).
PrefetchTuning tune_weight_prefetch(const PrefetchTuningOptions& o, const std::function<double(int)>& pass);

// Part of every cache key: raised when the kernels or the rule above change, so that a
// host measures again instead of keeping a choice made for other code (2: the quantized
// kernels prefetch at all, and none is the baseline; 3: the AVX2 F16/BF16 decode reads
// each row's line whole and the AVX2 Q4_0/Q8_0 kernels issue fewer instructions; 4: the
// resident weights sit on 2 MiB pages where the kernel allows, and a prefetch no longer
// crosses a 4 KiB page walk every 4 KiB; 5: the decode of plain float rows reads a row
// at a time on AVX2 too, and runs two column blocks' chains side by side).
inline constexpr int kPrefetchTuningVersion = 5;

// What the passes read: windows of whole layers' matrices ("blk.N." tensors), each the
// same matrices of `per window` consecutive layers (the first of a layer's matrices
// that reach `window_bytes`, or every one when a layer holds less), at most
// `max_windows` of them. Successive passes take successive windows, so none finds its
// weights in the caches; fewer than kMinTuningWindows means too small a model to measure.
inline constexpr size_t kMinTuningWindows = 5;
std::vector<std::vector<const TensorView*>> prefetch_tuning_windows(std::span<const TensorView> tensors,
                                                                    uint64_t window_bytes = 64ull << 20,
                                                                    size_t max_windows = 6);

// kInvalidArgument naming HEARTH_CPU_PREFETCH when it is set but not a byte count in
// [0, 65536] (the kernels would ignore it).
Status prefetch_env_check();

// HEARTH_CACHE_DIR, else systemd's CACHE_DIRECTORY, else $XDG_CACHE_HOME/hearth, else
// $HOME/.cache/hearth; with "cpu-tuning" appended. Empty when none is set.
std::filesystem::path default_tuning_cache_file();

}  // namespace hearth
