// KVServer and compressed pushes (dtype TWO_BIT / ONE_BIT, docs/wire.md "Compressed
// pushes"): the fixtures' packed bits of two workers, pushed as they are, give the fixtures'
// sums value for value; a primary and its backup (--server-replicas 1) hold the same bits
// after compressed steps; malformed compressed pushes are refused, not applied.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "compress/compress.h"
#include "server/server.h"
#include "tests/compress/compress_fixture.h"
#include "tests/server/kv_server_fixture.h"

namespace tally {
namespace {

using kv_server_test::Floats;
using kv_server_test::Values;

Tensor Bytes(const std::vector<uint8_t>& b) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(b.size())}, DType::kU8);
  if (!b.empty()) std::memcpy(t.raw_data(), b.data(), b.size());
  return t;
}

// Sets m's one slice of `n` values of key `key` to the packed bits `packed`.
void SetPacked(Message* m, uint64_t key, int64_t n, const CompressionConfig& gc, const std::vector<uint8_t>& packed) {
  wire::KeySlice* s = m->meta.add_slices();
  s->set_key(key);
  s->set_length(static_cast<uint64_t>(n));
  m->meta.set_dtype(gc.type == CompressionType::kTwoBit ? wire::TWO_BIT : wire::ONE_BIT);
  if (gc.type == CompressionType::kTwoBit) m->meta.set_gc_threshold(gc.threshold);
  m->data.push_back(Bytes(packed));
}

class CompressionServerTest : public kv_server_test::KVServerTest {
 protected:
  Message PackedPush(int rank, int64_t step, const testing::CompressionCase& c, const std::vector<uint8_t>& packed) {
    Message m = Request(wire::PUSH, kv_server_test::Worker(rank), step);
    SetPacked(&m, 0, c.n, c.config, packed);
    return m;
  }
};

TEST_F(CompressionServerTest, TheSumOfTwoWorkersPackedPushesIsTheFixtures) {
  for (const testing::CompressionCase& c : testing::LoadCompressionFixtures()) {
    Make(2);  // no optimizer: each step's sum becomes the values
    Init(0, std::vector<float>(c.n, 0.0f));
    for (size_t step = 0; step < c.pushes.size(); ++step) {
      for (int rank : {1, 0}) Ok(PackedPush(rank, step, c, c.pushes[step].packed[rank]));
      Message answer = Ok(PullRequest(0, 0, step, c.n));
      ASSERT_EQ(answer.data.size(), 1u);
      const std::vector<float> got = Floats(answer.data[0]);
      for (int64_t i = 0; i < c.n; ++i) {
        ASSERT_TRUE(testing::SameBits(got[i], c.pushes[step].sum[i])) << c.name << " step " << step << " value " << i;
      }
    }
  }
}

TEST_F(CompressionServerTest, MalformedCompressedRequestsAreRefused) {
  Make(2);
  Init(0, std::vector<float>(20, 1.0f));
  CompressionConfig gc;
  ASSERT_TRUE(ParseCompression("2bit", 0.5f, &gc).ok());
  testing::CompressionCase c;
  c.config = gc;
  c.n = 20;
  Refused(PackedPush(0, 0, c, std::vector<uint8_t>(4)), "does not hold");  // 20 values need 8 bytes
  Message zero = PackedPush(0, 0, c, std::vector<uint8_t>(8));
  zero.meta.set_gc_threshold(0.0f);
  Refused(std::move(zero), "gc_threshold");
  Message init = Request(wire::INIT, kv_server_test::Worker(0), -1);
  SetPacked(&init, 1, 20, gc, std::vector<uint8_t>(8));
  Refused(std::move(init), "only pushes carry them");
  Message pull = PullRequest(0, 0, -1, 20);
  pull.meta.set_pull_dtype(wire::TWO_BIT);
  Refused(std::move(pull), "pull_dtype");
  // Nothing was applied: a well-formed step 0 still sums to the expected values.
  for (int rank : {0, 1}) Ok(PackedPush(rank, 0, c, std::vector<uint8_t>(8, 0xFF)));
  EXPECT_EQ(Floats(Ok(PullRequest(0, 0, 0, 20)).data[0]), std::vector<float>(20, 1.0f));  // +0.5 twice
}

// --server-replicas 1: the primary dequantises and sums, the backup applies the fp32 sum
// the primary forwards (no optimizer: the sum becomes the values); both hold the same bits.
TEST(CompressionReplicaTest, PrimaryAndBackupHoldTheSameBits) {
  std::unique_ptr<KVServer> servers[2];
  std::vector<std::pair<int, Message>> out[2];
  for (int rank : {0, 1}) {
    servers[rank] = std::make_unique<KVServer>(2, 2, [&out, rank](int to, Message m) {
      out[rank].push_back({to, std::move(m)});
      return Status::Ok();
    });
    servers[rank]->SetReplication(rank, 1);
  }
  uint64_t id = 0;
  auto request = [&id](wire::Command command, int sender, int64_t step) {
    Message m;
    m.meta.set_command(command);
    m.meta.set_sender_id(sender);
    m.meta.set_request_id(++id);
    m.meta.set_step(step);
    m.meta.set_num_workers(2);
    return m;
  };
  const testing::CompressionCase c = testing::LoadCompressionFixtures()[2];  // 2bit, 300 values
  for (int rank : {0, 1}) {
    Message init = request(wire::INIT, 3, -1);
    init.meta.set_chain(1);
    init.meta.set_receiver_id(rank + 1);
    kv_server_test::AddKeySlice(&init, 0, Values(std::vector<float>(c.n, 0.25f)));
    servers[rank]->Handle(std::move(init));
    out[rank].clear();
  }
  for (size_t step = 0; step < c.pushes.size(); ++step) {
    for (int w : {0, 1}) {
      Message m = request(wire::PUSH, 3 + w, step);
      SetPacked(&m, 0, c.n, c.config, c.pushes[step].packed[w]);
      m.meta.set_receiver_id(1);
      servers[0]->Handle(std::move(m));
    }
    // Carry the primary's REPLICATE to the backup, and the backup's acknowledgement back.
    int carried = 0;
    for (int from : {0, 1}) {
      std::vector<std::pair<int, Message>> left;
      for (auto& [to, m] : out[from]) {
        if (to != 2 - from) {
          left.push_back({to, std::move(m)});
          continue;
        }
        m.meta.set_sender_id(from + 1);
        m.meta.set_receiver_id(to);
        servers[1 - from]->Handle(std::move(m));
        ++carried;
      }
      out[from] = std::move(left);
    }
    ASSERT_EQ(carried, 2) << "step " << step;
    const Tensor p = servers[0]->Value(0, 0), b = servers[1]->Value(0, 0);
    ASSERT_EQ(p.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(p.raw_data(), b.raw_data(), p.nbytes()), 0) << "step " << step;
    EXPECT_EQ(servers[1]->AppliedStep(0, 0), static_cast<int64_t>(step));
  }
}

}  // namespace
}  // namespace tally
