#include "loader/resident.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>

#include "common/log.h"
#include "common/model_tensors.h"
#include "common/process.h"
#include "common/test_point.h"
#include "ipc/weights_segment.h"
#include "kernels/reference/reference.h"
#include "loader/model.h"
#include "kernels/cpu/repack.h"
#include "loader/quantize.h"
#include "tokenizer/source_codec.h"

namespace hearth {
namespace {

// Where each section of the segment goes, computed before anything is created.
struct Layout {
  uint64_t manifest_offset = 0;
  uint64_t config_offset = 0, tokenizer_offset = 0, template_offset = 0, token_bytes_offset = 0;
  uint64_t rank_offset[kMaxTensorParallel] = {};
  uint64_t rank_bytes[kMaxTensorParallel] = {};
  uint64_t total_bytes = 0;
  uint64_t alignment = kTensorAlignment;
};

// One tensor of one rank as it will be written.
struct PlannedTensor {
  const TensorView* source = nullptr;
  WeightsEntry entry{};
  int64_t row_begin = 0, col_begin = 0;  // the slice of the source this shard holds
};

void copy_name(char* dst, size_t size, std::string_view src) {
  std::memset(dst, 0, size);
  std::memcpy(dst, src.data(), std::min(size - 1, src.size()));
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct Fnv {
  uint64_t h;
  void add(std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull;  // separator, so "ab","c" differs from "a","bc"
  }
};

Status add_file_identity(const std::filesystem::path& p, Fnv& a, Fnv& b) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    return make_error(ErrorCode::kNotFound, "model file {} does not exist", p.string());
  }
  const std::string id = fmt::format("{}|{}|{}.{}|{}", std::filesystem::absolute(p).lexically_normal().string(),
                                     st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ino);
  a.add(id);
  b.add(id);
  return Status::ok();
}

// Which split a tensor gets with tensor parallelism.
// A column order (.perm) goes whole to every rank: the rows of its matrix are split. The
// bias of a column-split matrix (attention output, FFN down) goes whole to every rank too:
// it is added once, after the partial sums are reduced.
TensorSplit split_of(std::string_view name, int tp) {
  if (tp == 1 || name.ends_with(".perm")) return TensorSplit::kReplicated;
  if (name.ends_with(".bias") && (name.find("attn_output.") != std::string_view::npos ||
                                  name.find("ffn_down.") != std::string_view::npos)) {
    return TensorSplit::kReplicated;
  }
  for (std::string_view s : {"attn_q.", "attn_k.", "attn_v.", "ffn_gate.", "ffn_up.", "ffn_gate_shexp.", "ffn_up_shexp."}) {
    if (name.find(s) != std::string_view::npos) return TensorSplit::kRows;
  }
  for (std::string_view s : {"attn_output.", "ffn_down.", "ffn_down_shexp."}) {
    if (name.find(s) != std::string_view::npos) return TensorSplit::kCols;
  }
  return TensorSplit::kReplicated;
}

Status check_tp(const ModelConfig& c, int tp) {
  if (tp < 1 || tp > kMaxTensorParallel) {
    return make_error(ErrorCode::kInvalidArgument, "--tp {} is out of range 1..{}", tp, kMaxTensorParallel);
  }
  if (c.n_heads % tp != 0 || c.n_kv_heads % tp != 0 || c.hidden_dim % tp != 0 || c.shared_expert_dim % tp != 0 ||
      c.dense_hidden_dim % tp != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--tp {} must divide the heads ({}), kv heads ({}), feed-forward size ({}), shared expert "
                      "size ({}) and dense layers' size ({})", tp, c.n_heads, c.n_kv_heads, c.hidden_dim,
                      c.shared_expert_dim, c.dense_hidden_dim);
  }
  return Status::ok();
}

// Lays out every rank's tensors; returns the plan and fills the rank regions.
Result<std::vector<PlannedTensor>> plan_tensors(const LoadedModel& model, const ResidentOptions& o, Layout& h,
                                                uint64_t data_begin) {
  const uint64_t alignment = h.alignment;
  const ModelConfig& c = model.config;
  std::vector<PlannedTensor> plan;
  uint64_t offset = data_begin;
  for (int rank = 0; rank < o.tp; ++rank) {
    offset = align_up(offset, alignment);
    h.rank_offset[rank] = offset;
    for (const TensorSpec& spec : model_tensor_specs(c)) {
      const TensorView* t = model.find(spec.name);
      if (t == nullptr) continue;
      if (o.tp > 1 && spec.name.ends_with("attn_output.perm")) {
        return make_error(ErrorCode::kUnsupported,
                          "{}: the attention output projection's act-order column order mixes every rank's heads, so "
                          "--tp {} cannot split it; serve this model with --tp 1",
                          spec.name, o.tp);
      }
      PlannedTensor p;
      p.source = t;
      WeightsEntry& e = p.entry;
      copy_name(e.name, sizeof(e.name), spec.name);
      e.rank = static_cast<uint32_t>(rank);
      const TensorSplit split = split_of(spec.name, o.tp);
      e.split = static_cast<uint32_t>(split);
      e.n_dims = static_cast<uint32_t>(t->n_dims);
      for (int d = 0; d < t->n_dims; ++d) e.shape[d] = t->shape[d];
      if (split == TensorSplit::kRows) {
        e.shape[0] = t->shape[0] / o.tp;
        // A vector (a bias of a row-split matrix) is one row: its share is a run of columns.
        (t->n_dims == 1 ? p.col_begin : p.row_begin) = e.shape[0] * rank;
      } else if (split == TensorSplit::kCols) {
        e.shape[1] = t->shape[1] / o.tp;
        p.col_begin = e.shape[1] * rank;
      }
      const int64_t cols = e.n_dims >= 2 ? e.shape[1] : e.shape[0];
      DType type = t->dtype;
      if (o.quant && spec.matrix) {
        if (cols % dtype_block_elems(*o.quant) == 0) {
          type = *o.quant;
        } else if (rank == 0) {
          HEARTH_LOG_WARN("{} keeps {}: its rows of {} values are not whole groups of {}", spec.name,
                          dtype_name(t->dtype), cols, dtype_block_elems(*o.quant));
        }
      }
      if (split == TensorSplit::kCols && (cols % dtype_block_elems(type) != 0)) {
        return make_error(ErrorCode::kInvalidArgument,
                          "--tp {} splits {} into {} columns, not whole {} blocks: use a smaller --tp", o.tp,
                          spec.name, cols, dtype_name(type));
      }
      if (o.layout == kLayoutCpuR16) type = cpu_r16_type(spec.name, static_cast<int>(e.n_dims), type, e.shape[0], cols);
      e.dtype = static_cast<uint32_t>(type);
      int64_t elements = 1;
      for (uint32_t d = 0; d < e.n_dims; ++d) elements *= e.shape[d];
      e.bytes = *dtype_bytes(type, elements);
      offset = align_up(offset, kTensorAlignment);
      e.offset = offset;
      e.device_offset = offset - h.rank_offset[rank];
      offset += e.bytes;
      plan.push_back(p);
    }
    h.rank_bytes[rank] = offset - h.rank_offset[rank];
  }
  h.total_bytes = align_up(offset, alignment);
  return plan;
}

// The tensor's bytes in a plain layout of `out_type`.
void write_plain(const PlannedTensor& p, const TensorView& src, DType out_type, std::byte* dst) {
  const WeightsEntry& e = p.entry;
  const int64_t src_cols = src.cols();
  const int64_t rows = e.n_dims >= 2 ? e.shape[0] : 1;
  const int64_t cols = e.n_dims >= 2 ? e.shape[1] : e.shape[0];
  const uint64_t src_row_bytes = *dtype_bytes(src.dtype, src_cols);
  if (out_type == src.dtype) {
    const uint64_t col_offset = *dtype_bytes(src.dtype, p.col_begin);
    const uint64_t row_bytes = *dtype_bytes(src.dtype, cols);
    if (row_bytes == src_row_bytes) {
      std::memcpy(dst, src.data + p.row_begin * src_row_bytes, e.bytes);
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * row_bytes, src.data + (p.row_begin + r) * src_row_bytes + col_offset, row_bytes);
    }
    return;
  }
  std::vector<float> row(static_cast<size_t>(src_cols));
  const uint64_t out_row_bytes = *dtype_bytes(out_type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    kernels::ref::dequantize_row(src.dtype, src.data + (p.row_begin + r) * src_row_bytes, row.data(), src_cols);
    quantize_row(out_type, row.data() + p.col_begin, cols, dst + r * out_row_bytes);
  }
}

// Writes one planned tensor into the segment: a copy, a sliced copy, or a conversion,
// repacked last when the resident layout is row-interleaved.
void write_tensor(const PlannedTensor& p, std::byte* base) {
  const TensorView& src = *p.source;
  const WeightsEntry& e = p.entry;
  const auto resident_type = static_cast<DType>(e.dtype);
  const DType out_type = dtype_plain(resident_type);
  // Whole source rows of the same type: repacked straight from the model file.
  if (resident_type != out_type && src.dtype == out_type && p.col_begin == 0 && src.cols() == e.shape[1]) {
    const uint64_t row_bytes = *dtype_bytes(src.dtype, src.cols());
    kernels::cpu::repack_r16(out_type, src.data + p.row_begin * row_bytes, e.shape[0], e.shape[1], base + e.offset);
    return;
  }
  std::vector<std::byte> plain;
  std::byte* dst = base + e.offset;
  if (resident_type != out_type) {
    plain.resize(e.bytes);
    dst = plain.data();
  }
  write_plain(p, src, out_type, dst);
  if (resident_type != out_type) kernels::cpu::repack_r16(out_type, plain.data(), e.shape[0], e.shape[1], base + e.offset);
}


// What to do with a segment that already exists at `path`.
enum class Existing { kNone, kAdopt, kReplace };

Result<Existing> inspect_existing(const std::filesystem::path& path, const Fingerprint& fp, bool model_present) {
  if (!std::filesystem::exists(path)) return Existing::kNone;
  auto seg = ShmSegment::attach(path, /*writable=*/false);
  if (!seg.is_ok() || seg->size() < kWeightsHeaderBytes) {
    HEARTH_LOG_WARN("{} exists but cannot be read as a weights segment; replacing it", path.string());
    return Existing::kReplace;
  }
  const auto* h = reinterpret_cast<const WeightsHeader*>(seg->data());
  const Status header = weights_header_check(*h, seg->size(), path);
  if (!header.is_ok()) {
    HEARTH_LOG_WARN("replacing {}: {}", path.string(), header.message());
    return Existing::kReplace;
  }
  const uint32_t state = h->state.load(std::memory_order_acquire);
  const bool owner_alive = process_alive(h->owner_pid.load(), h->owner_start_time.load()) &&
                           h->owner_pid.load() != ::getpid();
  if (state == static_cast<uint32_t>(SegmentState::kLoading)) {
    if (process_alive(h->creator_pid, h->creator_start_time)) {
      return make_error(ErrorCode::kUnavailable, "{} is being loaded by hearth-loader pid {}; not starting a second one",
                        path.string(), h->creator_pid);
    }
    HEARTH_LOG_WARN("replacing {}: left half-written by pid {}, which died", path.string(), h->creator_pid);
    return Existing::kReplace;
  }
  if (state != static_cast<uint32_t>(SegmentState::kReady)) return Existing::kReplace;
  if (h->fingerprint == fp || !model_present) {
    if (owner_alive) {
      return make_error(ErrorCode::kUnavailable, "{} is held by hearth-loader pid {} already; not starting a second "
                        "one", path.string(), h->owner_pid.load());
    }
    return Existing::kAdopt;
  }
  if (owner_alive) {
    return make_error(ErrorCode::kInvalidArgument,
                      "instance segment {} holds another model and hearth-loader pid {} serves it: stop that loader "
                      "first or use another --instance",
                      path.string(), h->owner_pid.load());
  }
  HEARTH_LOG_INFO("replacing {}: it holds another model or other options (fingerprint {})", path.string(),
                  h->fingerprint.hex());
  return Existing::kReplace;
}

void set_owner(const ShmSegment& seg) {
  auto* h = reinterpret_cast<WeightsHeader*>(seg.data());
  h->owner_start_time.store(process_start_time(::getpid()), std::memory_order_relaxed);
  h->owner_pid.store(::getpid(), std::memory_order_release);
}

}  // namespace

Result<DType> quant_from_name(std::string_view name) {
  if (name == "int8") return DType::kQ8_0;
  if (name == "int4") return DType::kQ4_0;
  return make_error(ErrorCode::kInvalidArgument, "--quant must be int8 or int4, not \"{}\"", name);
}

DType cpu_r16_type(std::string_view name, int n_dims, DType type, int64_t rows, int64_t cols) {
  if (name == "token_embd.weight" || n_dims != 2 || !kernels::cpu::repack_supported(type, rows, cols)) return type;
  return kernels::cpu::r16_of(type);
}

Status layout_check_name(std::string_view name) {
  if (name == kLayoutCpuR16 || name == kLayoutPlain) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument, "--layout must be cpu-r16 or plain, not \"{}\"", name);
}

Result<Fingerprint> resident_fingerprint(const ResidentOptions& o) {
  Fnv a{0xcbf29ce484222325ull}, b{0x84222325cbf29ce4ull};
  const std::string opts = fmt::format("layout {}|quant {}|tp {}|huge {}|tensors {}", kWeightsLayoutVersion,
                                       o.quant ? dtype_name(*o.quant) : "none", o.tp, o.hugepages, o.layout);
  a.add(opts);
  b.add(opts);
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  if (std::filesystem::is_directory(o.model, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(o.model, ec)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
  } else {
    files.push_back(o.model);
    // llama2.c keeps its tokenizer beside the checkpoint.
    for (const auto& entry : std::filesystem::directory_iterator(o.model.parent_path().empty() ? "." : o.model.parent_path(), ec)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && (name == "tokenizer.bin" || (name.starts_with("tok") && name.ends_with(".bin")))) {
        files.push_back(entry.path());
      }
    }
  }
  if (!o.tokenizer.empty()) files.push_back(o.tokenizer);
  std::sort(files.begin(), files.end());
  for (const auto& f : files) HEARTH_RETURN_IF_ERROR(add_file_identity(f, a, b));
  return Fingerprint{a.h, b.h};
}

namespace {

// Decode reads every weight once per token, and on 4 KiB pages the page walks cost it up to
// a fifth of its speed: the weights go on 2 MiB pages wherever the kernel allows. Without
// them the loader says so once (or, with --hugepages, refuses to go on).
Status huge_pages_check(const ShmSegment& seg, bool required) {
  const uint64_t whole = huge_page_floor(seg.size());
  if (seg.huge_bytes() == whole) {
    if (whole > 0) HEARTH_LOG_INFO("weights: {} on 2 MiB pages", human_bytes(whole));
    return Status::ok();
  }
  const std::string why = seg.why_not_huge();
  if (required) {
    return make_error(seg.huge_unsupported() ? ErrorCode::kUnsupported : ErrorCode::kResourceExhausted,
                      "--hugepages: only {} of the weights' {} are on 2 MiB pages: {}; drop --hugepages to run on "
                      "4 KiB pages (see docs/operations.md)",
                      human_bytes(seg.huge_bytes()), human_bytes(whole), why);
  }
  HEARTH_LOG_WARN("weights: {} of {} on 2 MiB pages, the rest on 4 KiB pages, where decode runs up to 20% slower: {} "
                  "(see docs/operations.md)",
                  human_bytes(seg.huge_bytes()), human_bytes(whole), why);
  return Status::ok();
}

}  // namespace

Result<ResidentSegment> resident_publish(const ResidentOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  HEARTH_RETURN_IF_ERROR(instance_name_check(o.instance));
  const std::filesystem::path dir = o.shm_dir.empty() ? shm_dir_default() : o.shm_dir;
  const std::filesystem::path path = segment_path(dir, o.instance, o.segment);
  const bool model_present = std::filesystem::exists(o.model);
  Fingerprint fp;
  if (model_present) {
    HEARTH_ASSIGN_OR_RETURN(fp, resident_fingerprint(o));
  }
  HEARTH_ASSIGN_OR_RETURN(const Existing existing, inspect_existing(path, fp, model_present));
  if (existing == Existing::kAdopt) {
    // A valid segment of this model: keep it, read nothing.
    HEARTH_ASSIGN_OR_RETURN(AttachedWeights w, weights_attach(path, {}));
    if (!model_present) {
      HEARTH_LOG_WARN("model {} is gone; keeping the resident copy of {} in {}", o.model.string(), w.model_name,
                      path.string());
    }
    HEARTH_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::attach(path, /*writable=*/true));
    set_owner(seg);
    return ResidentSegment{std::move(seg), w.header->fingerprint, true, elapsed()};
  }
  if (!model_present) {
    return make_error(ErrorCode::kNotFound, "model {} does not exist and {} holds no copy of it", o.model.string(),
                      path.string());
  }

  ModelOpenOptions open_options;
  open_options.tokenizer_path = o.tokenizer;
  HEARTH_ASSIGN_OR_RETURN(LoadedModel model, model_open(o.model, open_options));
  HEARTH_RETURN_IF_ERROR(check_tp(model.config, o.tp));
  HEARTH_RETURN_IF_ERROR(layout_check_name(o.layout));
  // The tokenizer must load, here and not in every engine later.
  HEARTH_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, tokenizer_load(model.tokenizer));
  const std::string config_json = model_config_to_json(model.config);
  const std::string tokenizer_blob = tokenizer_source_encode(model.tokenizer);
  const std::string& chat_template = tokenizer->chat_template();
  std::vector<std::string> token_text;
  for (TokenId id = 0; id < tokenizer->vocab_size(); ++id) token_text.emplace_back(tokenizer->token_bytes(id));
  const std::string token_bytes = weights_token_table_encode(token_text);

  Layout h;
  h.alignment = o.hugepages ? kHugePageAlignment : kTensorAlignment;
  const size_t n_entries = model_tensor_specs(model.config).size() * static_cast<size_t>(o.tp);
  h.manifest_offset = kWeightsHeaderBytes;
  h.config_offset = h.manifest_offset + n_entries * sizeof(WeightsEntry);
  h.tokenizer_offset = h.config_offset + config_json.size();
  h.template_offset = h.tokenizer_offset + tokenizer_blob.size();
  h.token_bytes_offset = h.template_offset + chat_template.size();
  HEARTH_ASSIGN_OR_RETURN(std::vector<PlannedTensor> plan,
                          plan_tensors(model, o, h, h.token_bytes_offset + token_bytes.size()));

  // Room first: fail before writing a byte, saying what to do about it.
  HEARTH_ASSIGN_OR_RETURN(const ShmSpace space, shm_space(dir));
  if (h.total_bytes > space.free_bytes) {
    return make_error(ErrorCode::kShmTooSmall,
                      "{} has {} free, the model needs {}; raise it (mount -o remount,size={}G {}), point --shm-dir at "
                      "a larger tmpfs, or shrink the model with --quant int8 / --quant int4",
                      dir.string(), human_bytes(space.free_bytes), human_bytes(h.total_bytes),
                      (space.total_bytes - space.free_bytes + h.total_bytes) / (1ull << 30) + 1, dir.string());
  }
  if (existing == Existing::kReplace) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  HEARTH_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::create(path, h.total_bytes, HugePagePlan{}));
  HEARTH_RETURN_IF_ERROR(huge_pages_check(seg, o.hugepages));
  HEARTH_TEST_POINT("loader.publish.reserved");  // the file exists, all zeros

  // The header, in place; state LOADING until every byte is written.
  auto* out = new (seg.data()) WeightsHeader{};
  segment_prologue_init(out->prologue, kWeightsSegment, h.total_bytes);
  out->creator_pid = ::getpid();
  out->creator_start_time = process_start_time(::getpid());
  out->created_unix_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  out->fingerprint = fp;
  out->tp_size = static_cast<uint32_t>(o.tp);
  out->data_alignment = static_cast<uint32_t>(h.alignment);
  out->n_entries = plan.size();
  out->manifest_offset = h.manifest_offset;
  out->config_offset = h.config_offset;
  out->config_bytes = config_json.size();
  out->tokenizer_offset = h.tokenizer_offset;
  out->tokenizer_bytes = tokenizer_blob.size();
  out->template_offset = h.template_offset;
  out->template_bytes = chat_template.size();
  out->token_bytes_offset = h.token_bytes_offset;
  out->token_bytes_bytes = token_bytes.size();
  for (int r = 0; r < kMaxTensorParallel; ++r) {
    out->rank_offset[r] = h.rank_offset[r];
    out->rank_bytes[r] = h.rank_bytes[r];
  }
  for (const MappedFile& f : model.files) out->source_bytes += f.size();
  copy_name(out->model_name, sizeof(out->model_name), model.name);
  copy_name(out->model_format, sizeof(out->model_format), model_format_name(model.format));
  copy_name(out->source_path, sizeof(out->source_path),
            std::filesystem::absolute(o.model).lexically_normal().string());
  copy_name(out->quant, sizeof(out->quant), !o.quant ? "" : *o.quant == DType::kQ8_0 ? "int8" : "int4");
  copy_name(out->layout, sizeof(out->layout), o.layout);
  out->huge_page_bytes = seg.huge_bytes();
  out->state.store(static_cast<uint32_t>(SegmentState::kLoading), std::memory_order_release);
  set_owner(seg);

  auto* entries = reinterpret_cast<WeightsEntry*>(seg.data() + h.manifest_offset);
  for (size_t i = 0; i < plan.size(); ++i) entries[i] = plan[i].entry;
  std::memcpy(seg.data() + h.config_offset, config_json.data(), config_json.size());
  std::memcpy(seg.data() + h.tokenizer_offset, tokenizer_blob.data(), tokenizer_blob.size());
  std::memcpy(seg.data() + h.template_offset, chat_template.data(), chat_template.size());
  std::memcpy(seg.data() + h.token_bytes_offset, token_bytes.data(), token_bytes.size());
  HEARTH_TEST_POINT("loader.publish.loading");  // header and manifest written, LOADING

  // Tensor data, split over the cores: largest tensors first, handed out in turn.
  std::vector<size_t> order(plan.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return plan[a].entry.bytes > plan[b].entry.bytes; });
  const unsigned n_threads = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> written{0};
  uint64_t to_write = 0;
  for (const PlannedTensor& p : plan) to_write += p.entry.bytes;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < order.size();) {
      write_tensor(plan[order[i]], seg.data());
      written.fetch_add(plan[order[i]].entry.bytes, std::memory_order_relaxed);
      HEARTH_TEST_POINT("loader.publish.tensor");
    }
  };
  // A line a second while it loads: how far, how fast, how long still.
  std::mutex progress_mu;
  std::condition_variable progress_cv;
  bool loaded = false;
  const double load_start = elapsed();
  std::thread progress([&] {
    std::unique_lock lock(progress_mu);
    while (!progress_cv.wait_for(lock, std::chrono::seconds(1), [&] { return loaded; })) {
      const uint64_t done = written.load(std::memory_order_relaxed);
      const double seconds = elapsed() - load_start;
      const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
      HEARTH_LOG_INFO("loading {}: {} of {} ({:.0f}%), {:.0f} MB/s, about {:.0f} s left", model.name, human_bytes(done),
                      human_bytes(to_write), to_write > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(to_write) : 100.0,
                      rate / 1e6, rate > 0 ? static_cast<double>(to_write - done) / rate : 0.0);
    }
  });
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < n_threads; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  {
    std::lock_guard lock(progress_mu);
    loaded = true;
  }
  progress_cv.notify_all();
  progress.join();

  HEARTH_TEST_POINT("loader.publish.written");  // every byte written, still LOADING
  out->state.store(static_cast<uint32_t>(SegmentState::kReady), std::memory_order_release);
  seg.publish();
  HEARTH_TEST_POINT("loader.publish.ready");
  HEARTH_LOG_INFO("published {} ({}, {}) as {}: {} in {:.2f} s ({:.0f} MB/s)", model.name,
                  model_format_name(model.format), o.quant ? (*o.quant == DType::kQ8_0 ? "int8" : "int4") : "as stored",
                  path.string(), human_bytes(h.total_bytes), elapsed(),
                  elapsed() > 0 ? static_cast<double>(h.total_bytes) / elapsed() / 1e6 : 0.0);
  return ResidentSegment{std::move(seg), fp, false, elapsed()};
}

Status draft_segment_check(const ResidentSegment& target, const ResidentSegment& draft) {
  HEARTH_ASSIGN_OR_RETURN(AttachedWeights t, weights_attach(target.segment.path()));
  HEARTH_ASSIGN_OR_RETURN(AttachedWeights d, weights_attach(draft.segment.path()));
  return weights_draft_check(t, d);
}

}  // namespace hearth
