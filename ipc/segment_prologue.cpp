#include "ipc/segment_prologue.h"

namespace hearth {

void segment_prologue_init(SegmentPrologue& p, const SegmentKind& kind, uint64_t total_bytes) {
  p.magic = kind.magic;
  p.layout_version = kind.layout_version;
  p.header_bytes = kind.header_bytes;
  p.total_bytes = total_bytes;
}

Status segment_prologue_check(const SegmentPrologue& p, const SegmentKind& kind, uint64_t file_bytes,
                              const std::filesystem::path& path) {
  const std::string at = path.string();
  if (file_bytes < kind.header_bytes) {
    return make_error(ErrorCode::kFormat, "{} is truncated ({} bytes, less than a {} segment's header): remove it", at,
                      file_bytes, kind.name);
  }
  if (p.magic != kind.magic) {
    return make_error(ErrorCode::kFormat,
                      "{} is not a hearth {} segment (wrong magic): remove it, or point --instance elsewhere", at,
                      kind.name);
  }
  if (p.layout_version != kind.layout_version) {
    return make_error(ErrorCode::kFormat, "{} has {} layout version {}, this build uses {}: {} to replace it", at,
                      kind.name, p.layout_version, kind.layout_version, kind.replaced_by);
  }
  if (p.header_bytes != kind.header_bytes || p.total_bytes != file_bytes) {
    return make_error(ErrorCode::kFormat, "{} says it is {} bytes but the file is {}: truncated or corrupt; remove it",
                      at, p.total_bytes, file_bytes);
  }
  return Status::ok();
}

}  // namespace hearth
