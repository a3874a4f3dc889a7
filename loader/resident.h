// Publishing a model as the instance's weights segment (the heart of hearth-loader).
//
// resident_publish reads the model once, converts every tensor to its resident layout
// (as given, or quantized to int8 / int4 on request), splits it for tensor parallelism
// and writes the segment (ipc/weights_layout.h), marking it READY only when complete.
// Before writing a byte it checks that the shared-memory directory has room and fails
// with an actionable ERR_SHM_TOO_SMALL otherwise. When a READY segment with the same
// fingerprint already exists (a restarted loader), it adopts it without reading the
// model. Not thread-safe (one loader per instance).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "common/tensor.h"
#include "ipc/segment.h"
#include "ipc/weights_layout.h"

namespace hearth {

struct ResidentOptions {
  std::filesystem::path model;
  std::filesystem::path tokenizer;  // optional, as for model_open
  std::filesystem::path shm_dir;    // empty: shm_dir_default()
  std::string instance = "default";
  // The segment's name: hearth.<instance>.<segment>; "draft-weights" for speculative
  // decoding's draft model (hearth-loader --draft-model).
  std::string segment = "weights";
  std::optional<DType> quant;       // kQ8_0 for --quant int8, kQ4_0 for --quant int4
  int tp = 1;
  bool hugepages = false;           // 2 MiB alignment, and fail unless the weights are on 2 MiB pages
  // The tensor layout to write (kLayoutCpuR16: quantized and 16-bit matrices row-interleaved for
  // the CPU kernels, by kernels/cpu/repack; kLayoutPlain: as quantized).
  std::string layout{kLayoutCpuR16};
};

struct ResidentSegment {
  ShmSegment segment;
  Fingerprint fingerprint;
  bool adopted = false;  // found READY with the same fingerprint; the model was not read
  double seconds = 0.0;  // time to publish (or adopt)
};

// The fingerprint of the model files' identity (paths, sizes, modification times,
// inodes) and of the options that shape the segment; the weights are not read.
Result<Fingerprint> resident_fingerprint(const ResidentOptions& options);

Result<ResidentSegment> resident_publish(const ResidentOptions& options);

// kInvalidArgument unless the model in `draft` can draft for the one in `target`
// (speculative decoding): the same tokens, id for id (weights_draft_check).
Status draft_segment_check(const ResidentSegment& target, const ResidentSegment& draft);

// "int8" -> kQ8_0, "int4" -> kQ4_0.
Result<DType> quant_from_name(std::string_view name);
// kInvalidArgument unless `name` is a layout the loader writes ("cpu-r16", "plain").
Status layout_check_name(std::string_view name);
// The type tensor `name` ([rows, cols] of `type` when n_dims is 2) takes in the cpu-r16
// layout: the R16 form of quantized and 16-bit matrices (kernels/cpu/repack.h), `type`
// for everything else. The embedding table stays plain: it is read a row at a time.
DType cpu_r16_type(std::string_view name, int n_dims, DType type, int64_t rows, int64_t cols);

}  // namespace hearth
