#include "tools/model_source.h"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "kernels/cpu/repack.h"
#include "loader/resident.h"
#include "tokenizer/source_codec.h"

namespace hearth::cli {
namespace {

Status check_vocab(const RunnableModel& m) {
  if (m.tokenizer->vocab_size() > m.config.vocab_size) {
    return make_error(ErrorCode::kFormat, "the tokenizer has {} tokens but the model only {}",
                      m.tokenizer->vocab_size(), m.config.vocab_size);
  }
  return Status::ok();
}

// Repacks every matrix the cpu-r16 layout interleaves into one private mapping (huge
// pages where the kernel allows them: a fault per 2 MiB instead of per 4 KiB, and fewer
// TLB misses when decode streams them), on all cores.
Status repack_matrices(RunnableModel& m) {
  std::vector<size_t> todo;
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorView& t = m.tensors[i];
    if (cpu_r16_type(t.name, t.n_dims, t.dtype, t.rows(), t.cols()) == t.dtype) continue;
    todo.push_back(i);
    offsets.push_back(total);
    total += (t.bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;  // as in the segment
  }
  if (todo.empty()) return Status::ok();
  void* arena = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (arena == MAP_FAILED) {
    return make_error(ErrorCode::kResourceExhausted, "no memory to repack the model's matrices ({} bytes): {}", total,
                      std::strerror(errno));
  }
  ::madvise(arena, total, MADV_HUGEPAGE);  // advice only: without it the layout is the same
  m.repacked = std::shared_ptr<std::byte>(static_cast<std::byte*>(arena),
                                          [total](std::byte* p) { ::munmap(p, total); });
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next++; k < todo.size(); k = next++) {
      TensorView& t = m.tensors[todo[k]];
      std::byte* dst = m.repacked.get() + offsets[k];
      kernels::cpu::repack_r16(t.dtype, t.data, t.rows(), t.cols(), dst);
      t.dtype = kernels::cpu::r16_of(t.dtype);
      t.data = dst;
    }
  };
  std::vector<std::jthread> helpers;
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < std::min(cores, todo.size()); ++i) helpers.emplace_back(work);
  work();
  helpers.clear();
  m.layout = kLayoutCpuR16;
  return Status::ok();
}

}  // namespace

Result<RunnableModel> open_model_files(const std::filesystem::path& model, const std::filesystem::path& tokenizer,
                                       std::string_view layout) {
  RunnableModel m;
  HEARTH_ASSIGN_OR_RETURN(LoadedModel loaded, model_open(model, ModelOpenOptions{tokenizer}));
  auto tok = tokenizer_load(loaded.tokenizer);
  if (!tok.is_ok()) return tok.status().with_context("tokenizer");
  m.tokenizer = std::move(tok).value();
  m.name = loaded.name;
  m.config = loaded.config;
  m.tensors = loaded.tensors;
  m.file.emplace(std::move(loaded));
  HEARTH_RETURN_IF_ERROR(check_vocab(m));
  if (layout == kLayoutCpuR16) HEARTH_RETURN_IF_ERROR(repack_matrices(m));
  return m;
}

Result<RunnableModel> attach_instance(const std::string& instance, const std::filesystem::path& shm_dir,
                                      std::string_view segment) {
  HEARTH_RETURN_IF_ERROR(instance_name_check(instance));
  const auto path = segment_path(shm_dir.empty() ? shm_dir_default() : shm_dir, instance, std::string(segment));
  // The weight pages fault in as the first forward pass reads them (measured: mapping
  // them all up front, on a helper thread or before starting, is no faster end to end).
  HEARTH_ASSIGN_OR_RETURN(AttachedWeights w, weights_attach(path));
  if (w.header->tp_size != 1) {
    return make_error(ErrorCode::kUnsupported,
                      "{} is split for {} tensor-parallel ranks; a single process runs segments loaded with --tp 1",
                      path.string(), w.header->tp_size);
  }
  HEARTH_ASSIGN_OR_RETURN(TokenizerSource source, tokenizer_source_decode(w.tokenizer_blob));
  auto tok = tokenizer_load(std::move(source));  // the decoded blob is not read again
  if (!tok.is_ok()) return tok.status().with_context(path.string() + ": stored tokenizer");
  RunnableModel m;
  m.tokenizer = std::move(tok).value();
  m.name = w.model_name;
  m.config = w.config;
  m.tensors = w.tensors(0);
  m.layout = w.layout;
  m.attached.emplace(std::move(w));
  HEARTH_RETURN_IF_ERROR(check_vocab(m));
  return m;
}

Result<std::string> model_argument(const Args& args) {
  const std::string flag = args.get("model").value_or("");
  const auto& positionals = args.positionals();
  if (positionals.size() > 1 || (!positionals.empty() && !flag.empty())) {
    return make_error(ErrorCode::kInvalidArgument, "give one model");
  }
  const std::string model = positionals.empty() ? flag : positionals[0];
  if (model.empty()) return make_error(ErrorCode::kInvalidArgument, "give the model (MODEL or --model PATH)");
  return model;
}

}  // namespace hearth::cli
