#!/usr/bin/env python3
"""canonlab's TensorBoard event files read back by TensorBoard itself (train/tensorboard_log.h, docs/tensorboard.md).

  - a run's RUN_DIR/tb/ holds, per TensorBoard's EventAccumulator, every number of metrics.jsonl as a scalar at its
    step (train/loss, train/lr, train/grad_norm, train/tokens_per_s, eval/loss, eval/<task metric>), the resolved
    config as text, the IPMR table as text and a PNG heatmap per delta of the right size; `canonlab probe` on the run
    adds the attention maps of the chosen heads as images;
  - a run stopped dead (SIGKILL while paused after step 45, CANONLAB_PAUSE_AT) leaves a readable file, and its
    --resume leaves one file with every step exactly once, equal to the resumed metrics.jsonl;
  - log.tensorboard=false writes no tb/;
  - a sweep's runs carry the HParams plugin's session records (the axes, numbers where the label is one), and a real
    `tensorboard` server over the sweep directory lists one session group per run with the axes as hyperparameter
    columns and the runs' last eval metrics as metric columns, equal to their metrics.jsonl.

    python tests/python/test_tensorboard.py --canonlab build/canonlab --workdir build/tensorboard_test

Exit status 0 only if every check passed; the last line is `N passed, M failed`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata as hparams_metadata
except Exception as e:  # noqa: BLE001 - any import failure means the environment is not set up
    print(f"tensorboard test: cannot import tensorboard with {sys.executable}: {e!r}")
    print("create the test virtualenv with scripts/setup-venv.sh")
    print("0 passed, 1 failed")
    sys.exit(1)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
results = {"passed": 0, "failed": 0}
ALL = {"scalars": 0, "images": 0, "tensors": 0}  # keep every event (no reservoir sampling)


def check(ok: bool, what: str):
    results["passed" if ok else "failed"] += 1
    print(("ok   " if ok else "FAIL ") + what, flush=True)


def records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def expected_scalars(recs):
    """tag -> [(step, value)] as the event file must hold them."""
    out = {}
    for r in recs:
        for k, v in r.items():
            if k in ("step", "split", "elapsed_s") or not isinstance(v, (int, float)) or isinstance(v, bool):
                continue
            out.setdefault(f"{r['split']}/{k}", []).append((r["step"], v))
    return out


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def load(tb_dir):
    ea = EventAccumulator(tb_dir, size_guidance=ALL)
    ea.Reload()
    return ea


def scalars_match(ea, recs):
    want = expected_scalars(recs)
    tags = set(ea.Tags()["scalars"])
    if tags != set(want):
        return False, f"tags {sorted(tags)} != {sorted(want)}"
    for tag, pairs in want.items():
        got = [(e.step, e.value) for e in ea.Scalars(tag)]
        if got != [(s, f32(v)) for s, v in pairs]:
            return False, f"{tag}: {got[:5]}... != {pairs[:5]}..."
    return True, f"{len(want)} tags, {sum(len(p) for p in want.values())} values"


def train(env, out, *sets, extra_env=None, wait=True, resume=False):
    cmd = [env.canonlab, "train", os.path.join(ROOT, "configs", "demo.yaml"), "--out", out, "--quiet",
           *(["--resume"] if resume else []),
           "--set", "train.steps=60", "--set", "train.eval_every=20", "--set", "train.checkpoint_every=20",
           "--set", "train.log_every=5", "--set", "probe.n_sequences=64"]
    for s in sets:
        cmd += ["--set", s]
    e = dict(os.environ, **(extra_env or {}))
    if not wait:
        return subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return subprocess.run(cmd, env=e, capture_output=True, text=True)


def process_state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_run(env):
    out = os.path.join(env.workdir, "run")
    r = train(env, out)
    check(r.returncode == 0, "train exits 0" + ("" if r.returncode == 0 else ": " + r.stderr[-500:]))
    files = sorted(os.listdir(os.path.join(out, "tb")))
    check(len(files) == 1 and files[0].startswith("events.out.tfevents."), f"one event file in tb/: {files}")
    ea = load(os.path.join(out, "tb"))
    ok, why = scalars_match(ea, records(out))
    check(ok, "scalars equal metrics.jsonl: " + why)
    tensors = ea.Tags()["tensors"]
    config = ea.Tensors("config")[0].tensor_proto.string_val[0].decode() if "config" in tensors else ""
    with open(os.path.join(out, "config.resolved.yaml")) as f:
        resolved = f.read()
    check(config.replace("\n    ", "\n").removeprefix("    ") == resolved, "the config text is config.resolved.yaml")
    ipmr = ea.Tensors("probe/ipmr")[0].tensor_proto.string_val[0].decode() if "probe/ipmr" in tensors else ""
    check("IPMR at delta=1" in ipmr and "global_ipmr" in ipmr, "the IPMR table as text")
    images = ea.Tags()["images"]
    check(images == ["probe/ipmr_delta_1"], f"one IPMR heatmap per delta: {images}")
    if images:
        im = ea.Images(images[0])[0]
        # demo.yaml: 2 layers x 4 heads, cells of 24 pixels and a 1-pixel grid
        check(im.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n" and (im.width, im.height) == (4 * 25 + 1, 2 * 25 + 1)
              and im.step == 60, f"the heatmap is a {im.width} x {im.height} PNG at step {im.step}")

    # canonlab probe on the run: the attention maps of its heads beside the run's file, at the checkpoint's step
    r = subprocess.run([env.canonlab, "probe", out, "--examples", "1", "--heads", "L0H1,L1H2"], capture_output=True,
                       text=True)
    check(r.returncode == 0, "canonlab probe exits 0" + ("" if r.returncode == 0 else ": " + r.stderr[-500:]))
    ea = load(os.path.join(out, "tb"))
    maps = sorted(t for t in ea.Tags()["images"] if t.startswith("probe/attention/"))
    check(maps == ["probe/attention/ex0/L0H1", "probe/attention/ex0/L1H2"], f"the probe's attention maps: {maps}")
    if maps:
        im = ea.Images(maps[0])[0]
        # T = 25 (n_symbols 12): cells of 200 // 25 = 8 pixels and a 1-pixel grid
        check((im.width, im.height, im.step) == (25 * 9 + 1, 25 * 9 + 1, 60), f"a {im.width} x {im.height} map at step {im.step}")
    ok, why = scalars_match(ea, records(out))
    check(ok, "the run's scalars are still there beside the probe's file: " + why)


def test_kill_and_resume(env):
    out = os.path.join(env.workdir, "killed")
    p = train(env, out, extra_env={"CANONLAB_PAUSE_AT": "after-step:45"}, wait=False)
    while p.poll() is None and process_state(p.pid) != "T":  # paused by itself after step 45 (not a clock)
        time.sleep(0.05)
    check(p.poll() is None, "the run paused after step 45")
    p.kill()
    p.wait()
    before = load(os.path.join(out, "tb"))
    steps = [e.step for e in before.Scalars("train/loss")]
    check(steps and steps[-1] == 45, f"the killed run's file reads up to step 45: {steps[-3:]}")
    r = train(env, out, resume=True)
    check(r.returncode == 0, "--resume exits 0" + ("" if r.returncode == 0 else ": " + r.stderr[-500:]))
    files = sorted(os.listdir(os.path.join(out, "tb")))
    check(len(files) == 1, f"one event file after the resume: {files}")
    ea = load(os.path.join(out, "tb"))
    recs = records(out)
    ok, why = scalars_match(ea, recs)
    check(ok, "after kill and resume every step once, equal to metrics.jsonl: " + why)
    steps = [e.step for e in ea.Scalars("train/loss")]
    check(steps == sorted(set(steps)) and steps[-1] == 60, f"train/loss steps strictly increasing to 60 ({len(steps)})")


def test_off(env):
    out = os.path.join(env.workdir, "off")
    r = train(env, out, "log.tensorboard=false", "train.steps=5")
    check(r.returncode == 0 and not os.path.exists(os.path.join(out, "tb")), "log.tensorboard=false writes no tb/")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as f:
        return json.load(f)


def test_sweep(env):
    sweep = os.path.join(env.workdir, "tiny.yaml")
    with open(sweep, "w") as f:
        f.write(f"""name: tiny
base: {os.path.join(ROOT, 'configs', 'demo.yaml')}
set: {{train.steps: 20, train.eval_every: 10, train.checkpoint_every: 10, probe.n_sequences: 32}}
axes:
  - {{name: canon, key: model.canon.set, values: ["", ABCD], labels: [none, ABCD]}}
  - {{key: seed, values: [0, 1]}}
""")
    out = os.path.join(env.workdir, "sweep")
    r = subprocess.run([env.canonlab, "sweep", sweep, "--out", out, "--jobs", "2"], capture_output=True, text=True)
    check(r.returncode == 0, "the sweep exits 0" + ("" if r.returncode == 0 else ": " + r.stderr[-500:]))
    names = sorted(os.listdir(os.path.join(out, "runs")))
    want_hparams = {n: {"canon": n.split("__")[0].split("=")[1], "seed": float(n.split("seed=")[1])} for n in names}
    for n in names:
        ea = load(os.path.join(out, "runs", n))
        content = ea.PluginTagToContent("hparams").get(hparams_metadata.SESSION_START_INFO_TAG)
        info = hparams_metadata.parse_session_start_info_plugin_data(content) if content else None
        got = {k: (v.string_value if v.HasField("string_value") else v.number_value) for k, v in info.hparams.items()} if info else None
        check(got == want_hparams[n], f"{n}: the session's hparams are its axes: {got}")

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", out, "--port", str(port),
                               "--host", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}/data/plugin/hparams"
        groups = None
        for _ in range(600):  # until the server answers and has read every run (not a verdict: it waits)
            try:
                groups = post(base + "/session_groups", {
                    "experimentName": "", "startIndex": 0, "sliceSize": 100,
                    "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
                    "colParams": [{"hparam": "canon"}, {"hparam": "seed"}],
                    "aggregationType": "AGGREGATION_AVG"})
                if groups.get("totalSize") == len(names):
                    break
            except OSError:
                pass
            if server.poll() is not None:
                break
            time.sleep(0.2)
        experiment = post(base + "/experiment", {"experimentName": ""})
        columns = sorted(h["name"] for h in experiment.get("hparamInfos", []))
        check(columns == ["canon", "seed"], f"TensorBoard's hparams columns are the axes: {columns}")
        metric_tags = sorted(m["name"]["tag"] for m in experiment.get("metricInfos", []))
        check({"eval/loss", "eval/copy_acc", "train/loss"} <= set(metric_tags), f"its metric columns: {metric_tags}")
        got = {g["name"].removeprefix("runs/"): g for g in (groups or {}).get("sessionGroups", [])}
        check(sorted(got) == names, f"one session group per run: {sorted(got)}")
        for n in names:
            last_eval = [r for r in records(os.path.join(out, "runs", n)) if r["split"] == "eval"][-1]
            g = got.get(n, {})
            values = {m["name"]["tag"]: m["value"] for m in g.get("metricValues", [])}
            ok = g.get("hparams") == want_hparams[n] and all(
                abs(values.get("eval/" + k, float("nan")) - f32(v)) <= 1e-7 * max(1, abs(v))
                for k, v in last_eval.items() if k not in ("step", "split", "elapsed_s"))
            check(ok, f"{n}: hparams {g.get('hparams')} and last eval {values.get('eval/copy_acc')} as in metrics.jsonl")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


class Env:
    def __init__(self, canonlab, workdir):
        self.canonlab, self.workdir = canonlab, workdir


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--canonlab", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    env = Env(os.path.abspath(a.canonlab), a.workdir)
    for t in (test_run, test_kill_and_resume, test_off, test_sweep):
        try:
            t(env)
        except Exception as e:  # noqa: BLE001 - a crash in one part is a failure, the others still run
            check(False, f"{t.__name__} raised {e!r}")
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(0 if results["failed"] == 0 else 1)


if __name__ == "__main__":
    main()
