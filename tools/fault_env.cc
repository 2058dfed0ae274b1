#include "tools/fault_env.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tally {
namespace {

// TALLY_TEST_NAN=<rank>:<step>[:all].
Status ParseTestNan(FaultHooks* hooks) {
  const char* v = std::getenv("TALLY_TEST_NAN");
  if (v == nullptr || *v == '\0') return Status::Ok();
  const std::string text = v;
  char* end = nullptr;
  const long r = std::strtol(text.c_str(), &end, 10);
  long long s = -1;
  bool all = false;
  bool ok = end != text.c_str() && *end == ':';
  if (ok) {
    const char* p = end + 1;
    s = std::strtoll(p, &end, 10);
    ok = end != p && s >= 0 && r >= 0;
  }
  if (ok && *end == ':') {
    all = std::string(end + 1) == "all";
    ok = all;
  } else if (ok) {
    ok = *end == '\0';
  }
  if (!ok) return Status::InvalidArgument("TALLY_TEST_NAN='" + text + "': expected <worker rank>:<step>[:all]");
  hooks->nan_worker = static_cast<int>(r);
  hooks->nan_step = s;
  hooks->nan_all = all;
  return Status::Ok();
}

// TALLY_TEST_DROP_PUSH=<server rank>:<worker rank>:<step>.
Status ParseTestDropPush(FaultHooks* hooks) {
  const char* v = std::getenv("TALLY_TEST_DROP_PUSH");
  if (v == nullptr || *v == '\0') return Status::Ok();
  int server = -1, worker = -1;
  long long step = -1;
  char tail = 0;
  if (std::sscanf(v, "%d:%d:%lld%c", &server, &worker, &step, &tail) != 3 || server < 0 || worker < 0 || step < 0) {
    return Status::InvalidArgument(std::string("TALLY_TEST_DROP_PUSH='") + v +
                                   "': expected <server rank>:<worker rank>:<step>");
  }
  hooks->drop_push_server = server;
  hooks->drop_push_worker = worker;
  hooks->drop_push_step = step;
  return Status::Ok();
}

}  // namespace

Status FaultHooksFromEnv(FaultHooks* hooks) {
  *hooks = FaultHooks();
  if (const char* v = std::getenv("TALLY_TEST_CHECKPOINT_KILL_AT")) hooks->checkpoint_kill_at = std::atoi(v);
  if (const char* v = std::getenv("TALLY_TEST_CLOCK_SKEW_US")) hooks->clock_skew_us = std::strtoll(v, nullptr, 10);
  if (const char* v = std::getenv("TALLY_TEST_READ_LOG")) hooks->read_log = v;
  if (const char* v = std::getenv("TALLY_TEST_DONE_GATE")) hooks->done_gate = v;
  TALLY_RETURN_IF_ERROR(ParseTestDropPush(hooks));
  return ParseTestNan(hooks);
}

}  // namespace tally
