# Warnings for the project's own targets (not for third-party headers).
add_library(hearth_warnings INTERFACE)
target_compile_options(hearth_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wno-missing-field-initializers>)
