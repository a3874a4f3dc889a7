#include "ipc/slab_channel.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "tests/unit/ipc/fd_test_util.h"

namespace hearth {
namespace {

using std::chrono::milliseconds;
using testing::content_of;
using testing::memfd_with;

SlabRecord record(int rank) {
  SlabRecord r;
  r.rank = rank;
  r.device = rank;
  r.device_uuid = "GPU-0123abcd-4567-89ef-0123-456789abcdef";
  r.compute_capability = 90;
  r.bytes = 4ull << 20;
  r.data_bytes = 3ull << 20;
  r.weights = {0x0123456789abcdefull, 0xfedcba9876543210ull};
  return r;
}

TEST(SlabChannelTest, RecordsRoundTripThroughJsonAndStoreNames) {
  const SlabRecord r = record(3);
  auto from_json = slab_record_from_json(boost::json::value(slab_record_json(r)));
  ASSERT_TRUE(from_json.is_ok()) << from_json.status().to_string();
  EXPECT_EQ(*from_json, r);
  const std::string name = slab_store_name(r);
  EXPECT_LE(name.size(), 255u);
  EXPECT_EQ(name.find(':'), std::string::npos);
  auto from_name = slab_record_from_store_name(name);
  ASSERT_TRUE(from_name.is_ok()) << from_name.status().to_string();
  EXPECT_EQ(*from_name, r);

  SlabRecord legacy = record(0);
  legacy.handle = std::string(kSlabHandleCudaIpc);
  legacy.ipc_handle = std::string(128, 'a');
  auto legacy_back = slab_record_from_json(boost::json::value(slab_record_json(legacy)));
  ASSERT_TRUE(legacy_back.is_ok()) << legacy_back.status().to_string();
  EXPECT_EQ(*legacy_back, legacy);
}

TEST(SlabChannelTest, RefusesMalformedRecordsAndNames) {
  const std::string good = slab_store_name(record(1));
  for (std::string bad : {std::string(""), std::string("hearth-slab."), std::string("other.") + good.substr(12),
                          good + ".extra", good.substr(0, good.size() - 1),
                          std::string("hearth-slab.r1.d1.GPU-0123abcd-4567-89ef-0123-456789abcdef.sm90.100.200.") +
                              record(1).weights.hex(),  // bytes < data_bytes
                          std::string("hearth-slab.r99999999999999999999.d1.x.sm90.1.1.") + record(1).weights.hex(),
                          std::string("hearth-slab.r1.d1.GPU-XYZ.sm90.10.1.") + record(1).weights.hex(),
                          std::string(300, 'h')}) {
    EXPECT_FALSE(slab_record_from_store_name(bad).is_ok()) << bad;
  }
  auto json_of = [](auto mutate) {
    boost::json::object o = slab_record_json(record(0));
    mutate(o);
    return slab_record_from_json(boost::json::value(o)).is_ok();
  };
  EXPECT_FALSE(json_of([](boost::json::object& o) { o["rank"] = -1; }));
  EXPECT_FALSE(json_of([](boost::json::object& o) { o["rank"] = "0"; }));
  EXPECT_FALSE(json_of([](boost::json::object& o) { o["handle"] = "magic"; }));
  EXPECT_FALSE(json_of([](boost::json::object& o) { o["handle"] = "cuda-ipc"; }));  // without its handle
  EXPECT_FALSE(json_of([](boost::json::object& o) { o["ipc_handle"] = std::string(128, 'a'); }));  // vmm with one
  EXPECT_FALSE(json_of([](boost::json::object& o) { o["weights"] = "00"; }));
  EXPECT_FALSE(json_of([](boost::json::object& o) { o.erase("bytes"); }));
  EXPECT_FALSE(slab_record_from_json(boost::json::value(42)).is_ok());
}

TEST(SlabChannelTest, ServesEachRankItsOwnSlab) {
  testing::TempDir dir;
  const auto path = slab_socket_path(dir.path(), "t");
  EXPECT_FALSE(slab_fetch(path, 0)->has_value());  // no loader serves slabs yet
  std::vector<ServedSlab> slabs(2);
  for (int r = 0; r < 2; ++r) {
    slabs[r].record = record(r);
    slabs[r].fd = memfd_with("rank " + std::to_string(r));
  }
  slabs[1].adopted = true;
  slabs[1].held_by = {"hearth serve"};
  auto server = SlabServer::start(path, std::move(slabs));
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();

  auto one = slab_fetch(path, 1);
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  ASSERT_TRUE(one->has_value());
  EXPECT_EQ((*one)->record, record(1));
  EXPECT_EQ(content_of((*one)->fd.get()), "rank 1");

  auto missing = slab_fetch(path, 5);
  EXPECT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("no device slab for rank 5"), std::string::npos)
      << missing.status().message();

  auto status = slab_status(path);
  ASSERT_TRUE(status.is_ok()) << status.status().to_string();
  EXPECT_EQ((*status)["pid"].as_int64(), ::getpid());
  const boost::json::array& described = (*status)["slabs"].as_array();
  ASSERT_EQ(described.size(), 2u);
  EXPECT_FALSE(described[0].at("adopted").as_bool());
  EXPECT_TRUE(described[0].at("importers").as_array().empty());
  EXPECT_TRUE(described[1].at("adopted").as_bool());
  EXPECT_EQ(described[1].at("held_by").as_array().at(0).as_string(), "hearth serve");
  ASSERT_EQ(described[1].at("importers").as_array().size(), 1u);
  EXPECT_EQ(described[1].at("importers").as_array()[0].as_int64(), ::getpid());
}

TEST(SlabChannelTest, AnswersBadRequestsAndKeepsServing) {
  testing::TempDir dir;
  const auto path = slab_socket_path(dir.path(), "t");
  std::vector<ServedSlab> slabs(1);
  slabs[0].record = record(0);
  slabs[0].fd = memfd_with("rank 0");
  auto server = SlabServer::start(path, std::move(slabs));
  ASSERT_TRUE(server.is_ok());
  for (std::string bad : {std::string("not json"), std::string("[1,2]"), std::string(R"({"op":"grab"})"),
                          std::string(R"({"op":"get","rank":"zero"})"), std::string(R"({"rank":0})"),
                          std::string(5000, '[')}) {
    auto socket = unix_connect(path);
    ASSERT_TRUE(socket.is_ok());
    ASSERT_TRUE(unix_send(socket->get(), bad).is_ok());
    auto answer = unix_receive(socket->get(), milliseconds(5000));
    ASSERT_TRUE(answer.is_ok()) << bad;
    EXPECT_NE(answer->bytes.find(R"("ok":false)"), std::string::npos) << answer->bytes;
    EXPECT_TRUE(answer->fds.empty());
  }
  auto good = slab_fetch(path, 0);
  ASSERT_TRUE(good.is_ok() && good->has_value());
  EXPECT_EQ(content_of((*good)->fd.get()), "rank 0");
}

TEST(SlabChannelTest, LegacyHandlesTravelWithoutDescriptors) {
  testing::TempDir dir;
  const auto path = slab_socket_path(dir.path(), "t");
  std::vector<ServedSlab> slabs(1);
  slabs[0].record = record(0);
  slabs[0].record.handle = std::string(kSlabHandleCudaIpc);
  slabs[0].record.ipc_handle = std::string(128, 'f');
  auto server = SlabServer::start(path, std::move(slabs));
  ASSERT_TRUE(server.is_ok());
  auto got = slab_fetch(path, 0);
  ASSERT_TRUE(got.is_ok() && got->has_value()) << got.status().to_string();
  EXPECT_FALSE((*got)->fd);
  EXPECT_EQ((*got)->record.ipc_handle, std::string(128, 'f'));
}

}  // namespace
}  // namespace hearth
