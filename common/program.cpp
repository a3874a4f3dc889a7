#include "common/program.h"

#include <cstdio>

#include "common/log.h"
#include "common/version.h"

namespace hearth {

std::set<std::string> with_program_flags(std::set<std::string> flags, const std::set<std::string>& common) {
  flags.insert(common.begin(), common.end());
  return flags;
}

std::optional<int> handle_program_flags(const Args& args, std::string_view program, const Status& logging) {
  if (args.has("version")) {
    std::printf("%s\n", version_line(program).c_str());
    return 0;
  }
  Status st = logging;
  if (st.is_ok()) st = log_configure(args.get("log-level").value_or(""), args.get("log-format").value_or(""));
  if (!st.is_ok()) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(), st.message().c_str());
    return 2;
  }
  if (cuda_emulated()) {
    HEARTH_LOG_INFO("{}: this build's CUDA device is emulated on the CPU (HEARTH_CUDA=EMU): its kernels run on "
                    "fibers, not on a GPU",
                    program);
  }
  return std::nullopt;
}

}  // namespace hearth
