#include "base/fault_hooks.h"

namespace tally {
namespace {

// A plain global rather than an atomic: the trace clock reads it on every call, and it is
// set only before the readers start (fault_hooks.h).
FaultHooks g_hooks;

}  // namespace

const FaultHooks& FaultHooksInEffect() { return g_hooks; }

void SetFaultHooks(const FaultHooks& hooks) { g_hooks = hooks; }

}  // namespace tally
