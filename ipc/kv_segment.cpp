#include "ipc/kv_segment.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <new>
#include <random>
#include <system_error>

#include <fmt/format.h>

namespace hearth {

namespace {

constexpr uint64_t kPage = 4096;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint64_t table_stride(const KvGeometry& g) {
  return align_up(sizeof(KvSlotTable) + sizeof(int32_t) * static_cast<uint64_t>(g.max_blocks), 64);
}

uint64_t record_stride(const KvGeometry& g) {
  return align_up(sizeof(KvBlockRecord) + sizeof(int32_t) * static_cast<uint64_t>(g.block_size), 8);
}

uint64_t records_offset(const KvGeometry& g) { return align_up(kKvHeaderBytes + table_stride(g) * g.n_slots, 64); }

uint64_t layer_bytes(const KvGeometry& g) {
  return static_cast<uint64_t>(g.n_blocks) * static_cast<uint64_t>(g.block_size) * static_cast<uint64_t>(g.kv_dim) *
         g.element_bytes;
}

uint64_t k_offset(const KvGeometry& g) {
  return align_up(records_offset(g) + record_stride(g) * static_cast<uint64_t>(g.n_blocks), kPage);
}

// K's (and V's) bytes in the segment: none when they are in device memory.
uint64_t host_kv_bytes(const KvGeometry& g) {
  return g.on_device ? 0 : align_up(layer_bytes(g) * static_cast<uint64_t>(g.n_layers), kPage);
}

uint64_t v_offset(const KvGeometry& g) { return k_offset(g) + host_kv_bytes(g); }

uint64_t random_id(std::random_device& random) {
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{random()} << 32) | random();
  return id;
}

bool sane(const KvGeometry& g) {
  return g.n_layers > 0 && g.n_layers <= 4096 && g.kv_dim > 0 && g.kv_dim <= (1 << 20) && g.block_size > 0 &&
         g.block_size <= 4096 && g.n_blocks > 0 && g.n_blocks <= (1 << 26) && g.element_bytes > 0 &&
         g.element_bytes <= 8 && g.tp_size >= 1 && g.tp_rank >= 0 && g.tp_rank < g.tp_size && g.n_slots > 0 &&
         g.n_slots <= (1u << 20) && g.max_blocks > 0 && g.max_blocks <= (1 << 24) && g.on_device <= 1;
}

// Why a valid segment cannot be adopted under `c`, or "" when it can.
std::string mismatch(const KvHeader& h, const KvSegmentConfig& c) {
  if (!(h.weights == c.weights)) return fmt::format("it holds another model's cache ({})", h.weights.hex());
  if (h.owner_id != c.owner_id) return "it belongs to another broker segment (its requests are gone)";
  const KvGeometry& a = h.geometry;
  const KvGeometry& b = c.geometry;
  if (a == b) return "";
  if (a.on_device != b.on_device) {
    return fmt::format("its K and V were in {} memory, and this engine keeps them in {} memory",
                       a.on_device ? "device" : "host", b.on_device ? "device" : "host");
  }
  return fmt::format("its geometry differs ({} layers x {} x {} blocks of {}, dtype {}, rank {}/{}, {} slots; now "
                     "{} x {} x {} blocks of {}, dtype {}, rank {}/{}, {} slots)",
                     a.n_layers, a.kv_dim, a.n_blocks, a.block_size, a.dtype, a.tp_rank, a.tp_size, a.n_slots,
                     b.n_layers, b.kv_dim, b.n_blocks, b.block_size, b.dtype, b.tp_rank, b.tp_size, b.n_slots);
}

}  // namespace

uint64_t kv_segment_bytes(const KvGeometry& g) { return v_offset(g) + host_kv_bytes(g); }

uint64_t kv_device_v_offset(const KvGeometry& g) {
  return align_up(layer_bytes(g) * static_cast<uint64_t>(g.n_layers), 256);
}

uint64_t kv_device_bytes(const KvGeometry& g) { return 2 * kv_device_v_offset(g); }

std::string kv_store_prefix(std::string_view instance, int rank) {
  return fmt::format("{}{}.{}.", kKvStorePrefix, instance, rank);
}

std::string kv_store_name(const KvDeviceRecord& r) {
  return fmt::format("{}{:016x}.{}.{}", kv_store_prefix(r.instance, r.rank), r.segment_id, r.bytes, r.device_uuid);
}

Result<KvDeviceRecord> kv_store_record(std::string_view name) {
  const auto bad = [&] {
    return make_error(ErrorCode::kFormat, "\"{}\" is not a KV cache's device memory record", name.substr(0, 80));
  };
  if (!name.starts_with(kKvStorePrefix)) return bad();
  std::vector<std::string_view> parts;
  for (std::string_view rest = name.substr(kKvStorePrefix.size());;) {
    const size_t dot = rest.find('.');
    parts.push_back(rest.substr(0, dot));
    if (dot == std::string_view::npos) break;
    rest.remove_prefix(dot + 1);
  }
  if (parts.size() != 5) return bad();
  const auto number = [](std::string_view s, int base, uint64_t& out) {
    if (s.empty() || s.size() > 20) return false;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
    return ec == std::errc() && end == s.data() + s.size();
  };
  KvDeviceRecord r;
  uint64_t rank = 0;
  const auto valid_instance = [](std::string_view s) {
    return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
  };
  if (!valid_instance(parts[0]) || !number(parts[1], 10, rank) || rank >= kMaxTensorParallel ||
      parts[2].size() != 16 || !number(parts[2], 16, r.segment_id) || r.segment_id == 0 ||
      !number(parts[3], 10, r.bytes) || r.bytes == 0 || !parts[4].starts_with("GPU-") || parts[4].size() > 64) {
    return bad();
  }
  r.instance = std::string(parts[0]);
  r.rank = static_cast<int>(rank);
  r.device_uuid = std::string(parts[4]);
  return r;
}

KvKeptChoice kv_kept_choice(std::span<const std::string> names, const KvDeviceRecord& want) {
  KvKeptChoice c;
  for (size_t i = 0; i < names.size(); ++i) {
    auto r = kv_store_record(names[i]);
    if (!r.is_ok() || r->instance != want.instance || r->rank != want.rank) continue;
    const bool match = want.segment_id != 0 && r->segment_id == want.segment_id &&
                       r->device_uuid == want.device_uuid && r->bytes >= want.bytes;
    if (match && !c.adopt) {
      c.adopt = i;
    } else if (!(match && names[i] == names[*c.adopt])) {  // the same allocation kept twice is not stale
      c.forget.push_back(i);
    }
  }
  return c;
}

Status KvSegment::validate(uint64_t file_bytes) const {
  const std::string p = segment_.path().string();
  const KvHeader& h = header();
  HEARTH_RETURN_IF_ERROR(segment_prologue_check(h.prologue, kKvSegment, file_bytes, segment_.path()));
  const KvGeometry& g = h.geometry;
  if (!sane(g) ||
      kv_segment_bytes(g) != file_bytes || h.tables_offset != kKvHeaderBytes || h.table_stride != table_stride(g) ||
      h.k_offset != k_offset(g) || h.v_offset != v_offset(g) || h.layer_bytes != layer_bytes(g) ||
      h.records_offset != records_offset(g) || h.record_stride != record_stride(g)) {
    return make_error(ErrorCode::kFormat, "{} has an inconsistent header or is truncated ({} bytes)", p, file_bytes);
  }
  if (h.id == 0) return make_error(ErrorCode::kFormat, "{} was not finished by the process that created it", p);
  return Status::ok();
}

Result<KvSegment> KvSegment::attach(const std::filesystem::path& path, bool writable) {
  HEARTH_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::attach(path, writable));
  KvSegment s;
  s.segment_ = std::move(seg);
  HEARTH_RETURN_IF_ERROR(s.validate(s.segment_.size()));
  return s;
}

void KvSegment::clear_records() const {
  for (int32_t b = 0; b < header().geometry.n_blocks; ++b) record(b).published.store(0, std::memory_order_release);
}

void KvSegment::renew() {
  clear_tables();
  clear_records();
  KvHeader& h = header();
  for (auto& id : h.rank_ids) id.store(0, std::memory_order_relaxed);
  std::random_device random;
  uint64_t id = random_id(random);
  while (id == h.id) id = random_id(random);
  std::atomic_thread_fence(std::memory_order_release);  // voided before the new id can be seen
  h.id = id;
  adopted_ = false;
}

void KvSegment::clear_tables() const {
  for (uint32_t i = 0; i < header().geometry.n_slots; ++i) {
    KvSlotTable& t = table(i);
    t.committed.store(0, std::memory_order_release);
    t.check.store(0, std::memory_order_relaxed);
    t.n_blocks = 0;
  }
}

Result<KvSegment> KvSegment::open_or_create(const std::filesystem::path& path, const KvSegmentConfig& config) {
  if (!sane(config.geometry)) {
    return make_error(ErrorCode::kInvalidArgument, "KV segment geometry out of range ({} layers, {} blocks of {})",
                      config.geometry.n_layers, config.geometry.n_blocks, config.geometry.block_size);
  }
  std::string why;
  if (std::filesystem::exists(path)) {
    auto existing = attach(path, /*writable=*/true);
    if (existing.is_ok()) {
      why = mismatch(existing->header(), config);
      if (why.empty()) {
        existing->adopted_ = true;
        existing->header().creator_pid = ::getpid();
        existing->header().adoptions.fetch_add(1, std::memory_order_relaxed);
        return existing;
      }
    } else {
      why = existing.status().message();
    }
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  const uint64_t bytes = kv_segment_bytes(config.geometry);
  // On a GPU the file is only bookkeeping: K and V are in device memory. On the host the
  // low blocks of every layer (those the allocator hands out first) go on huge pages
  // before the rest of any, in case the budget runs out.
  std::optional<HugePagePlan> huge;
  if (!config.geometry.on_device) {
    huge = HugePagePlan{kKvHugePageBudget, k_offset(config.geometry), layer_bytes(config.geometry)};
  }
  HEARTH_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::create(path, bytes, huge));
  KvHeader& h = *new (seg.data()) KvHeader{};
  segment_prologue_init(h.prologue, kKvSegment, bytes);
  h.weights = config.weights;
  h.owner_id = config.owner_id;
  h.geometry = config.geometry;
  h.creator_pid = ::getpid();
  h.created_unix_ms = static_cast<uint64_t>(::time(nullptr)) * 1000;
  h.tables_offset = kKvHeaderBytes;
  h.table_stride = table_stride(config.geometry);
  h.k_offset = k_offset(config.geometry);
  h.v_offset = v_offset(config.geometry);
  h.layer_bytes = layer_bytes(config.geometry);
  h.records_offset = records_offset(config.geometry);
  h.record_stride = record_stride(config.geometry);
  std::random_device random;
  for (uint64_t& word : h.chain_seed) word = (uint64_t{random()} << 32) | random();
  h.id = random_id(random);
  for (uint32_t i = 0; i < config.geometry.n_slots; ++i) {
    new (seg.data() + h.tables_offset + h.table_stride * i) KvSlotTable{};
  }
  std::atomic_thread_fence(std::memory_order_release);
  seg.publish();
  KvSegment s;
  s.segment_ = std::move(seg);
  s.why_rebuilt_ = std::move(why);
  return s;
}

}  // namespace hearth
