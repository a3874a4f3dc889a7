// memfd-backed descriptors for the tests of descriptor passing: a GPU slab's fd stands in
// as a file whose content says which one it is.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "common/unique_fd.h"

namespace hearth::testing {

inline UniqueFd memfd_with(const std::string& content) {
  UniqueFd fd(::memfd_create("hearth-test", MFD_CLOEXEC));
  if (fd && ::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) fd.reset();
  return fd;
}

inline std::string content_of(int fd) {
  std::string out(256, '\0');
  const ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

}  // namespace hearth::testing
