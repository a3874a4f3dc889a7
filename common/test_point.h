// Test points: named places in protocol code (the broker, the engine's step, the
// loader's publish) where a test crashes the process or runs code of its own, in the
// manner of RocksDB's test_util/sync_point.h and its kill points.
//
// HEARTH_TEST_POINT("engine.step.sampled") compiles to nothing unless the build defines
// HEARTH_TEST_POINTS (the CMake option of that name, on when the tests are built). With
// it, passing a point does, in order:
//  - kill: with HEARTH_KILL_POINT=name or name:n in the environment, the n-th pass of
//    `name` (n defaults to 1) appends "name\n" to the file HEARTH_KILL_LOG names, when
//    set, and SIGKILLs the process. HEARTH_KILL_AFTER_MS=m counts only the passes from m
//    ms after the process first passed any point. For crash tests with real processes.
//  - delay: HEARTH_DELAY_POINT=name:ms sleeps that long at each pass of `name` (an
//    engine whose steps take 50 ms, say, so that a stream lasts long enough to be cut).
//  - sync: a callback a test registered for `name` runs; and when test_point_order made
//    `name` the successor of another point, it waits until that point has been passed.
//    For in-process tests that need one interleaving.
// With nothing armed a point costs one relaxed load. Thread-safe; callbacks run on the
// thread that passes the point, outside any lock of this module.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth {

// Whether this build has test points at all.
bool test_points_compiled();

// What HEARTH_TEST_POINT calls.
void test_point_pass(std::string_view name);

// Runs `callback` each time `name` is passed (replacing an earlier one for it).
void test_point_set_callback(const std::string& name, std::function<void()> callback);
// For each pair {a, b}: a pass of b waits until a has been passed at least once (since
// this call).
void test_point_order(const std::vector<std::pair<std::string, std::string>>& before_after);
// Removes every callback and order; pass counts start again from zero.
void test_point_clear();
// Passes of `name` counted since the last clear (counted only while a callback or an
// order is registered).
uint64_t test_point_passes(std::string_view name);

}  // namespace hearth

#if defined(HEARTH_TEST_POINTS) && HEARTH_TEST_POINTS
#define HEARTH_TEST_POINT(name) ::hearth::test_point_pass(name)
#else
#define HEARTH_TEST_POINT(name) ((void)0)
#endif
