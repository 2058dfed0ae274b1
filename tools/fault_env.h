// The one place that reads the end-to-end tests' fault settings from the environment:
// TALLY_TEST_NAN, TALLY_TEST_CHECKPOINT_KILL_AT, TALLY_TEST_CLOCK_SKEW_US, TALLY_TEST_DROP_PUSH and
// TALLY_TEST_READ_LOG (docs/faults.md) become FaultHooks (base/fault_hooks.h), which `tally`'s
// main installs before any command runs. The libraries never read these variables.
//
//   FaultHooks hooks;
//   TALLY_RETURN_IF_ERROR(FaultHooksFromEnv(&hooks));
//   SetFaultHooks(hooks);
#pragma once

#include "base/fault_hooks.h"
#include "base/status.h"

namespace tally {

// Every hook off for an unset or empty variable. Fails naming the variable and its value
// when TALLY_TEST_NAN is not <worker rank>:<step>[:all].
Status FaultHooksFromEnv(FaultHooks* hooks);

}  // namespace tally
