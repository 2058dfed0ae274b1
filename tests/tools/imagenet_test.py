"""tools/imagenet.sh end to end on a tiny ILSVRC2012-like tree made here with `tally make-data
synthetic-jpeg`: train/<wnid>/*.JPEG and val/ILSVRC2012_val_NNNNNNNN.JPEG with each of the
label layouts the script reads (Kaggle's LOC_val_solution.csv, the devkit's ground truth with
a synset map, val/<wnid>/ folders). The packs must hold every image with the label of its
wnid's place in sorted order; one run trains the recipe (shrunk to a tiny model) on 2 workers
and 1 server through tools/launch.py.

Usage: python3 imagenet_test.py TALLY_BINARY [unittest args, such as a test class]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

TALLY = None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "imagenet.sh")
# Three classes; their devkit ILSVRC2012_IDs (1-based) deliberately out of sorted order.
WNIDS = ["n01440764", "n01443537", "n01484850"]
DEVKIT_ORDER = ["n01484850", "n01440764", "n01443537"]
TRAIN_PER_CLASS, VAL_PER_CLASS = 6, 2
# The recipe shrunk to seconds: a CIFAR-style ResNet-8 on 32x32 crops, CPU workers.
TINY = ["--num-layers", "8", "--image-shape", "3,32,32", "--num-epochs", "2", "--warmup-epochs", "1",
        "--optimizer", "lars", "--lr", "0.1", "--disp-batches", "1", "--data-nthreads", "1", "--top-k", "0"]


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.src = os.path.join(self.dir, "ILSVRC")
        self.data = os.path.join(self.dir, "packs")
        self.run_dir = os.path.join(self.dir, "run")
        self.val_labels = self.make_tree()

    def tearDown(self):
        if os.environ.get("TALLY_KEEP"):
            self.tmp._finalizer.detach()  # left for a look
            print("kept", self.dir)
            return
        self.tmp.cleanup()

    def make_tree(self):
        """Returns {val file name: class index in sorted wnid order}."""
        gen = os.path.join(self.dir, "gen")
        subprocess.run([TALLY, "make-data", "synthetic-jpeg", "--out", gen, "--classes", str(len(WNIDS)),
                        "--per-class", str(TRAIN_PER_CLASS + VAL_PER_CLASS), "--seed", "3"],
                       check=True, capture_output=True)
        os.makedirs(os.path.join(self.src, "val"))
        val_labels = {}
        for c, wnid in enumerate(WNIDS):
            os.makedirs(os.path.join(self.src, "train", wnid))
            files = sorted(os.listdir(os.path.join(gen, "class_%03d" % c)))
            for i, f in enumerate(files):
                src = os.path.join(gen, "class_%03d" % c, f)
                if i < TRAIN_PER_CLASS:
                    shutil.copy(src, os.path.join(self.src, "train", wnid, "%s_%d.JPEG" % (wnid, i)))
                    continue
                # Interleave the classes in val's numbering, as the real val set does.
                name = "ILSVRC2012_val_%08d.JPEG" % (c + len(WNIDS) * (i - TRAIN_PER_CLASS) + 1)
                shutil.copy(src, os.path.join(self.src, "val", name))
                val_labels[name] = c
        return val_labels

    def write_loc_csv(self):
        with open(os.path.join(self.src, "LOC_val_solution.csv"), "w") as f:
            f.write("ImageId,PredictionString\n")
            for name, c in sorted(self.val_labels.items(), reverse=True):  # any order
                f.write("%s,%s 10 20 30 40 %s 1 2 3 4\n" % (name[:-5], WNIDS[c], WNIDS[c]))

    def run_script(self, workers="2", pack_only=False, extra=(), env_extra=None):
        env = dict(os.environ, TALLY=TALLY, TALLY_DATA=self.data, TALLY_RUN=self.run_dir, TALLY_GPUS="",
                   TALLY_BATCH="6", TALLY_PACK_THREADS="2", TALLY_RESIZE="40", TALLY_VAL_RESIZE="36",
                   TALLY_PACK_ONLY="1" if pack_only else "0")
        env.update(env_extra or {})
        return subprocess.run(["bash", SCRIPT, self.src, workers] + list(extra), env=env, capture_output=True,
                              text=True, timeout=240)

    def records(self, name):
        """{record id: label} of a pack, read back with `tally rec`."""
        out = subprocess.run([TALLY, "rec", os.path.join(self.data, name), "--show-records", "-1"],
                             check=True, capture_output=True, text=True).stdout
        rows = {}
        for line in out.splitlines():
            m = re.match(r"\s*\d+\s+\d+\s+\d+\s+(\S+)\s+(\d+)\s+\d+\s*$", line)
            if m:
                rows[int(m.group(2))] = int(float(m.group(1)))
        return rows

    def assertPacks(self):
        with open(os.path.join(self.data, "synsets.txt")) as f:
            self.assertEqual(f.read().split(), WNIDS)
        train = self.records("train.rec")
        self.assertEqual(len(train), len(WNIDS) * TRAIN_PER_CLASS)
        self.assertEqual(sorted(train.values()), sorted(list(range(len(WNIDS))) * TRAIN_PER_CLASS))
        val = self.records("val.rec")
        names = sorted(self.val_labels)  # the .lst index is the place in sorted order
        self.assertEqual(val, {i: self.val_labels[n] for i, n in enumerate(names)})


class LocCsvTest(Case):
    def test_packs_and_trains_on_two_workers(self):
        self.write_loc_csv()
        r = self.run_script(extra=TINY)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertIn("val labels from", r.stdout)
        self.assertPacks()
        with open(os.path.join(self.run_dir, "train.log")) as f:
            log = f.read()
        for worker in ("[worker 0]", "[worker 1]"):
            self.assertIn(worker + " Epoch[1] Train-accuracy=", log)
        self.assertRegex(log, r"\[worker 0\] Epoch\[1\] Validation-accuracy=[0-9.]+")
        self.assertIn("server: optimizer lars", log)  # the recipe's optimizer reached the server
        # ResNet-8's 9 batch norms (gamma and beta) and the fc bias.
        self.assertIn("[worker 0] tally train: --wd-exclude bn,bias: 19 trainable arrays without weight decay", log)
        self.assertTrue(os.path.exists(os.path.join(self.run_dir, "resnet50-0002.params")))
        # The flags of the recipe reached every process (the last Validation line is printed).
        self.assertIn("Validation-accuracy=", r.stdout.splitlines()[-1])
        # A second call finds the packs and the finished run: nothing is packed again.
        before = os.path.getmtime(os.path.join(self.data, "train.rec"))
        r2 = self.run_script(pack_only=True)
        self.assertEqual(r2.returncode, 0, r2.stderr)
        self.assertEqual(os.path.getmtime(os.path.join(self.data, "train.rec")), before)


class GroundTruthTest(Case):
    def test_devkit_ids_through_the_synset_map(self):
        with open(os.path.join(self.src, "ILSVRC2012_validation_ground_truth.txt"), "w") as f:
            for i in range(1, len(self.val_labels) + 1):
                c = self.val_labels["ILSVRC2012_val_%08d.JPEG" % i]
                f.write("%d\n" % (DEVKIT_ORDER.index(WNIDS[c]) + 1))
        synsets = os.path.join(self.dir, "devkit_synsets.txt")
        with open(synsets, "w") as f:
            f.write("".join("%s some name, other name\n" % w for w in DEVKIT_ORDER))
        r = self.run_script(pack_only=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("TALLY_VAL_SYNSETS", r.stderr)
        r = self.run_script(pack_only=True, env_extra={"TALLY_VAL_SYNSETS": synsets})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertPacks()


class ValFoldersTest(Case):
    def test_val_wnid_folders(self):
        for name, c in self.val_labels.items():
            os.makedirs(os.path.join(self.src, "val", WNIDS[c]), exist_ok=True)
            os.rename(os.path.join(self.src, "val", name), os.path.join(self.src, "val", WNIDS[c], name))
        r = self.run_script(pack_only=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # In folders the sorted paths are wnid/name: the index follows that order.
        val = self.records("val.rec")
        paths = sorted("%s/%s" % (WNIDS[c], n) for n, c in self.val_labels.items())
        self.assertEqual(val, {i: WNIDS.index(p.split("/")[0]) for i, p in enumerate(paths)})


class RefusalTest(Case):
    def test_missing_labels_and_bad_arguments(self):
        r = self.run_script(pack_only=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no validation labels", r.stderr)
        r = self.run_script(workers="0", pack_only=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("WORKERS", r.stderr)
        self.write_loc_csv()
        with open(os.path.join(self.src, "LOC_val_solution.csv"), "a") as f:
            f.write("ILSVRC2012_val_00000001,n09999999 1 2 3 4\n")  # a later line wins in awk: unknown class
        r = self.run_script(pack_only=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("is not a class of train/", r.stderr)


if __name__ == "__main__":
    TALLY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
