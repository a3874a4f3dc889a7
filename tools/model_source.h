// Where a CLI command gets a runnable model: from model files (read in this process) or
// by attaching to an instance's resident weights segment (no model file is opened).
// Either way the result holds the mapping that its tensor views point into.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/args.h"
#include "common/model_config.h"
#include "common/status.h"
#include "common/tensor.h"
#include "ipc/weights_segment.h"
#include "loader/model.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {

struct RunnableModel {
  std::string name;
  ModelConfig config;
  std::vector<TensorView> tensors;
  std::string layout{kLayoutPlain};        // the segment's, when attached
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<LoadedModel> file;        // set when read from files
  std::optional<AttachedWeights> attached;  // set when attached to a segment
  // Matrices repacked from the files into the cpu-r16 layout: one private mapping.
  std::shared_ptr<std::byte> repacked;
};

// Reads the model files. With `layout` kLayoutCpuR16 (what the CPU backend runs fastest,
// and what hearth-loader publishes by default) the matrices are repacked into private
// memory as the loader would write them, so a model run from its files computes with the
// same layout and kernels as one attached to a resident segment; kLayoutPlain (for other
// backends) uses the mapped files as they are.
Result<RunnableModel> open_model_files(const std::filesystem::path& model, const std::filesystem::path& tokenizer,
                                       std::string_view layout = kLayoutCpuR16);

// The model a command is given: its one positional argument or --model (not both).
// kInvalidArgument naming the problem otherwise.
Result<std::string> model_argument(const Args& args);

// Attaches to hearth.<instance>.weights in `shm_dir` (empty: the default directory);
// `segment` "draft-weights": the instance's draft model (hearth-loader --draft-model).
Result<RunnableModel> attach_instance(const std::string& instance, const std::filesystem::path& shm_dir,
                                      std::string_view segment = "weights");

}  // namespace hearth::cli
