#include "frontend/metrics.h"

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace hearth {
namespace {

TEST(LatencyHistogram, RendersCumulativeBucketsSumAndCount) {
  LatencyHistogram h;
  h.observe(0.004);  // first bucket
  h.observe(0.2);    // le=0.25
  h.observe(0.25);   // le=0.25: bounds are inclusive
  h.observe(500.0);  // only +Inf
  std::string out;
  h.render(out, "t_seconds", "a test");
  EXPECT_NE(out.find("# HELP t_seconds a test\n# TYPE t_seconds histogram\n"), std::string::npos) << out;
  EXPECT_NE(out.find("t_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("t_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("t_seconds_bucket{le=\"0.25\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("t_seconds_bucket{le=\"120\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("t_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("t_seconds_sum 500.454000\n"), std::string::npos) << out;
  EXPECT_NE(out.find("t_seconds_count 4\n"), std::string::npos) << out;
}

TEST(LatencyHistogram, NegativeAndNanCountAsZero) {
  LatencyHistogram h;
  h.observe(-1.0);
  h.observe(std::nan(""));
  std::string out;
  h.render(out, "x", "x");
  EXPECT_NE(out.find("x_bucket{le=\"0.005\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum 0.000000\n"), std::string::npos) << out;
}

TEST(LatencyHistogram, ConcurrentObserversLoseNothing) {
  LatencyHistogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 10000; ++i) h.observe(0.001 * (t + 1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.count(), 40000u);
  std::string out;
  h.render(out, "c", "c");
  EXPECT_NE(out.find("c_bucket{le=\"0.005\"} 40000\n"), std::string::npos) << out;
}

TEST(RenderMetric, WritesHelpTypeAndSample) {
  std::string out;
  render_metric(out, "hearth_x_total", "counter", "things", 7);
  EXPECT_EQ(out, "# HELP hearth_x_total things\n# TYPE hearth_x_total counter\nhearth_x_total 7\n");
}

}  // namespace
}  // namespace hearth
