#include "ipc/weights_segment.h"

#include <cstring>

#include "common/dtype.h"
#include "common/process.h"

namespace hearth {

std::string_view segment_state_name(uint32_t state) {
  switch (state) {
    case static_cast<uint32_t>(SegmentState::kLoading): return "LOADING";
    case static_cast<uint32_t>(SegmentState::kReady): return "READY";
    default: return "INVALID";
  }
}

std::string Fingerprint::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

namespace {

std::string fixed_string(const char* field, size_t size) { return std::string(field, strnlen(field, size)); }

bool range_ok(uint64_t offset, uint64_t bytes, uint64_t total) { return offset <= total && bytes <= total - offset; }

}  // namespace

Status weights_header_check(const WeightsHeader& h, uint64_t file_bytes, const std::filesystem::path& path) {
  const std::string p = path.string();
  HEARTH_RETURN_IF_ERROR(segment_prologue_check(h.prologue, kWeightsSegment, file_bytes, path));
  if (h.tp_size < 1 || h.tp_size > kMaxTensorParallel) {
    return make_error(ErrorCode::kFormat, "{} has an invalid tensor-parallel size {}", p, h.tp_size);
  }
  const uint64_t entry_bytes = h.n_entries * sizeof(WeightsEntry);
  if (h.n_entries > (1u << 20) || !range_ok(h.manifest_offset, entry_bytes, file_bytes) ||
      !range_ok(h.config_offset, h.config_bytes, file_bytes) ||
      !range_ok(h.tokenizer_offset, h.tokenizer_bytes, file_bytes) ||
      !range_ok(h.template_offset, h.template_bytes, file_bytes) ||
      !range_ok(h.token_bytes_offset, h.token_bytes_bytes, file_bytes) || h.manifest_offset % alignof(WeightsEntry) != 0) {
    return make_error(ErrorCode::kFormat, "{} has a corrupt header (sections outside the file)", p);
  }
  for (uint32_t r = 0; r < h.tp_size; ++r) {
    if (!range_ok(h.rank_offset[r], h.rank_bytes[r], file_bytes)) {
      return make_error(ErrorCode::kFormat, "{} has a corrupt header (rank {} data outside the file)", p, r);
    }
  }
  return Status::ok();
}

Result<AttachedWeights> weights_attach(const std::filesystem::path& path, const AttachOptions& options) {
  auto seg = ShmSegment::attach(path, /*writable=*/false);
  if (!seg.is_ok()) {
    if (seg.status().code() == ErrorCode::kNotFound) {
      return make_error(ErrorCode::kNotFound, "no weights segment at {}: is hearth-loader running for this instance?",
                        path.string());
    }
    return seg.status();
  }
  AttachedWeights w;
  w.segment = std::move(seg).value();
  const uint64_t size = w.segment.size();
  if (size < kWeightsHeaderBytes) {
    return make_error(ErrorCode::kFormat, "{} is {} bytes, too small to be a weights segment", path.string(), size);
  }
  const auto* h = reinterpret_cast<const WeightsHeader*>(w.segment.data());
  HEARTH_RETURN_IF_ERROR(weights_header_check(*h, size, path));
  const uint32_t state = h->state.load(std::memory_order_acquire);
  if (state != static_cast<uint32_t>(SegmentState::kReady)) {
    if (state == static_cast<uint32_t>(SegmentState::kLoading)) {
      if (!process_alive(h->creator_pid, h->creator_start_time)) {
        return make_error(ErrorCode::kUnavailable,
                          "{} was left half-written by hearth-loader pid {}, which is no longer running: start "
                          "hearth-loader again and it will replace it",
                          path.string(), h->creator_pid);
      }
      return make_error(ErrorCode::kUnavailable, "{} is still being loaded by hearth-loader pid {}: try again shortly",
                        path.string(), h->creator_pid);
    }
    return make_error(ErrorCode::kFormat, "{} is in an invalid state ({})", path.string(), state);
  }
  if (options.expected_fingerprint && !(h->fingerprint == *options.expected_fingerprint)) {
    return make_error(ErrorCode::kInvalidArgument, "{} holds a different model (fingerprint {}, expected {})",
                      path.string(), h->fingerprint.hex(), options.expected_fingerprint->hex());
  }

  // Each rank's region starts at the data alignment (2 MiB with huge pages); tensors in
  // it are 64-byte aligned.
  if (h->data_alignment != kTensorAlignment && h->data_alignment != kHugePageAlignment) {
    return make_error(ErrorCode::kFormat, "{} has an invalid data alignment {}", path.string(), h->data_alignment);
  }
  for (uint32_t r = 0; r < h->tp_size; ++r) {
    if (h->rank_offset[r] % h->data_alignment != 0) {
      return make_error(ErrorCode::kFormat, "{}: rank {} data does not start on a {}-byte boundary", path.string(), r,
                        h->data_alignment);
    }
  }
  if (h->huge_page_bytes > h->prologue.total_bytes || h->huge_page_bytes % kHugePageAlignment != 0) {
    return make_error(ErrorCode::kFormat, "{} claims {} bytes on 2 MiB pages, not whole pages within its {}",
                      path.string(), h->huge_page_bytes, h->prologue.total_bytes);
  }
  const std::string layout = fixed_string(h->layout, sizeof(h->layout));
  if (layout != kLayoutPlain && layout != kLayoutCpuR16) {
    return make_error(ErrorCode::kFormat, "{} names an unknown tensor layout \"{}\"", path.string(), layout);
  }
  const std::byte* base = w.segment.data();
  const auto* entries = reinterpret_cast<const WeightsEntry*>(base + h->manifest_offset);
  for (uint64_t i = 0; i < h->n_entries; ++i) {
    const WeightsEntry& e = entries[i];
    const std::string name = fixed_string(e.name, sizeof(e.name));
    if (name.empty() || e.n_dims < 1 || e.n_dims > 4 || e.rank >= h->tp_size ||
        e.dtype > static_cast<uint32_t>(DType::kBF16R16) || e.split > 2) {
      return make_error(ErrorCode::kFormat, "{}: manifest entry {} is corrupt", path.string(), i);
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < e.n_dims; ++d) {
      if (e.shape[d] < 1 || e.shape[d] > (int64_t{1} << 40)) {
        return make_error(ErrorCode::kFormat, "{}: tensor {} has a corrupt shape", path.string(), name);
      }
      auto product = checked_mul(static_cast<uint64_t>(elements), static_cast<uint64_t>(e.shape[d]));
      if (!product || *product > (uint64_t{1} << 42)) {
        return make_error(ErrorCode::kFormat, "{}: tensor {} has a corrupt shape", path.string(), name);
      }
      elements = static_cast<int64_t>(*product);
    }
    const auto dtype = static_cast<DType>(e.dtype);
    if (dtype_row_group(dtype) > 1 && layout == kLayoutPlain) {
      return make_error(ErrorCode::kFormat, "{}: tensor {} is row-interleaved in a plain layout", path.string(), name);
    }
    if (dtype_row_group(dtype) > 1 && (e.n_dims != 2 || e.shape[0] % dtype_row_group(dtype) != 0)) {
      return make_error(ErrorCode::kFormat, "{}: tensor {} is row-interleaved but its rows are not whole groups",
                        path.string(), name);
    }
    const auto bytes = dtype_bytes(dtype, elements);
    const uint64_t region_begin = h->rank_offset[e.rank], region_end = region_begin + h->rank_bytes[e.rank];
    if (!bytes || *bytes != e.bytes || e.offset < region_begin || !range_ok(e.offset, e.bytes, region_end) ||
        e.offset % kTensorAlignment != 0) {
      return make_error(ErrorCode::kFormat, "{}: tensor {} lies outside its rank's data or has the wrong size",
                        path.string(), name);
    }
  }
  const std::string_view config_json(reinterpret_cast<const char*>(base + h->config_offset), h->config_bytes);
  auto config = model_config_from_json(config_json);
  if (!config.is_ok()) return config.status().with_context(path.string());
  w.config = std::move(config).value();
  w.header = h;
  w.model_name = fixed_string(h->model_name, sizeof(h->model_name));
  w.model_format = fixed_string(h->model_format, sizeof(h->model_format));
  w.layout = layout;
  w.tokenizer_blob = {reinterpret_cast<const char*>(base + h->tokenizer_offset), h->tokenizer_bytes};
  w.chat_template = {reinterpret_cast<const char*>(base + h->template_offset), h->template_bytes};
  w.token_bytes = {reinterpret_cast<const char*>(base + h->token_bytes_offset), h->token_bytes_bytes};
  return w;
}

std::string weights_token_table_encode(const std::vector<std::string>& tokens) {
  std::string out;
  auto put = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(static_cast<uint32_t>(tokens.size()));
  uint32_t offset = 0;
  put(offset);
  for (const std::string& t : tokens) {
    offset += static_cast<uint32_t>(t.size());
    put(offset);
  }
  for (const std::string& t : tokens) out += t;
  return out;
}

Status draft_tokens_check(std::span<const std::string> target, std::span<const std::string> draft) {
  if (draft.size() != target.size()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the draft model has {} tokens and the target {}: a draft model must share the target's tokenizer",
                      draft.size(), target.size());
  }
  for (size_t id = 0; id < target.size(); ++id) {
    if (draft[id] != target[id]) {
      return make_error(ErrorCode::kInvalidArgument,
                        "token {} is {:?} to the draft model and {:?} to the target: a draft model must share the "
                        "target's tokenizer",
                        id, draft[id], target[id]);
    }
  }
  return Status::ok();
}

Status weights_draft_check(const AttachedWeights& target, const AttachedWeights& draft) {
  HEARTH_ASSIGN_OR_RETURN(auto target_tokens, weights_token_table(target, target.config.vocab_size));
  HEARTH_ASSIGN_OR_RETURN(auto draft_tokens, weights_token_table(draft, draft.config.vocab_size));
  return draft_tokens_check(target_tokens, draft_tokens);
}

Result<std::vector<std::string>> weights_token_table(const AttachedWeights& w, int32_t vocab_size) {
  const std::string_view t = w.token_bytes;
  auto bad = [&](std::string_view why) {
    return make_error(ErrorCode::kFormat, "{}: the token byte table is corrupt ({}); restart hearth-loader to rebuild it",
                      w.segment.path().string(), why);
  };
  auto read_u32 = [&](size_t at) {
    uint32_t v = 0;
    std::memcpy(&v, t.data() + at, sizeof(v));
    return v;
  };
  if (t.size() < 8) return bad("too short");
  const uint32_t n = read_u32(0);
  if (vocab_size < 0) return bad("a negative vocabulary size");
  const size_t table = 4 + (size_t{n} + 1) * 4;
  if (t.size() < table) return bad("offsets cut short");
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(vocab_size));
  uint32_t prev = read_u32(4);
  if (prev != 0) return bad("offsets do not start at 0");
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t next = read_u32(4 + (size_t{i} + 1) * 4);
    if (next < prev || table + next > t.size()) return bad("offsets out of order or outside the table");
    out.emplace_back(t.substr(table + prev, next - prev));
    prev = next;
  }
  out.resize(static_cast<size_t>(vocab_size));  // ids the model cannot produce go; rows without ids have no text
  return out;
}

std::vector<WeightsEntry> AttachedWeights::entries() const {
  const auto* e = reinterpret_cast<const WeightsEntry*>(segment.data() + header->manifest_offset);
  return {e, e + header->n_entries};
}

std::vector<TensorView> AttachedWeights::tensors(int rank) const {
  std::vector<TensorView> out;
  for (const WeightsEntry& e : entries()) {
    if (static_cast<int>(e.rank) != rank) continue;
    TensorView t;
    t.name = fixed_string(e.name, sizeof(e.name));
    t.dtype = static_cast<DType>(e.dtype);
    t.n_dims = static_cast<int>(e.n_dims);
    for (uint32_t d = 0; d < e.n_dims; ++d) t.shape[d] = e.shape[d];
    t.data = segment.data() + e.offset;
    t.bytes = e.bytes;
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace hearth
