// SendQueue (net/send_queue.h): priority order, credit per receiver held back and released,
// the caller's-thread fast path, Stop flushing whatever the credit, gathering and Filter.
// The receivers' unacknowledged bytes are set by the test; the Transmit hook records.
#include "net/send_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace tally {
namespace {

constexpr int64_t kCredit = 1000;
constexpr auto kBound = std::chrono::seconds(30);  // generous: a loaded machine

// The receivers' side: unacknowledged bytes per node, and what was transmitted.
class Receivers {
 public:
  void SetUnacked(int node, int64_t bytes) {
    std::lock_guard<std::mutex> l(mu_);
    unacked_[node] = bytes;
  }
  int64_t Unacked(int node) {
    std::lock_guard<std::mutex> l(mu_);
    return unacked_[node];
  }
  Status Transmit(SendQueue::Item&& item) {
    std::lock_guard<std::mutex> l(mu_);
    sent_.push_back(Sent{item.node, static_cast<int>(item.msg.meta.request_id()), item.msg.meta.slices_size(),
                         std::this_thread::get_id()});
    cv_.notify_all();
    return Status::Ok();
  }
  // Waits until n messages were transmitted; false after kBound.
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, kBound, [&] { return sent_.size() >= n; });
  }
  struct Sent {
    int node;
    int id;  // the message's request_id, the test's name for it
    int slices;
    std::thread::id thread;
  };
  std::vector<Sent> sent() {
    std::lock_guard<std::mutex> l(mu_);
    return sent_;
  }
  std::vector<int> ids() {
    std::vector<int> out;
    for (const Sent& s : sent()) out.push_back(s.id);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, int64_t> unacked_;
  std::vector<Sent> sent_;
};

// A message named `id` of `bytes` data bytes with one slice.
Message Msg(int id, int64_t bytes) {
  Message m;
  m.meta.set_request_id(id);
  m.meta.add_slices()->set_key(id);
  if (bytes > 0) m.data.push_back(Tensor::Empty({bytes / 4}, DType::kF32));
  return m;
}

SendQueue::Item Item(int node, int id, int64_t bytes, const std::string& group = std::string()) {
  SendQueue::Item item;
  item.node = node;
  item.msg = Msg(id, bytes);
  item.group = group;
  item.gather_bytes = bytes;
  return item;
}

class SendQueueTest : public ::testing::Test {
 protected:
  std::unique_ptr<SendQueue> NewQueue(SendQueue::GatherFn gather = nullptr, SendQueue::GatherLimits limits = {}) {
    return std::make_unique<SendQueue>([this](int node) { return receivers_.Unacked(node); }, kCredit,
                                       [this](SendQueue::Item&& item) { return receivers_.Transmit(std::move(item)); },
                                       std::move(gather), limits, nullptr);
  }
  void Send(SendQueue* q, SendQueue::Item item, int priority, bool may_go_now = true) {
    std::unique_lock<std::mutex> l(q->mu());
    ASSERT_TRUE(q->Send(l, std::move(item), priority, may_go_now).ok());
  }
  Receivers receivers_;
};

TEST_F(SendQueueTest, AMessageGoesAtOnceFromTheCallersThreadWhenNothingWaits) {
  auto q = NewQueue();  // not started: only the fast path can send
  bool sent_now = false;
  {
    std::unique_lock<std::mutex> l(q->mu());
    ASSERT_TRUE(q->Send(l, Item(1, 7, 400), 0, true, &sent_now).ok());
  }
  EXPECT_TRUE(sent_now);
  ASSERT_EQ(receivers_.sent().size(), 1u);
  EXPECT_EQ(receivers_.sent()[0].thread, std::this_thread::get_id());
  // Not when the caller says it may not (a burst), nor when something waits.
  Send(q.get(), Item(1, 8, 400), 0, /*may_go_now=*/false);
  Send(q.get(), Item(2, 9, 400), 0);
  EXPECT_EQ(receivers_.sent().size(), 1u);
}

TEST_F(SendQueueTest, QueuedMessagesLeaveHighestPriorityFirstThenInCallOrder) {
  receivers_.SetUnacked(1, kCredit);  // full: everything queues
  auto q = NewQueue();
  q->Start();
  const int priorities[] = {0, 5, -3, 5, 9, 0};
  for (int i = 0; i < 6; ++i) Send(q.get(), Item(1, i, 100), priorities[i]);
  // Nothing may go while the receiver's credit is used up.
  EXPECT_TRUE(receivers_.sent().empty());
  receivers_.SetUnacked(1, 0);
  q->Wake();
  ASSERT_TRUE(receivers_.WaitFor(6));
  EXPECT_EQ(receivers_.ids(), (std::vector<int>{4, 1, 3, 0, 5, 2}));
}

TEST_F(SendQueueTest, AReceiverWithoutCreditHoldsBackOnlyItsOwnMessages) {
  receivers_.SetUnacked(1, kCredit - 50);  // 100 more bytes would exceed the credit
  auto q = NewQueue();
  q->Start();
  Send(q.get(), Item(1, 1, 100), 9);  // first in priority, but node 1 has no credit for it
  Send(q.get(), Item(2, 2, 100), 1);  // node 2 has
  ASSERT_TRUE(receivers_.WaitFor(1));
  EXPECT_EQ(receivers_.ids(), (std::vector<int>{2}));
  // Acknowledgements free credit without a word to the queue: it looks again by itself.
  receivers_.SetUnacked(1, kCredit - 100);
  ASSERT_TRUE(receivers_.WaitFor(2));
  EXPECT_EQ(receivers_.ids(), (std::vector<int>{2, 1}));
}

TEST_F(SendQueueTest, OneMessageAlwaysMayGoToAnIdleReceiverWhateverItsSize) {
  auto q = NewQueue();
  q->Start();
  receivers_.SetUnacked(1, 1);
  Send(q.get(), Item(1, 1, 4 * kCredit), 0);  // larger than the credit: waits for 0 unacked
  receivers_.SetUnacked(1, 0);
  ASSERT_TRUE(receivers_.WaitFor(1));
  EXPECT_EQ(receivers_.ids(), (std::vector<int>{1}));
}

TEST_F(SendQueueTest, StopSendsEverythingQueuedWhateverTheCreditInPriorityOrder) {
  receivers_.SetUnacked(1, kCredit);
  receivers_.SetUnacked(2, kCredit);
  auto q = NewQueue();
  q->Start();
  Send(q.get(), Item(1, 1, 100), 0);
  Send(q.get(), Item(2, 2, 100), 3);
  Send(q.get(), Item(1, 3, 100), 7);
  EXPECT_TRUE(receivers_.sent().empty());
  q->Stop();
  EXPECT_EQ(receivers_.ids(), (std::vector<int>{3, 2, 1}));
}

TEST_F(SendQueueTest, TheDestructorFlushesAQueueNeverStarted) {
  receivers_.SetUnacked(1, kCredit);
  {
    auto q = NewQueue();
    Send(q.get(), Item(1, 1, 100), 0);
    Send(q.get(), Item(1, 2, 100), 1);
  }
  EXPECT_EQ(receivers_.ids(), (std::vector<int>{2, 1}));
}

TEST_F(SendQueueTest, ItemsOfOneNodeAndGroupTravelTogetherWithinTheLimits) {
  receivers_.SetUnacked(1, kCredit);
  receivers_.SetUnacked(2, kCredit);
  std::vector<std::vector<int>> gathered;  // on the sending thread, under mu()
  SendQueue::GatherLimits limits;
  limits.max_items = 3;
  limits.max_bytes = 1000;
  auto q = NewQueue(
      [&gathered](SendQueue::Item* first, std::vector<SendQueue::Item>* more) {
        std::vector<int> ids{static_cast<int>(first->msg.meta.request_id())};
        for (SendQueue::Item& m : *more) {
          ids.push_back(static_cast<int>(m.msg.meta.request_id()));
          *first->msg.meta.add_slices() = m.msg.meta.slices(0);
        }
        gathered.push_back(ids);
      },
      limits);
  Send(q.get(), Item(1, 1, 100, "a"), 9);
  Send(q.get(), Item(1, 2, 100, "b"), 8);  // another group
  Send(q.get(), Item(2, 3, 100, "a"), 7);  // another node
  Send(q.get(), Item(1, 4, 100, "a"), 6);
  Send(q.get(), Item(1, 5, 960, "a"), 5);  // over max_bytes with 1 and 4, and with 7
  Send(q.get(), Item(1, 6, 100, "a"), 4);
  Send(q.get(), Item(1, 7, 100, "a"), 3);  // past max_items
  Send(q.get(), Item(1, 8, 100), 2);       // no group: alone
  q->Start();
  q->Stop();
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_EQ(gathered[0], (std::vector<int>{1, 4, 6}));
  EXPECT_EQ(receivers_.ids(), (std::vector<int>{1, 2, 3, 5, 7, 8}));
  EXPECT_EQ(receivers_.sent()[0].slices, 3);
}

TEST_F(SendQueueTest, FilterDropsAndRedirectsQueuedItems) {
  receivers_.SetUnacked(1, kCredit);
  receivers_.SetUnacked(2, kCredit);
  auto q = NewQueue();
  for (int i = 1; i <= 4; ++i) Send(q.get(), Item(1, i, 100), -i);
  {
    std::lock_guard<std::mutex> l(q->mu());
    q->Filter([](SendQueue::Item* item) {
      if (item->msg.meta.request_id() == 2) return false;
      if (item->msg.meta.request_id() == 3) item->node = 2;
      return true;
    });
  }
  q->Start();
  q->Stop();
  const std::vector<Receivers::Sent> sent = receivers_.sent();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(receivers_.ids(), (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(sent[1].node, 2);
}

}  // namespace
}  // namespace tally
