// CUB's segmented radix sort as hearth's emulated device provides it: the same order (a
// stable sort on the keys' radix bits [begin_bit, end_bit), floats ordered as CUB orders
// their bit patterns), run on the stream's host thread. The segment offsets are read when
// the sort runs, as the device reads them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#include "cuda_runtime_api.h"
#include "kernels/cuda/emu/internal.h"

namespace cub {

namespace emu_detail {

constexpr size_t kTempBytes = 256;

// The key's bits as CUB's radix passes see them: a float's sign flips the rest.
template <typename K>
uint64_t radix_bits(K key, int begin_bit, int end_bit) {
  uint64_t u = 0;
  if constexpr (std::is_same_v<K, float>) {
    uint32_t b = 0;
    std::memcpy(&b, &key, 4);
    b = (b & 0x80000000u) != 0 ? ~b : b | 0x80000000u;
    u = b;
  } else if constexpr (std::is_signed_v<K>) {
    u = static_cast<uint64_t>(static_cast<std::make_unsigned_t<K>>(key)) ^ (uint64_t{1} << (sizeof(K) * 8 - 1));
  } else {
    u = static_cast<uint64_t>(key);
  }
  const int width = end_bit - begin_bit;
  u >>= begin_bit;
  return width >= 64 ? u : u & ((uint64_t{1} << width) - 1);
}

}  // namespace emu_detail

struct DeviceSegmentedRadixSort {
  template <typename KeyT, typename ValueT, typename BeginOffsetIteratorT, typename EndOffsetIteratorT>
  static cudaError_t SortPairsDescending(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in,
                                         KeyT* d_keys_out, const ValueT* d_values_in, ValueT* d_values_out,
                                         int num_items, int num_segments, BeginOffsetIteratorT d_begin_offsets,
                                         EndOffsetIteratorT d_end_offsets, int begin_bit = 0,
                                         int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = nullptr) {
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = emu_detail::kTempBytes;
      return cudaSuccess;
    }
    if (temp_storage_bytes < emu_detail::kTempBytes || num_items < 0 || num_segments < 0 || begin_bit < 0 ||
        end_bit > static_cast<int>(sizeof(KeyT) * 8) || begin_bit >= end_bit) {
      return hearth::emu::record(cudaErrorInvalidValue);
    }
    return hearth::emu::enqueue(stream, [=] {
      std::vector<int> order;
      for (int s = 0; s < num_segments; ++s) {
        const int begin = static_cast<int>(d_begin_offsets[s]), end = static_cast<int>(d_end_offsets[s]);
        if (end <= begin) continue;
        order.resize(static_cast<size_t>(end - begin));
        std::iota(order.begin(), order.end(), begin);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
          return emu_detail::radix_bits(d_keys_in[a], begin_bit, end_bit) >
                 emu_detail::radix_bits(d_keys_in[b], begin_bit, end_bit);
        });
        for (int i = begin; i < end; ++i) {
          d_keys_out[i] = d_keys_in[order[static_cast<size_t>(i - begin)]];
          d_values_out[i] = d_values_in[order[static_cast<size_t>(i - begin)]];
        }
      }
    });
  }
};

}  // namespace cub
