// The transports: zero-copy round trips, and malformed input from the wire dropped without
// harm to the messages that follow.
#include "net/transport.h"

#include <zmq.h>

#include <cstring>

#include <gtest/gtest.h>

namespace tally {
namespace {

Message PushOf(std::vector<float> values, uint64_t key) {
  Message m;
  m.meta.set_command(wire::PUSH);
  m.meta.set_dtype(wire::F32);
  wire::KeySlice* s = m.meta.add_slices();
  s->set_key(key);
  s->set_length(values.size());
  Tensor t = Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kF32);
  std::memcpy(t.raw_data(), values.data(), values.size() * 4);
  m.data.push_back(t);
  return m;
}

class TransportTest : public ::testing::TestWithParam<bool> {};

TEST_P(TransportTest, RoundTripKeepsMetaAndData) {
  std::unique_ptr<Transport> a = GetParam() ? NewZmqTransport() : NewInProcTransport();
  std::unique_ptr<Transport> b = GetParam() ? NewZmqTransport() : NewInProcTransport();
  int port = 0;
  ASSERT_TRUE(b->Bind("127.0.0.1", 0, &port).ok());
  ASSERT_TRUE(a->Connect(7, "127.0.0.1", port).ok());
  Message sent = PushOf({1.5f, -2.f, 3.25f}, 42);
  sent.meta.set_step(9);
  ASSERT_TRUE(a->Send(7, sent).ok());
  Message got;
  ASSERT_TRUE(b->Recv(&got, 5000).ok());
  EXPECT_EQ(got.meta.command(), wire::PUSH);
  EXPECT_EQ(got.meta.step(), 9);
  ASSERT_EQ(got.data.size(), 1u);
  EXPECT_EQ(got.data[0].data<float>()[2], 3.25f);
  EXPECT_FALSE(b->Recv(&got, 50).ok()) << "nothing else was sent";
}

// The ZeroMQ transport checks on receipt instead (DropsMalformedMessagesAndKeepsServing).
TEST(InProcTransport, RefusesToSendAMalformedMessage) {
  std::unique_ptr<Transport> a = NewInProcTransport(), b = NewInProcTransport();
  int port = 0;
  ASSERT_TRUE(b->Bind("127.0.0.1", 0, &port).ok());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", port).ok());
  Message bad = PushOf({1.f, 2.f}, 1);
  bad.meta.mutable_slices(0)->set_length(3);
  EXPECT_FALSE(a->Send(1, bad).ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "zmq" : "inproc"; });

// Sends raw multipart frames, as a broken or hostile peer would.
void SendRaw(void* socket, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    zmq_send(socket, frames[i].data(), frames[i].size(), i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
  }
}

TEST(ZmqTransport, DropsMalformedMessagesAndKeepsServing) {
  std::unique_ptr<Transport> node = NewZmqTransport();
  int port = 0;
  ASSERT_TRUE(node->Bind("127.0.0.1", 0, &port).ok());
  void* ctx = zmq_ctx_new();
  void* peer = zmq_socket(ctx, ZMQ_DEALER);  // as a node's sending socket connects
  ASSERT_EQ(zmq_connect(peer, ("tcp://127.0.0.1:" + std::to_string(port)).c_str()), 0);

  Message valid = PushOf({4.f, 5.f}, 3);
  std::string meta = valid.meta.SerializeAsString();
  std::string two_floats(8, '\0');
  Message huge = PushOf({1.f}, 9);
  huge.meta.mutable_slices(0)->set_length(uint64_t{1} << 60);  // an absurd declared size
  Message command99 = valid;
  command99.meta.set_command(static_cast<wire::Command>(99));

  SendRaw(peer, {"\xff\xff\xff garbage that is not a protobuf"});   // does not parse
  SendRaw(peer, {meta});                                            // data frame missing
  SendRaw(peer, {meta, two_floats, two_floats});                    // a frame too many
  SendRaw(peer, {meta, std::string(7, '\0')});                      // not whole floats
  SendRaw(peer, {meta, std::string(12, '\0')});                     // 3 floats for 2
  SendRaw(peer, {huge.meta.SerializeAsString(), std::string(4, '\0')});
  SendRaw(peer, {command99.meta.SerializeAsString(), two_floats});  // unknown command
  SendRaw(peer, {meta, std::string("\0\0\x80\x40\0\0\xa0\x40", 8)});  // valid: 4.0, 5.0

  Message got;
  Status s = node->Recv(&got, 5000);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got.meta.slices(0).key(), 3u);
  ASSERT_EQ(got.data.size(), 1u);
  EXPECT_EQ(got.data[0].data<float>()[0], 4.f);
  EXPECT_EQ(got.data[0].data<float>()[1], 5.f);
  EXPECT_FALSE(node->Recv(&got, 100).ok()) << "only the valid message comes through";
  EXPECT_EQ(node->Counters().rejected, 7);
  zmq_close(peer);
  zmq_ctx_term(ctx);
}

}  // namespace
}  // namespace tally
