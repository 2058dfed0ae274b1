"""A healthy job resends nothing, even on a loaded machine: a dist_sync job of `tally train`
(secure, the default) runs through tools/launch.py beside busy processes that keep every
core of this machine at work, and every process's `delivery:` line at exit must report 0
messages resent and 0 duplicates dropped. A resend on a live TCP connection would mean an
acknowledgement waited behind a sum or an optimizer step, or a retransmission timeout
shorter than the acknowledgements' real delays (docs/wire.md, "Delivery").

Usage: python3 no_resend_test.py TALLY_BINARY [unittest args]
"""
import os
import re
import subprocess
import sys

import fault_job
from fault_job import FaultCase, ROLES

DELIVERY = re.compile(r"\[(\w+ \d+|scheduler)\].*delivery: (\d+) messages resent, (\d+) duplicates dropped, "
                      r"(\d+) rejected")


class NoResendTest(FaultCase):
    def test_a_loaded_machine_resends_nothing(self):
        # One busy process per core, at normal priority, for the whole job.
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
        for p in busy:
            self.addCleanup(p.wait)
            self.addCleanup(p.kill)
        code, out = self.run_launch(os.path.join(self.dir, "m"), "loaded")
        self.assertEqual(code, 0, out[-4000:])
        lines = DELIVERY.findall(out)
        print("\n".join("%s: %s resent, %s duplicates, %s rejected" % line for line in lines))
        self.assertEqual(len(lines), len(ROLES), "one delivery line per process:\n" + out[-4000:])
        for who, resent, duplicates, rejected in lines:
            self.assertEqual((int(resent), int(duplicates), int(rejected)), (0, 0, 0), who)


if __name__ == "__main__":
    fault_job.main()
