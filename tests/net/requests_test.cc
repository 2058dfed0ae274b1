// Requests (net/requests.h): answers matched to their requests (alone and gathered), pulled
// parts copied into place, per-key waits, answers out of order, refusals and malformed
// answers, a failed send, the job's failure, and requests to a lost node rerouted (same ids)
// or dropped; a server's answers posted through the same queue. The links are the test's: it records what is sent and answers by hand.
#include "net/requests.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <vector>

namespace tally {
namespace {

constexpr int64_t kCredit = 1 << 20;
constexpr int kBoundMs = 30000;  // generous: a loaded machine
constexpr int kServerA = 1, kServerB = 2;

// The job as Requests sees it: what was sent to whom, each node's unacknowledged bytes.
class FakeJob {
 public:
  RequestLinks Links() {
    RequestLinks l;
    l.unacked = [this](int node) {
      std::lock_guard<std::mutex> g(mu_);
      return unacked_[node];
    };
    l.send = [this](int node, Message&& m) {
      std::lock_guard<std::mutex> g(mu_);
      if (refuse_.count(node)) return Status::Unavailable("node " + std::to_string(node) + " is gone");
      sent_.push_back({node, std::move(m)});
      cv_.notify_all();
      return Status::Ok();
    };
    l.failure = [this] {
      std::lock_guard<std::mutex> g(mu_);
      return failure_;
    };
    l.name = [](int node) { return "node " + std::to_string(node); };
    return l;
  }
  void SetUnacked(int node, int64_t bytes) {
    std::lock_guard<std::mutex> g(mu_);
    unacked_[node] = bytes;
  }
  void Refuse(int node) {
    std::lock_guard<std::mutex> g(mu_);
    refuse_[node] = true;
  }
  void SetFailure(const Status& s) {
    std::lock_guard<std::mutex> g(mu_);
    failure_ = s;
  }
  // The n-th message sent (0-based), once it is; fails the test after the bound.
  std::pair<int, Message> Sent(size_t n) {
    std::unique_lock<std::mutex> g(mu_);
    const bool ok = cv_.wait_for(g, std::chrono::milliseconds(kBoundMs), [&] { return sent_.size() > n; });
    EXPECT_TRUE(ok) << "message " << n << " never sent";
    return ok ? sent_[n] : std::pair<int, Message>();
  }
  size_t sent_count() {
    std::lock_guard<std::mutex> g(mu_);
    return sent_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, int64_t> unacked_;
  std::map<int, bool> refuse_;
  std::vector<std::pair<int, Message>> sent_;
  Status failure_;
};

// A PULL of values [offset, offset + length) of a key; its record writes into op.
Message Pull(uint64_t key, int64_t offset, int64_t length) {
  Message m;
  m.meta.set_command(wire::PULL);
  wire::KeySlice* s = m.meta.add_slices();
  s->set_key(key);
  s->set_offset(offset);
  s->set_length(length);
  return m;
}

PendingRequest PullRecord(uint64_t key, int64_t offset, int64_t length, std::shared_ptr<PullOp> op) {
  PendingRequest p;
  p.command = wire::PULL;
  p.key = key;
  p.pull = std::move(op);
  p.offset = offset;
  p.length = length;
  return p;
}

std::shared_ptr<PullOp> NewPull(int64_t n, int parts, std::vector<Tensor> others = {}) {
  auto op = std::make_shared<PullOp>();
  op->flat = Tensor::Zeros({n}, DType::kF32);
  op->others = std::move(others);
  op->remaining = parts;
  return op;
}

// The server's answer to request m: each slice's values start at `base` + the slice's
// offset and count up.
Message Answer(const Message& request, float base) {
  Message a;
  a.meta.set_command(wire::RESPONSE);
  a.meta.set_request_id(request.meta.request_id());
  a.meta.set_sender_id(request.meta.receiver_id());
  a.meta.set_dtype(wire::F32);
  for (const wire::KeySlice& s : request.meta.slices()) {
    *a.meta.add_slices() = s;
    Tensor t = Tensor::Empty({static_cast<int64_t>(s.length())}, DType::kF32);
    for (uint64_t i = 0; i < s.length(); ++i) t.data<float>()[i] = base + static_cast<float>(s.offset() + i);
    a.data.push_back(t);
  }
  return a;
}

// What the worker's channel does with an answer: match, check, copy in.
void Deliver(Requests* r, const Message& answer) {
  Requests::Answer a;
  ASSERT_TRUE(r->Match(answer, &a));
  const Status refused = r->Refusal(answer, a);
  if (!refused.ok()) return r->FinishAll(a, refused);
  const Status s = r->CheckValues(answer, a);
  if (!s.ok()) return r->FinishAll(a, s);
  for (size_t i = 0; i < a.ids.size(); ++i) r->Complete(a, answer, i);
}

std::vector<float> Values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

class RequestsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Requests> NewRequests(Requests::RerouteFn reroute = nullptr, bool keep_for_resend = false) {
    RequestOptions o;
    o.prefix = "test";
    o.credit = kCredit;
    o.keep_for_resend = keep_for_resend;
    return std::make_unique<Requests>(job_.Links(), o, std::move(reroute));
  }
  FakeJob job_;
};

TEST_F(RequestsTest, AnAnswerCompletesItsRequestAndItsValuesLandInPlace) {
  auto r = NewRequests();
  r->Start();
  auto op = NewPull(4, 1);
  r->Send(kServerA, Pull(7, 0, 4), 0, PullRecord(7, 0, 4, op));
  auto [node, sent] = job_.Sent(0);
  EXPECT_EQ(node, kServerA);
  EXPECT_EQ(sent.meta.receiver_id(), kServerA);
  EXPECT_NE(sent.meta.request_id(), 0u);
  EXPECT_EQ(r->outstanding(), 1u);
  Deliver(r.get(), Answer(sent, 10));
  ASSERT_TRUE(r->WaitKey(7, kBoundMs).ok());
  EXPECT_EQ(Values(op->flat), (std::vector<float>{10, 11, 12, 13}));
  EXPECT_TRUE(r->WaitAll(kBoundMs).ok());
  // The same answer again names nothing outstanding.
  Requests::Answer again;
  EXPECT_FALSE(r->Match(Answer(sent, 10), &again));
}

TEST_F(RequestsTest, AnswersOutOfOrderCompleteTheirOwnKeys) {
  auto r = NewRequests();
  r->Start();
  auto a = NewPull(2, 1), b = NewPull(2, 1);
  r->Send(kServerA, Pull(1, 0, 2), 0, PullRecord(1, 0, 2, a));
  r->Send(kServerB, Pull(2, 0, 2), 0, PullRecord(2, 0, 2, b));
  const Message to_a = job_.Sent(0).second, to_b = job_.Sent(1).second;
  ASSERT_NE(to_a.meta.request_id(), to_b.meta.request_id());
  Deliver(r.get(), Answer(to_b, 20));  // the later request answered first
  ASSERT_TRUE(r->WaitKey(2, kBoundMs).ok());
  EXPECT_EQ(Values(b->flat), (std::vector<float>{20, 21}));
  EXPECT_EQ(Values(a->flat), (std::vector<float>{0, 0}));  // untouched: key 1 is still out
  EXPECT_EQ(r->outstanding(), 1u);
  Deliver(r.get(), Answer(to_a, 10));
  ASSERT_TRUE(r->WaitAll(kBoundMs).ok());
  EXPECT_EQ(Values(a->flat), (std::vector<float>{10, 11}));
}

TEST_F(RequestsTest, AKeysWaitEndsOnlyWhenEveryPartIsInAndTheOthersAreCopied) {
  auto r = NewRequests();
  r->Start();
  const Tensor other = Tensor::Zeros({4}, DType::kF32);
  auto op = NewPull(4, 2, {other});
  r->Send(kServerA, Pull(5, 0, 2), 0, PullRecord(5, 0, 2, op));
  r->Send(kServerB, Pull(5, 2, 2), 0, PullRecord(5, 2, 2, op));
  const Message first = job_.Sent(0).second, second = job_.Sent(1).second;
  std::promise<Status> done;
  std::future<Status> waited = done.get_future();
  std::thread waiter([&] { done.set_value(r->WaitKey(5, kBoundMs)); });
  Deliver(r.get(), Answer(second, 100));
  // One part of two: the key is still out, and nothing went into the other device's copy.
  EXPECT_EQ(r->outstanding(), 1u);
  EXPECT_EQ(Values(other), (std::vector<float>{0, 0, 0, 0}));
  Deliver(r.get(), Answer(first, 100));
  ASSERT_EQ(waited.wait_for(std::chrono::milliseconds(kBoundMs)), std::future_status::ready);
  waiter.join();
  EXPECT_TRUE(waited.get().ok());
  EXPECT_EQ(Values(op->flat), (std::vector<float>{100, 101, 102, 103}));
  EXPECT_EQ(Values(other), (std::vector<float>{100, 101, 102, 103}));
}

TEST_F(RequestsTest, SmallRequestsQueuedForOneNodeLeaveAsOneAndTheAnswerCompletesEach) {
  job_.SetUnacked(kServerA, kCredit + 1);  // over the credit: everything queues
  auto r = NewRequests();
  r->Start();
  std::vector<std::shared_ptr<PullOp>> ops;
  for (uint64_t key = 0; key < 3; ++key) {
    ops.push_back(NewPull(2, 1));
    r->Send(kServerA, Pull(key, 0, 2), -static_cast<int>(key), PullRecord(key, 0, 2, ops.back()));
  }
  EXPECT_EQ(job_.sent_count(), 0u);
  job_.SetUnacked(kServerA, 0);
  const Message gathered = job_.Sent(0).second;
  ASSERT_EQ(gathered.meta.slices_size(), 3);
  EXPECT_EQ(gathered.meta.slices(0).key(), 0u);  // priority order: key 0 first
  EXPECT_EQ(gathered.meta.slices(2).key(), 2u);
  Deliver(r.get(), Answer(gathered, 1));
  ASSERT_TRUE(r->WaitAll(kBoundMs).ok());
  for (const auto& op : ops) EXPECT_EQ(Values(op->flat), (std::vector<float>{1, 2}));
  EXPECT_EQ(job_.sent_count(), 1u);
}

TEST_F(RequestsTest, ARefusalOrAMalformedAnswerFinishesTheRequestWithAnError) {
  auto r = NewRequests();
  r->Start();
  auto op = NewPull(2, 1);
  r->Send(kServerA, Pull(3, 0, 2), 0, PullRecord(3, 0, 2, op));
  Message refused = Answer(job_.Sent(0).second, 0);
  refused.meta.set_error("no such key");
  Deliver(r.get(), refused);
  Status s = r->WaitAll(kBoundMs);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("test: PULL of key 3 to node 1 refused: no such key"), std::string::npos) << s;
  EXPECT_TRUE(r->WaitAll(kBoundMs).ok());  // reported once
  // An answer whose slice is not the request's writes nothing.
  r->Send(kServerA, Pull(3, 0, 2), 0, PullRecord(3, 0, 2, op));
  Message wrong = Answer(job_.Sent(1).second, 5);
  wrong.meta.mutable_slices(0)->set_offset(1);
  Deliver(r.get(), wrong);
  s = r->WaitAll(kBoundMs);
  EXPECT_EQ(s.code(), Status::Code::kInternal) << s;
  EXPECT_EQ(Values(op->flat), (std::vector<float>{0, 0}));
}

TEST_F(RequestsTest, ASendThatFailsFinishesItsRequestWithTheNodeNamed) {
  job_.Refuse(kServerB);
  auto r = NewRequests();
  r->Start();
  r->Send(kServerB, Pull(4, 0, 2), 0, PullRecord(4, 0, 2, NewPull(2, 1)));
  EXPECT_TRUE(r->WaitKey(4, kBoundMs).ok());  // done, its error left for WaitAll
  const Status s = r->WaitAll(kBoundMs);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
  EXPECT_NE(s.message().find("test: sending PULL to node 2: node 2 is gone"), std::string::npos) << s;
}

TEST_F(RequestsTest, TheJobsFailureEndsEveryWaitAtOnce) {
  auto r = NewRequests();
  r->Start();
  r->Send(kServerA, Pull(6, 0, 2), 0, PullRecord(6, 0, 2, NewPull(2, 1)));
  std::promise<Status> done;
  std::future<Status> waited = done.get_future();
  std::thread waiter([&] { done.set_value(r->WaitKey(6, kBoundMs)); });
  r->Fail(Status::Unavailable("worker 1 died"));
  ASSERT_EQ(waited.wait_for(std::chrono::milliseconds(kBoundMs)), std::future_status::ready);
  waiter.join();
  EXPECT_EQ(waited.get().message(), "worker 1 died");
  // A failure the links report is seen by the next wait, unasked.
  auto fresh = NewRequests();
  job_.SetFailure(Status::Unavailable("the scheduler is gone"));
  fresh->Send(kServerA, Pull(6, 0, 2), 0, PullRecord(6, 0, 2, NewPull(2, 1)));
  EXPECT_EQ(fresh->WaitAll(kBoundMs).message(), "the scheduler is gone");
  job_.SetFailure(Status::Ok());
}

// A lost node: its queued and unanswered requests of a chain go to node B with their ids,
// the others (copies, requests only it needed) are dropped, and so is a later request to it.
TEST_F(RequestsTest, RequestsToALostNodeGoElsewhereWithTheirIdsOrAreDropped) {
  auto reroute = [](PendingRequest* p, int* node) {
    if (p->chain < 0) return true;
    *node = kServerB;
    return false;
  };
  auto r = NewRequests(reroute, /*keep_for_resend=*/true);
  r->Start();
  auto op = NewPull(4, 1);
  PendingRequest of_chain = PullRecord(8, 0, 4, op);
  of_chain.chain = 0;
  r->Send(kServerA, Pull(8, 0, 4), 0, of_chain);  // sent, unanswered
  const Message unanswered = job_.Sent(0).second;
  r->Send(kServerA, Pull(9, 0, 2), 0, PullRecord(9, 0, 2, NewPull(2, 1)));  // no chain
  job_.Sent(1);
  EXPECT_EQ(r->outstanding(), 2u);
  EXPECT_EQ(r->NodeLost(kServerA), 1);
  auto [node, again] = job_.Sent(2);
  EXPECT_EQ(node, kServerB);
  EXPECT_EQ(again.meta.receiver_id(), kServerB);
  EXPECT_EQ(again.meta.request_id(), unanswered.meta.request_id());
  EXPECT_EQ(r->outstanding(), 1u);
  ASSERT_TRUE(r->WaitKey(9, kBoundMs).ok());  // dropped: nothing to wait for
  Deliver(r.get(), Answer(again, 50));
  ASSERT_TRUE(r->WaitAll(kBoundMs).ok());
  EXPECT_EQ(Values(op->flat), (std::vector<float>{50, 51, 52, 53}));
  // Later: a request of a chain sent to the lost node goes to B; one without is dropped.
  r->Send(kServerA, Pull(8, 0, 4), 0, of_chain);
  EXPECT_EQ(job_.Sent(3).first, kServerB);
  r->Send(kServerA, Pull(9, 0, 2), 0, PullRecord(9, 0, 2, NewPull(2, 1)));
  EXPECT_EQ(r->outstanding(), 1u);
  Deliver(r.get(), Answer(job_.Sent(3).second, 0));
  EXPECT_TRUE(r->WaitAll(kBoundMs).ok());
  EXPECT_EQ(job_.sent_count(), 4u);
}

TEST_F(RequestsTest, QueuedRequestsForALostNodeAreRedirectedBeforeTheyLeave) {
  job_.SetUnacked(kServerA, kCredit + 1);  // over the credit: queued, not sent
  auto r = NewRequests(
      [](PendingRequest* p, int* node) {
        *node = kServerB;
        return false;
      },
      /*keep_for_resend=*/true);
  r->Start();
  PendingRequest p = PullRecord(8, 0, 4, NewPull(4, 1));
  p.chain = 0;
  r->Send(kServerA, Pull(8, 0, 4), 0, p);
  EXPECT_EQ(job_.sent_count(), 0u);
  EXPECT_EQ(r->NodeLost(kServerA), 0);
  auto [node, sent] = job_.Sent(0);
  EXPECT_EQ(node, kServerB);
  EXPECT_EQ(sent.meta.receiver_id(), kServerB);
  Deliver(r.get(), Answer(sent, 0));
  EXPECT_TRUE(r->WaitAll(kBoundMs).ok());
  EXPECT_EQ(job_.sent_count(), 1u);  // once: not also to A
}

// A server's answers (Post) share the queue and the credit with requests, in priority order,
// keep the ids they carry, are never matched, finished or rerouted, and a failed one is the
// caller's to log: no wait fails for it.
TEST_F(RequestsTest, PostedAnswersQueueByPriorityWithRequestsAndAreNoneOfItsOwn) {
  constexpr int kServerC = 3;
  job_.SetUnacked(kServerA, kCredit + 1);  // over the credit: everything for A waits
  auto r = NewRequests([](PendingRequest*, int*) { return true; });
  r->Start();
  auto answer = [](uint64_t id, int priority) {
    Message m = Answer(Pull(id, 0, 1), 0);
    m.meta.set_request_id(id);
    m.meta.set_priority(priority);
    return m;
  };
  ASSERT_TRUE(r->Post(kServerA, answer(70, 1)).ok());
  r->Send(kServerA, Pull(5, 0, 1), 5, PullRecord(5, 0, 1, NewPull(1, 1)));
  ASSERT_TRUE(r->Post(kServerA, answer(71, 9)).ok());
  ASSERT_TRUE(r->Post(kServerB, answer(72, 0)).ok());  // B has credit: at once
  auto [to_b, first] = job_.Sent(0);
  EXPECT_EQ(to_b, kServerB);
  EXPECT_EQ(first.meta.request_id(), 72u);
  EXPECT_EQ(r->outstanding(), 1u);  // the request alone
  EXPECT_EQ(r->NodeLost(kServerA), 1);  // drops the request, not the answers
  job_.SetUnacked(kServerA, 0);
  EXPECT_EQ(job_.Sent(1).second.meta.request_id(), 71u);  // priority 9 first
  EXPECT_EQ(job_.Sent(2).second.meta.request_id(), 70u);
  EXPECT_TRUE(r->WaitAll(kBoundMs).ok());
  r->Stop();
  EXPECT_EQ(job_.sent_count(), 3u);
  // A Post that goes at once (nothing queued, no sending thread yet) returns its failure.
  job_.Refuse(kServerC);
  auto idle = NewRequests();
  const Status failed = idle->Post(kServerC, answer(73, 0));
  EXPECT_NE(failed.message().find("node 3 is gone"), std::string::npos) << failed;
  EXPECT_TRUE(idle->WaitAll(kBoundMs).ok());
}

}  // namespace
}  // namespace tally
