#!/usr/bin/env python3
"""The Slurm launcher of `canonlab sweep` against a real Slurm: a private one-node cluster (local-slurm.sh).

Scenarios, run at the same time on the one cluster (the node declares 8 CPUs) beside local-launcher references:
  a. a 2 x 3 grid submitted as an array (2 runs per task) finishes, equals the local launcher's results (final
     checkpoints byte-equal, metrics without wall-clock fields equal), `--status` shows 6 done, re-submitting
     submits nothing, and `canonlab report` reads the directory;
  b. a run cancelled by `scancel` while it trains (paused after step 20: CANONLAB_PAUSE_AT) shows as stopped, a second submission while it is still queued
     submits nothing, and the re-submission resumes it from a step > 0 to the uninterrupted result;
  c. the time-limit warning: quick variant `scancel --signal=USR1 --batch JOB` (deterministic), and a real
     `--time=1` with `--signal-lead 50` (Slurm looks at time limits every 30 s: the warning comes 10-40 s into
     each attempt) on a run too long for one attempt; both checkpoint, requeue themselves and finish equal to
     the uninterrupted run, with the restarts in status.json.
  d. the grid of a. submitted with --pack 3: two array tasks, each one `canonlab train-pack` process training its
     three runs side by side, every run equal to the local launcher's.
The sweep directories have a space in their path, so quoting in the sbatch script is tested for real.

Usage: test_slurm_launcher.py --canonlab BUILD/canonlab --workdir DIR
Exit 0 = pass. The cluster is started in DIR/cluster and stopped at the end, also on failure. Without Slurm's
packages (scripts/install-deps.sh installs them) it fails, naming the missing package.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
CLUSTER_SCRIPT = os.path.join(HERE, "local-slurm.sh")
BASE = os.path.join(SOURCE, "configs", "demo.yaml")

# The tiny model of tests/unit/test_sweep.cpp: about 50 steps/s on one core.
TINY = """base: {base}
set:
  model.d_model: 32
  model.n_layers: 4
  model.n_heads: 2
  train.steps: {steps}
  train.eval_every: {eval_every}
  train.checkpoint_every: 20
  train.log_every: 10
  train.batch_size: 16
  probe.n_sequences: 32
"""
GRID_AXES = """axes:
  - name: layer
    key: model.attention.key_shift.layers
    values: [[0], [3]]
    labels: [L0, L3]
  - key: seed
    values: [0, 1, 2]
"""
GRID_STEPS = 40
MEDIUM_STEPS = 400   # ~8 s: long enough to be caught while training
# The time-limited run must outlast the 40 s an attempt can get before the warning under --time=1 on any
# machine: its length is measured here (a 300-step run of the same model, alone, before anything is submitted) and
# set to about LONG_SECONDS of training, never below LONG_STEPS_MIN. A fixed 2500 steps took 50 s on one machine
# and 21 s on a faster one, which finished inside its first attempt and was never requeued.
CALIBRATION_STEPS = 300
LONG_SECONDS = 60
LONG_STEPS_MIN = 2500

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message, flush=True)
    return condition


def log(message):
    print("[%6.1f s] %s" % (time.time() - START, message), flush=True)


START = time.time()


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def read_json(path):
    data = read(path)
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


def metrics_without_timing(run_dir):
    records = []
    for line in (read(os.path.join(run_dir, "metrics.jsonl")) or b"").decode().splitlines():
        record = json.loads(line)
        record.pop("elapsed_s", None)
        record.pop("tokens_per_s", None)
        records.append(record)
    return records


def final_checkpoints(steps):
    return ["checkpoints/step_%08d.%s.safetensors" % (steps, kind) for kind in ("model", "state")]


class Canonlab:
    def __init__(self, binary, env):
        self.binary, self.env = binary, env

    def run(self, *args, check_rc=True, pause_at=None):
        env = dict(self.env)
        if pause_at:  # the trainers of a job submitted now stop themselves there (train/phases.h)
            env["CANONLAB_PAUSE_AT"] = pause_at
        r = subprocess.run([self.binary] + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=120)
        if check_rc and r.returncode != 0:
            raise RuntimeError("canonlab %s exited %d:\n%s" % (" ".join(args), r.returncode, r.stdout))
        return r

    def start(self, *args):  # a local reference sweep, in the background
        return subprocess.Popen([self.binary] + list(args), env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)


def submit(canonlab, sweep_file, out, *extra, pause_at=None):
    r = canonlab.run("sweep", sweep_file, "--launcher", "slurm", "--out", out, *extra, pause_at=pause_at)
    m = re.search(r"submitted job (\d+):", r.stdout)
    if not m:
        raise RuntimeError("no job id in the submission's output:\n" + r.stdout)
    log("submitted job %s for %s" % (m.group(1), os.path.basename(out)))
    return m.group(1), r.stdout


def squeue(env):
    r = subprocess.run(["squeue", "--noheader", "--array", "--format=%i %T"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=30)
    return dict(line.split(None, 1) for line in r.stdout.splitlines() if line.strip())


def job_in_queue(env, job):
    return any(task.split("_")[0] == job for task in squeue(env))


def wait_for(what, condition, timeout, poll=0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(poll)
    return check(False, "timed out after %d s waiting for %s" % (timeout, what))


def paused_trainer(run_dir):
    """The pid of a trainer of run_dir stopped at its pause point (state T in /proc/PID/stat), or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        args = (read("/proc/%s/cmdline" % pid) or b"").split(b"\0")
        stat = (read("/proc/%s/stat" % pid) or b"").decode(errors="replace")
        if b"train" in args and any(run_dir.encode() in a for a in args) and stat[stat.rfind(")") + 2:][:1] == "T":
            return int(pid)
    return None


def checkpoint_step(run_dir):
    latest = read_json(os.path.join(run_dir, "checkpoints", "latest.json"))
    return latest.get("step", 0) if isinstance(latest, dict) else 0


def finished(run_dir, steps):
    summary = read_json(os.path.join(run_dir, "summary.json"))
    return isinstance(summary, dict) and summary.get("steps") == steps


def compare_runs(reference_dir, slurm_dir, steps, what):
    for path in final_checkpoints(steps):
        a, b = read(os.path.join(reference_dir, path)), read(os.path.join(slurm_dir, path))
        check(a is not None and a == b, "%s: %s differs from the local launcher's (or is missing)" % (what, path))
    check(metrics_without_timing(reference_dir) == metrics_without_timing(slurm_dir),
          "%s: metrics.jsonl differs from the local launcher's (records lost, repeated or changed)" % what)
    sa, sb = read_json(os.path.join(reference_dir, "summary.json")), read_json(os.path.join(slurm_dir, "summary.json"))
    check(sa and sb and sa.get("eval") == sb.get("eval") and sa.get("ipmr") == sb.get("ipmr"),
          "%s: summary.json's eval/ipmr differ from the local launcher's" % what)


def dump_logs(sweep_dir):
    for folder in (os.path.join(sweep_dir, "slurm", "logs"),):
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                print("---- %s\n%s" % (os.path.join(folder, name), (read(os.path.join(folder, name)) or b"").decode()))
    runs = os.path.join(sweep_dir, "runs")
    if os.path.isdir(runs):
        for name in sorted(os.listdir(runs)):
            print("---- %s/status.json: %s" % (name, (read(os.path.join(runs, name, "status.json")) or b"").decode()))
            tail = (read(os.path.join(runs, name, "train.log")) or b"").decode().splitlines()[-5:]
            print("---- %s/train.log (tail):\n%s" % (name, "\n".join(tail)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--canonlab", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    work = os.path.abspath(args.workdir)
    cluster = os.path.join(work, "cluster")
    sweeps = os.path.join(work, "sweeps with space")
    shutil.rmtree(sweeps, ignore_errors=True)
    os.makedirs(sweeps)

    # The cluster goes down however the test ends; ctest's timeout kills with SIGKILL, which is why `start`
    # also stops what an earlier run left in the same directory.
    def stop_cluster(*_):
        subprocess.run(["bash", CLUSTER_SCRIPT, "stop", cluster], timeout=60)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    r = subprocess.run(["bash", CLUSTER_SCRIPT, "start", cluster], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    print(r.stdout, end="", flush=True)
    if r.returncode != 0:
        print("FAIL: the local Slurm cluster did not start (see above)")
        return 1
    try:
        env = dict(os.environ, SLURM_CONF=os.path.join(cluster, "slurm.conf"), OMP_NUM_THREADS="1")
        scenarios(Canonlab(os.path.abspath(args.canonlab), env), env, sweeps)
    except Exception as e:  # a broken scenario fails the test with what it was doing
        failures.append("%s: %s" % (type(e).__name__, e))
        print("FAIL: %s: %s" % (type(e).__name__, e), flush=True)
    finally:
        if failures:
            for name in sorted(os.listdir(sweeps)):
                if not name.startswith("ref-"):
                    dump_logs(os.path.join(sweeps, name))
        stop_cluster()
    log("%d failure(s)" % len(failures))
    return 1 if failures else 0


def write_sweep(path, name, steps, axes, eval_every=None):
    with open(path, "w") as f:
        f.write("name: %s\n" % name + TINY.format(base=BASE, steps=steps, eval_every=eval_every or steps) + axes)
    return path


def long_steps(canonlab, sweeps):
    """Steps that take about LONG_SECONDS here: the speed of a CALIBRATION_STEPS run of the tiny model."""
    calibration = write_sweep(os.path.join(sweeps, "calibration.yaml"), "calibration", CALIBRATION_STEPS,
                              "axes:\n  - key: seed\n    values: [5]\n")
    begin = time.time()
    canonlab.run("sweep", calibration, "--jobs", "1", "--out", os.path.join(sweeps, "ref-calibration"))
    steps_per_s = CALIBRATION_STEPS / max(time.time() - begin, 1e-3)
    steps = max(LONG_STEPS_MIN, int(steps_per_s * LONG_SECONDS) // 100 * 100)
    log("calibration: %.0f steps/s, so the time-limited run trains %d steps (~%d s)" %
        (steps_per_s, steps, steps / steps_per_s))
    return steps


def scenarios(canonlab, env, sweeps):
    long_steps_here = long_steps(canonlab, sweeps)
    grid_file = write_sweep(os.path.join(sweeps, "grid.yaml"), "grid", GRID_STEPS, GRID_AXES, eval_every=20)
    seed_axis = "axes:\n  - key: seed\n    values: [5]\n"
    medium_file = write_sweep(os.path.join(sweeps, "medium.yaml"), "medium", MEDIUM_STEPS, seed_axis)
    long_file = write_sweep(os.path.join(sweeps, "long.yaml"), "long", long_steps_here, seed_axis)
    grid, killed, warned, timed, packed = (os.path.join(sweeps, n) for n in ("grid", "killed", "warned", "timed", "packed"))

    # c (time limit) first: it takes longest. --time=1 is Slurm's smallest limit.
    timed_job, _ = submit(canonlab, long_file, timed, "--time", "1", "--signal-lead", "50")
    grid_job, grid_out = submit(canonlab, grid_file, grid, "--runs-per-task", "2")
    check("3 array task(s)" in grid_out, "the 6-run grid with --runs-per-task 2 is not 3 array tasks:\n" + grid_out)
    # d: the same grid in packs of 3 (its runs share their shapes): 2 array tasks, each one train-pack process.
    packed_job, packed_out = submit(canonlab, grid_file, packed, "--pack", "3")
    check("2 array task(s)" in packed_out and "each task one pack" in packed_out,
          "the 6-run grid with --pack 3 is not 2 pack tasks:\n" + packed_out)
    # Their trainers wait stopped after step 20 (its checkpoint written) for the scancel: no race with the clock.
    killed_job, _ = submit(canonlab, medium_file, killed, pause_at="after-step:20")
    warned_job, _ = submit(canonlab, medium_file, warned, pause_at="after-step:20")
    # The local launcher's results, trained meanwhile.
    references = [canonlab.start("sweep", f, "--jobs", "1", "--out", os.path.join(sweeps, "ref-" + n))
                  for f, n in ((grid_file, "grid"), (medium_file, "medium"), (long_file, "long"))]

    # b: scancel while training, after a checkpoint.
    killed_run = os.path.join(killed, "runs", "seed=5")
    wait_for("the run of job %s to pause after step 20" % killed_job, lambda: paused_trainer(killed_run), 120, 0.1)
    again = canonlab.run("sweep", medium_file, "--launcher", "slurm", "--out", killed)
    check("nothing to submit" in again.stdout and "1 pending or running in Slurm" in again.stdout,
          "a second submission while the run trains did not leave it alone:\n" + again.stdout)
    subprocess.run(["scancel", killed_job], env=env, check=True, timeout=30)
    log("scancel %s" % killed_job)
    # c, quick variant: the time-limit warning by hand.
    warned_run = os.path.join(warned, "runs", "seed=5")
    wait_for("the run of job %s to pause after step 20" % warned_job, lambda: paused_trainer(warned_run), 120, 0.1)
    subprocess.run(["scancel", "--signal=USR1", "--batch", warned_job], env=env, check=True, timeout=30)
    log("scancel --signal=USR1 --batch %s" % warned_job)

    wait_for("job %s to leave the queue" % killed_job, lambda: not job_in_queue(env, killed_job), 60)
    status = canonlab.run("sweep", "--status", killed).stdout
    check(re.search(r"stopped\s+seed=5", status) and "1 stopped" in status,
          "--status after scancel does not show the run stopped:\n" + status)
    stopped_at = checkpoint_step(killed_run)
    check(0 < stopped_at < MEDIUM_STEPS, "the cancelled run has checkpoint step %d" % stopped_at)
    resubmitted_job, _ = submit(canonlab, medium_file, killed)

    # a: the grid.
    wait_for("the grid's job %s to finish" % grid_job, lambda: not job_in_queue(env, grid_job), 120)
    status = canonlab.run("sweep", "--status", grid).stdout
    check("6 runs: 6 done" in status, "--status of the grid:\n" + status)
    again = canonlab.run("sweep", grid_file, "--launcher", "slurm", "--out", grid, "--runs-per-task", "2")
    check("nothing to submit: 6 run(s) finished" in again.stdout, "re-submitting the finished grid:\n" + again.stdout)

    for p in references:
        out, _ = p.communicate(timeout=300)
        check(p.returncode == 0, "a local reference sweep failed:\n" + out)
    log("local references done")
    ref_grid, ref_medium, ref_long = (os.path.join(sweeps, "ref-" + n) for n in ("grid", "medium", "long"))
    for layer in ("L0", "L3"):
        for seed in "012":
            name = "layer=%s__seed=%s" % (layer, seed)
            compare_runs(os.path.join(ref_grid, "runs", name), os.path.join(grid, "runs", name), GRID_STEPS, "grid " + name)
    # d, finished: every packed run equals the local launcher's, and says which pack trained it.
    wait_for("the packed grid's job %s to finish" % packed_job, lambda: not job_in_queue(env, packed_job), 120)
    status = canonlab.run("sweep", "--status", packed).stdout
    check("6 runs: 6 done" in status, "--status of the packed grid:\n" + status)
    for layer in ("L0", "L3"):
        for seed in "012":
            name = "layer=%s__seed=%s" % (layer, seed)
            compare_runs(os.path.join(ref_grid, "runs", name), os.path.join(packed, "runs", name), GRID_STEPS,
                         "packed grid " + name)
            run_status = read_json(os.path.join(packed, "runs", name, "status.json")) or {}
            check(run_status.get("pack", "").startswith("pack-layer=") and run_status.get("launcher") == "slurm",
                  "the packed run %s's status.json: %s" % (name, run_status))
    report = canonlab.run("report", grid, check_rc=False)
    check(report.returncode == 0 and os.path.exists(os.path.join(grid, "report", "report.md")),
          "canonlab report on the Slurm sweep failed:\n" + report.stdout)

    # b, finished.
    wait_for("the resubmitted job %s to finish" % resubmitted_job, lambda: not job_in_queue(env, resubmitted_job), 120)
    log_text = (read(os.path.join(killed_run, "train.log")) or b"").decode()
    check("resuming from step %d" % stopped_at in log_text,
          "the resubmitted run did not resume from step %d:\n%s" % (stopped_at, log_text[-2000:]))
    compare_runs(os.path.join(ref_medium, "runs", "seed=5"), killed_run, MEDIUM_STEPS, "cancelled and resubmitted run")

    # c, quick variant, finished: one requeue, by the worker itself.
    wait_for("the warned job %s to finish" % warned_job, lambda: finished(warned_run, MEDIUM_STEPS) and
             not job_in_queue(env, warned_job), 120)
    status = read_json(os.path.join(warned_run, "status.json")) or {}
    check(status.get("state") == "done" and status.get("slurm_restarts") == 1,
          "the warned run's status.json after its requeue: %s" % status)
    log_text = (read(os.path.join(warned_run, "train.log")) or b"").decode()
    check("stopped by SIGUSR1" in log_text and re.search(r"resuming from step [1-9]", log_text),
          "the warned run did not checkpoint on SIGUSR1 and resume:\n" + log_text[-2000:])
    slurm_log = (read(os.path.join(warned, "slurm", "logs", "%s_0.out" % warned_job)) or b"").decode()
    check("requeued %s_0" % warned_job in slurm_log, "the worker did not requeue its task:\n" + slurm_log)
    compare_runs(os.path.join(ref_medium, "runs", "seed=5"), warned_run, MEDIUM_STEPS, "USR1-requeued run")

    # c, the real time limit.
    timed_run = os.path.join(timed, "runs", "seed=5")
    wait_for("the time-limited job %s to finish" % timed_job, lambda: finished(timed_run, long_steps_here) and
             not job_in_queue(env, timed_job), 360)
    status = read_json(os.path.join(timed_run, "status.json")) or {}
    restarts = status.get("slurm_restarts", 0)
    log("the time-limited run finished after %d requeue(s)" % restarts)
    check(status.get("state") == "done" and restarts >= 1, "the time-limited run's status.json: %s" % status)
    slurm_log = (read(os.path.join(timed, "slurm", "logs", "%s_0.out" % timed_job)) or b"").decode()
    check("requeued %s_0" % timed_job in slurm_log and "DUE TO TIME LIMIT" not in slurm_log,
          "the time-limited task was not requeued before its limit:\n" + slurm_log)
    compare_runs(os.path.join(ref_long, "runs", "seed=5"), timed_run, long_steps_here, "time-limited run")
    status = canonlab.run("sweep", "--status", timed).stdout
    check("1 runs: 1 done" in status and "Slurm restart" in status, "--status of the time-limited sweep:\n" + status)


if __name__ == "__main__":
    sys.exit(main())
