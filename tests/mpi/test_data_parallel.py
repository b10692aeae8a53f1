#!/usr/bin/env python3
"""Data-parallel training under a real mpirun (Open MPI), end to end. Standard library only.

1. The communicator self-test under mpirun -np 2, 3, 4: every collective equals the rank-ordered reference.
2. `mpirun -np 2 canonlab train configs/E1-Bk0.yaml` (one thread per rank) is bit-identical to one process with
   train.micro_batches=2: every tensor of the final model and optimizer files, every metrics record. The same with
   3 ranks against 3 micro-batches (where the order of a float sum matters) on a tiny model.
3. Killing rank 1 with SIGKILL mid-run stops the whole job (in seconds), with a message naming rank 1; resuming
   with mpirun gives the bits of the uninterrupted run.
4. SIGUSR1 to mpirun (Slurm's time-limit warning) is forwarded to the ranks: the job writes a checkpoint, exits 75,
   and resuming it on one process with 2 micro-batches gives the bits of the uninterrupted run.
   In 3 and 4 the ranks wait at a step for the kill or the signal (CANONLAB_PAUSE_AT), never on the clock.
5. Under a real Slurm (the local one-node cluster of tests/slurm/local-slurm.sh): `srun --mpi=pmix -n 2 canonlab
   train` equals one process with 2 micro-batches; `srun -n 2` without an MPI plugin is refused saying so.
"""
import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import unittest

ARGS = None


def mpi_env():
    env = dict(os.environ)
    # Root in CI containers; oversubscription when 3-4 ranks share 2 cores; no CMA single-copy in containers.
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
                "OMP_NUM_THREADS": "1"})
    return env


def paused_env(phase):
    """mpi_env() with CANONLAB_PAUSE_AT: each rank stops itself (SIGSTOP) at that phase of the run."""
    env = mpi_env()
    env["CANONLAB_PAUSE_AT"] = phase
    return env


def process_state(pid):
    """The state letter of /proc/PID/stat (T: stopped), or None when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2]


def signal_pending(pid, sig):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(("SigPnd:", "ShdPnd:")) and (int(line.split()[1], 16) >> (sig - 1)) & 1:
                    return True
    except OSError:
        pass
    return False


def mpirun(n, *args, bind=True):
    cmd = [ARGS.mpirun, "-np", str(n)]
    if not bind:
        cmd += ["--bind-to", "none"]
    return cmd + list(args)


def tensors(path):
    """name -> raw bytes of every tensor of a safetensors file (metadata, which holds the config, left out)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}


def records(run_dir):
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            j.pop("tokens_per_s", None)
            j.pop("elapsed_s", None)
            out.append(j)
    return out


def final_files(run_dir):
    with open(os.path.join(run_dir, "checkpoints", "latest.json")) as f:
        latest = json.load(f)
    folder = os.path.join(run_dir, "checkpoints")  # latest.json names files relative to its folder
    return tensors(os.path.join(folder, latest["model"])), tensors(os.path.join(folder, latest["state"]))


def fresh(name):
    d = os.path.join(ARGS.workdir, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def train_cmd(config, out, sets, resume=False):
    cmd = [ARGS.canonlab, "train", os.path.join(ARGS.source, "configs", config), "--out", out, "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    return cmd + (["--resume"] if resume else [])


def run(cmd, timeout=600):
    p = subprocess.run(cmd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout


E1_SETS = ["train.threads=1", "train.steps=24", "train.eval_every=12", "train.checkpoint_every=12",
           "probe.n_sequences=16"]
TINY_SETS = ["train.threads=1", "model.d_model=32", "model.n_layers=2", "train.batch_size=12", "train.log_every=1",
             "train.eval_every=0", "probe.n_sequences=12"]


class DataParallel(unittest.TestCase):
    def assertSameRun(self, a, b):
        self.assertEqual(records(a), records(b), "metrics records differ")
        ma, sa = final_files(a)
        mb, sb = final_files(b)
        self.assertEqual(sorted(ma), sorted(mb))
        for name in ma:
            self.assertTrue(ma[name] == mb[name], "model tensor %s differs" % name)
        for name in sa:
            self.assertTrue(sa[name] == sb[name], "optimizer tensor %s differs" % name)

    def test_1_communicator_matches_its_reference(self):
        for n in (2, 3, 4):
            code, out = run(mpirun(n, ARGS.selftest, str(n), bind=False), timeout=120)
            self.assertEqual(code, 0, out)
            self.assertIn("every collective equals the reference", out)

    def test_2_ranks_equal_micro_batches_bit_for_bit(self):
        ranks, single = fresh("e1_ranks2"), fresh("e1_micro2")
        code, out = run(mpirun(2, *train_cmd("E1-Bk0.yaml", ranks, E1_SETS)))
        self.assertEqual(code, 0, out)
        self.assertIn("data-parallel: 2 ranks", out)
        code, out = run(train_cmd("E1-Bk0.yaml", single, E1_SETS + ["train.micro_batches=2"]))
        self.assertEqual(code, 0, out)
        self.assertSameRun(ranks, single)
        with open(os.path.join(ranks, "summary.json")) as f:
            self.assertEqual(json.load(f)["ranks"], 2)
        # 3 ranks, where (a + b) + c and a + (b + c) differ; and the same rank count twice gives the same bits.
        r3, m3, r3b = fresh("tiny_ranks3"), fresh("tiny_micro3"), fresh("tiny_ranks3_again")
        sets = TINY_SETS + ["train.steps=20", "train.checkpoint_every=10"]
        for d in (r3, r3b):
            code, out = run(mpirun(3, *train_cmd("demo.yaml", d, sets), bind=False))
            self.assertEqual(code, 0, out)
        code, out = run(train_cmd("demo.yaml", m3, sets + ["train.micro_batches=3"]))
        self.assertEqual(code, 0, out)
        self.assertSameRun(r3, m3)
        self.assertSameRun(r3, r3b)
        # A batch the ranks cannot share is refused before anything runs, naming the key.
        code, out = run(mpirun(2, *train_cmd("demo.yaml", fresh("odd"), TINY_SETS + ["train.batch_size=9"])))
        self.assertNotEqual(code, 0)
        self.assertIn("train.batch_size: 9 sequences cannot be split over 2 rank(s)", out)

    def _rank_pid(self, run_dir, rank):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmdline = f.read().split(b"\0")
                with open("/proc/%s/environ" % pid, "rb") as f:
                    environ = f.read().split(b"\0")
            except OSError:
                continue
            if cmdline and cmdline[0].endswith(b"canonlab") and run_dir.encode() in cmdline and \
                    ("OMPI_COMM_WORLD_RANK=%d" % rank).encode() in environ:
                return int(pid)
        return None

    def _wait_for_paused_ranks(self, run_dir, proc, n=2, guard=300):
        """The pids of the n ranks once all are stopped at their pause point (CANONLAB_PAUSE_AT). The guard only
        ends a hang: a working build gets there in seconds."""
        deadline = time.time() + guard
        while time.time() < deadline:
            if proc.poll() is not None:
                self.fail("the job ended before its ranks paused: %s" % proc.stdout.read())
            pids = [self._rank_pid(run_dir, r) for r in range(n)]
            if all(p is not None and process_state(p) == "T" for p in pids):
                return pids
            time.sleep(0.05)
        self.fail("the ranks did not pause within %d s" % guard)

    def test_3_a_killed_rank_stops_the_job_and_the_resume_is_bit_exact(self):
        sets = TINY_SETS + ["train.steps=300", "train.checkpoint_every=20"]
        clean, killed = fresh("kill_clean"), fresh("kill_resumed")
        code, out = run(train_cmd("demo.yaml", clean, sets + ["train.micro_batches=2"]))
        self.assertEqual(code, 0, out)
        # Both ranks stop themselves after step 50 (CANONLAB_PAUSE_AT); rank 1 dies there, rank 0 goes on alone.
        proc = subprocess.Popen(mpirun(2, *train_cmd("demo.yaml", killed, sets)), env=paused_env("after-step:50"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        rank0, rank1 = self._wait_for_paused_ranks(killed, proc)
        os.kill(rank1, signal.SIGKILL)
        os.kill(rank0, signal.SIGCONT)
        started = time.time()
        try:
            output, _ = proc.communicate(timeout=300)  # a hang guard: measured 2 s
        except subprocess.TimeoutExpired:
            proc.kill()
            self.fail("the job did not stop within 300 s of rank 1's death")
        self.assertNotEqual(proc.returncode, 0, output)
        self.assertRegex(output, r"rank 1\b", output)
        print("killed rank 1: the job stopped in %.1f s; mpirun said: %s" % (
            time.time() - started, " | ".join(l for l in output.splitlines() if "rank 1" in l)[:300]))
        self.assertFalse(os.path.exists(os.path.join(killed, "summary.json")))
        code, out = run(mpirun(2, *train_cmd("demo.yaml", killed, sets, resume=True)))
        self.assertEqual(code, 0, out)
        self.assertIn("resuming from step", out)
        self.assertSameRun(killed, clean)

    def test_4_a_forwarded_stop_signal_checkpoints_and_exits_75(self):
        sets = TINY_SETS + ["train.steps=300", "train.checkpoint_every=0"]
        clean, stopped = fresh("usr1_clean"), fresh("usr1_stopped")
        code, out = run(train_cmd("demo.yaml", clean, sets + ["train.micro_batches=2"]))
        self.assertEqual(code, 0, out)
        # The ranks wait stopped after step 40 until mpirun has passed the warning on to both, then go on.
        proc = subprocess.Popen(mpirun(2, *train_cmd("demo.yaml", stopped, sets)), env=paused_env("after-step:40"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ranks = self._wait_for_paused_ranks(stopped, proc)
        proc.send_signal(signal.SIGUSR1)
        deadline = time.time() + 120
        while not all(signal_pending(pid, signal.SIGUSR1) for pid in ranks) and time.time() < deadline:
            time.sleep(0.02)
        for pid in ranks:
            os.kill(pid, signal.SIGCONT)
        output, _ = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 75, output)
        self.assertIn("stopped by SIGUSR1: checkpoint at step", output)
        code, out = run(train_cmd("demo.yaml", stopped, sets + ["train.micro_batches=2"], resume=True))
        self.assertEqual(code, 0, out)
        self.assertSameRun(stopped, clean)


    def test_5_srun_with_pmix_is_a_launcher_too(self):
        cluster = os.path.join(ARGS.workdir, "slurm")
        script = os.path.join(ARGS.source, "tests", "slurm", "local-slurm.sh")
        code = subprocess.run([script, "start", cluster]).returncode
        self.assertEqual(code, 0, "the local Slurm cluster did not start (tests/slurm/local-slurm.sh)")
        try:
            env = mpi_env()
            env["SLURM_CONF"] = os.path.join(cluster, "slurm.conf")
            sets = TINY_SETS + ["train.steps=12", "train.checkpoint_every=6"]
            ranks, single = fresh("srun_ranks2"), fresh("srun_micro2")
            p = subprocess.run(["srun", "--mpi=pmix", "-n", "2", "-c", "1"] + train_cmd("demo.yaml", ranks, sets),
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout)
            self.assertIn("data-parallel: 2 ranks (srun", p.stdout)
            code, out = run(train_cmd("demo.yaml", single, sets + ["train.micro_batches=2"]))
            self.assertEqual(code, 0, out)
            self.assertSameRun(ranks, single)
            p = subprocess.run(["srun", "--mpi=none", "-n", "2", "-c", "1"] +
                               train_cmd("demo.yaml", fresh("srun_plain"), sets),
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("run `srun --mpi=pmix canonlab train", p.stdout)
        finally:
            subprocess.run([script, "stop", cluster])


def main():
    global ARGS
    p = argparse.ArgumentParser()
    for a in ("--canonlab", "--selftest", "--mpirun", "--source", "--workdir"):
        p.add_argument(a, required=True)
    ARGS, rest = p.parse_known_args()
    if not ARGS.mpirun or not shutil.which(ARGS.mpirun):
        print("mpirun not found: install openmpi-bin (scripts/install-deps.sh)", file=sys.stderr)
        return 1
    os.makedirs(ARGS.workdir, exist_ok=True)
    result = unittest.main(argv=[sys.argv[0], "-v"] + rest, exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
