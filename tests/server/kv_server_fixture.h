// The KVServer test fixture: one server (node 1) and workers at nodes 2, 3, 4, fed
// hand-made messages; what the server sends back is collected in sent_.
//
//   TEST_F(KVServerTest, Something) {
//     Make(/*workers=*/2);
//     SetOptimizer(/*lr=*/1.0f, /*async=*/false);
//     Init(/*key=*/0, {0.f});
//     Push(/*rank=*/0, /*key=*/0, /*step=*/0, Values({1.f}));
//     Message answer = Ok(PullRequest(/*rank=*/1, /*key=*/0, /*step=*/1, /*length=*/1));
//   }
#pragma once

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "server/server.h"

namespace tally {
namespace kv_server_test {

constexpr int kServerId = 1;
inline int Worker(int rank) { return 2 + rank; }

inline Tensor Values(const std::vector<float>& v, DType dtype = DType::kF32) {
  Tensor f = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kF32);
  for (size_t i = 0; i < v.size(); ++i) f.data<float>()[i] = v[i];
  return f.To(dtype);
}

inline std::vector<float> Floats(const Tensor& t) {
  Tensor f = t.To(DType::kF32);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

// Adds key's slice at offset 0, all of `data`, to m (m's dtype becomes data's).
inline void AddKeySlice(Message* m, uint64_t key, const Tensor& data) {
  wire::KeySlice* s = m->meta.add_slices();
  s->set_key(key);
  s->set_length(static_cast<uint64_t>(data.numel()));
  m->meta.set_dtype(ToWire(data.dtype()));
  m->data.push_back(data);
}

// What a KVServer sent, as its send function saw it: (receiver id, message).
using Sent = std::vector<std::pair<int, Message>>;

// Takes from *sent the messages to node `to`, in order, leaving the rest.
inline std::vector<Message> TakeSentTo(Sent* sent, int to) {
  std::vector<Message> got;
  Sent left;
  for (auto& [id, m] : *sent) {
    if (id == to) got.push_back(std::move(m));
    else left.push_back({id, std::move(m)});
  }
  *sent = std::move(left);
  return got;
}

class KVServerTest : public ::testing::Test {
 protected:
  void Make(int workers) {
    server_ = std::make_unique<KVServer>(1, workers, [this](int id, Message m) {
      EXPECT_EQ(m.meta.command(), wire::RESPONSE);
      sent_.push_back({id, std::move(m)});
      return Status::Ok();
    });
  }

  Message Request(wire::Command c, int sender, int64_t step = 0) {
    Message m;
    m.meta.set_command(c);
    m.meta.set_sender_id(sender);
    m.meta.set_receiver_id(kServerId);
    m.meta.set_request_id(++next_id_);
    m.meta.set_step(step);
    m.meta.set_num_workers(workers_);
    return m;
  }
  static void AddSlice(Message* m, uint64_t key, uint64_t offset, const Tensor& data) {
    wire::KeySlice* s = m->meta.add_slices();
    s->set_key(key);
    s->set_offset(offset);
    s->set_length(static_cast<uint64_t>(data.numel()));
    m->meta.set_dtype(ToWire(data.dtype()));
    m->data.push_back(data);
  }

  // Sends m and returns the answers it caused (in order).
  std::vector<std::pair<int, Message>> Send(Message m) {
    sent_.clear();
    server_->Handle(std::move(m));
    return std::move(sent_);
  }
  // Sends m and expects exactly one answer, without an error, to its sender.
  Message Ok(Message m) {
    const uint64_t id = m.meta.request_id();
    const int sender = m.meta.sender_id();
    auto out = Send(std::move(m));
    EXPECT_EQ(out.size(), 1u);
    if (out.empty()) return Message();
    EXPECT_EQ(out[0].first, sender);
    EXPECT_EQ(out[0].second.meta.request_id(), id);
    EXPECT_EQ(out[0].second.meta.error(), "");
    return std::move(out[0].second);
  }
  // Sends m and expects one answer carrying an error that mentions `words`.
  void Refused(Message m, const std::string& words) {
    auto out = Send(std::move(m));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_NE(out[0].second.meta.error().find(words), std::string::npos) << out[0].second.meta.error();
    EXPECT_TRUE(out[0].second.data.empty());
  }

  void SetOptimizer(float lr, bool async, float momentum = 0.0f) {
    Message m = Request(wire::SET_OPTIMIZER, Worker(0));
    m.meta.mutable_optimizer()->set_type("sgd");
    m.meta.mutable_optimizer()->set_lr(lr);
    m.meta.mutable_optimizer()->set_momentum(momentum);
    m.meta.mutable_optimizer()->set_rescale_grad(1.0f);
    m.meta.set_async(async);
    Ok(std::move(m));
  }
  void Init(uint64_t key, const std::vector<float>& v, bool async = false) {
    Message m = Request(wire::INIT, Worker(0), -1);
    m.meta.set_async(async);
    AddSlice(&m, key, 0, Values(v));
    Ok(std::move(m));
  }
  void Push(int rank, uint64_t key, int64_t step, const Tensor& g) {
    Message m = Request(wire::PUSH, Worker(rank), step);
    AddSlice(&m, key, 0, g);
    Ok(std::move(m));
  }
  Message PullRequest(int rank, uint64_t key, int64_t step, int64_t length, wire::DType dtype = wire::F32) {
    Message m = Request(wire::PULL, Worker(rank), step);
    wire::KeySlice* s = m.meta.add_slices();
    s->set_key(key);
    s->set_length(static_cast<uint64_t>(length));
    m.meta.set_pull_dtype(dtype);
    return m;
  }

  Message PushPullRequest(int rank, uint64_t key, int64_t step, const Tensor& g) {
    Message m = Request(wire::PUSHPULL, Worker(rank), step);
    AddSlice(&m, key, 0, g);
    m.meta.set_pull_dtype(wire::F32);
    return m;
  }
  Message RollbackRequest(int rank, uint64_t key, int64_t step, int64_t length) {
    Message m = PullRequest(rank, key, step, length);
    m.meta.set_command(wire::ROLLBACK);
    return m;
  }

  int workers_ = 2;
  uint64_t next_id_ = 0;
  std::unique_ptr<KVServer> server_;
  std::vector<std::pair<int, Message>> sent_;
};

}  // namespace kv_server_test
}  // namespace tally
