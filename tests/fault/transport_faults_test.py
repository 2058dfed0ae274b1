"""1% of messages lost and 1% sent twice (the transport's test-only fault injection,
TALLY_TEST_FAULTS) in every process of a dist_sync job: the reliable delivery layer resends
what is lost and drops repeats, so the job completes, without a restart, with the final
weights of a run without faults, bit for bit. Several seeds (FAULT_SEEDS overrides them).

Usage: python3 transport_faults_test.py TALLY_BINARY [unittest args]
"""
import os
import time

import fault_job
from fault_job import FINAL, FaultCase


class TransportFaultTest(FaultCase):
    def test_one_percent_drop_and_duplication_changes_nothing(self):
        reference = self.reference()
        for seed in fault_job.seeds([3, 11]):
            faults = "drop=0.01,dup=0.01,seed=%d" % seed
            with self.subTest(faults=faults):
                prefix = os.path.join(self.dir, "seed%d" % seed, "m")
                began = time.time()
                # A lost message stalls its step until it is resent: every 1 s by default, which at
                # about one loss a step (a step is dozens of messages) would take minutes here.
                code, out = self.run_launch(prefix, "seed%d" % seed,
                                            env={"TALLY_TEST_FAULTS": faults, "TALLY_RESEND_MS": "50"})
                print("TALLY_TEST_FAULTS=%s: exit %d after %.1f s" % (faults, code, time.time() - began))
                self.assertEqual(code, 0, out[-4000:])
                self.assertLogHas(out, r"injecting transport faults \(drop=0.01,dup=0.01,")
                self.assertLogHas(out, r"fault injection dropped \d+ messages")
                self.assertLogHas(out, r"dropped a repeated message")
                self.assertNotIn("restart", out)
                self.assertSameCheckpoint(prefix + FINAL, reference)


if __name__ == "__main__":
    fault_job.main()
