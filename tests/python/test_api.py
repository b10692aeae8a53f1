#!/usr/bin/env python3
"""The Python package (python/canonlab, installed into the test virtualenv) against the CLI and an independent
PyTorch model: same runs bit for bit, same errors, same report numbers, logits within 1e-5 of tests/torch_ref.

    .venv/bin/python tests/python/test_api.py --canonlab build/canonlab --workdir /tmp/pyapi
"""
import argparse
import hashlib
import json
import os
import pydoc
import shutil
import signal
import subprocess
import sys
import unittest
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "torch_ref"))

import canonlab  # noqa: E402  (the installed package, not python/ of this checkout)

CLI = ""
WORK = Path()
CONFIG = ROOT / "configs" / "demo-induction.yaml"
SHORT = {"train.steps": 40, "train.eval_every": 20, "train.checkpoint_every": 20, "task.eval_samples": 64}


def cli(*args, check=True):
    done = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"canonlab {' '.join(map(str, args))} exited {done.returncode}: {done.stderr}")
    return done


def sets(overrides):
    return [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def metrics_without_time(run_dir):
    out = []
    for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        for k in ("elapsed_s", "tokens_per_s"):
            r.pop(k, None)
        out.append(r)
    return out


class TrainMatchesCli(unittest.TestCase):
    """canonlab.train is `canonlab train`: the same checkpoint bytes and metrics; on_step sees every record."""

    @classmethod
    def setUpClass(cls):
        cls.cli_dir, cls.py_dir = WORK / "cli-run", WORK / "py-run"
        for d in (cls.cli_dir, cls.py_dir):
            shutil.rmtree(d, ignore_errors=True)
        cli("train", CONFIG, *sets(SHORT), "--out", cls.cli_dir, "--quiet")
        cls.records = []
        cls.trained = canonlab.train(CONFIG, SHORT, out=cls.py_dir, on_step=cls.records.append)

    def test_checkpoints_are_bit_identical(self):
        for step in (20, 40):
            name = f"checkpoints/step_{step:08d}.model.safetensors"
            self.assertEqual(digest(self.cli_dir / name), digest(self.py_dir / name), name)
        self.assertEqual(metrics_without_time(self.cli_dir), metrics_without_time(self.py_dir))

    def test_on_step_sees_every_record(self):
        self.assertEqual([(r["step"], r["split"]) for r in self.records],
                         [(r["step"], r["split"]) for r in metrics_without_time(self.py_dir)])

    def test_run_reads_the_directory(self):
        run = canonlab.Run(self.py_dir)
        self.assertTrue(run.done)
        self.assertEqual(run.config["train"]["steps"], 40)
        self.assertEqual(list(run.eval_metrics["step"]), [20, 40])
        self.assertIn("copy_acc", run.eval_metrics.columns)
        self.assertEqual(run.summary["eval"]["copy_acc"], run.eval_metrics["copy_acc"].iloc[-1])
        self.assertEqual([p.name for p in run.checkpoints],
                         ["step_00000020.model.safetensors", "step_00000040.model.safetensors"])

    def test_errors_carry_the_cli_message(self):
        bad = {"train.stepz": 3}
        message = cli("train", CONFIG, *sets(bad), "--out", WORK / "bad", check=False).stderr.strip()
        self.assertTrue(message.startswith("error: "), message)
        with self.assertRaises(canonlab.Error) as caught:
            canonlab.train(CONFIG, bad, out=WORK / "bad")
        self.assertEqual(str(caught.exception), message[len("error: "):])
        self.assertFalse((WORK / "bad").exists())
        # A run directory that holds a run is refused without force, as by the CLI.
        with self.assertRaises(canonlab.Error) as caught:
            canonlab.train(CONFIG, SHORT, out=self.py_dir)
        self.assertIn("--force", str(caught.exception))


class StopAndResume(unittest.TestCase):
    """SIGINT during canonlab.train stops the run with a checkpoint (canonlab.Stopped); resume=True then ends
    with the same weights as an uninterrupted run."""

    def test_sigint_then_resume_is_bit_exact(self):
        whole, stopped = WORK / "whole", WORK / "stopped"
        for d in (whole, stopped):
            shutil.rmtree(d, ignore_errors=True)
        overrides = dict(SHORT, **{"train.log_every": 1})
        canonlab.train(CONFIG, overrides, out=whole)

        def interrupt_at_step_13(record):
            if record["split"] == "train" and record["step"] == 13:
                os.kill(os.getpid(), signal.SIGINT)

        with self.assertRaises(canonlab.Stopped) as caught:
            canonlab.train(CONFIG, overrides, out=stopped, on_step=interrupt_at_step_13)
        message = str(caught.exception)
        self.assertIn("stopped by SIGINT: checkpoint at step ", message)
        step = int(message.split("checkpoint at step ")[1].split()[0])
        self.assertIn(step, (13, 14))  # the loop polls for signals between steps
        self.assertTrue((stopped / "checkpoints" / f"step_{step:08d}.model.safetensors").is_file(), message)
        self.assertFalse((stopped / "summary.json").exists())
        self.assertTrue(isinstance(caught.exception, KeyboardInterrupt))
        canonlab.train(CONFIG, overrides, out=stopped, resume=True)
        name = "checkpoints/step_00000040.model.safetensors"
        self.assertEqual(digest(whole / name), digest(stopped / name))


class ModelMatchesReference(unittest.TestCase):
    """canonlab.Model against the independent PyTorch model (tests/torch_ref) and the CLI's generate."""

    @classmethod
    def setUpClass(cls):
        cls.dir = WORK / "model-run"
        shutil.rmtree(cls.dir, ignore_errors=True)
        # Canon-ABCD, NoPE: the demo's other model, so convolutions and every block output are exercised.
        cls.trained = canonlab.train(ROOT / "configs" / "demo.yaml", SHORT, out=cls.dir)
        cls.model = canonlab.Model.load(cls.dir)
        rng = np.random.default_rng(0)
        cls.tokens = rng.integers(0, cls.model.vocab_size, size=(3, 24))

    def reference(self):
        import canon_model as cm
        import torch

        ref = cm.CanonModel(cm.config_from_checkpoint(self.model.path)).double().load_state(self.model.path)
        ref.eval()
        captured = []
        hooks = [ref.tok_emb.register_forward_hook(lambda m, i, o: captured.append(o))]
        hooks += [layer.register_forward_hook(lambda m, i, o: captured.append(o)) for layer in ref.layers]
        with torch.no_grad():
            logits = ref(torch.from_numpy(self.tokens))
        for h in hooks:
            h.remove()
        return logits.numpy(), [c.numpy() for c in captured]

    def test_logits_and_hidden_states_match_pytorch(self):
        logits, hidden = self.reference()
        ours = self.model.forward(self.tokens)
        self.assertEqual(ours.shape, (3, 24, self.model.vocab_size))
        self.assertEqual(ours.dtype, np.float32)
        import torch
        self.assertEqual(torch.from_dlpack(ours).data_ptr(), ours.ctypes.data)  # handed over without a copy
        self.assertLess(np.abs(ours - logits).max(), 1e-5)
        states = self.model.hidden_states(self.tokens)
        self.assertEqual(len(states), self.model.n_layers + 1)
        for got, want in zip(states, hidden):
            self.assertLess(np.abs(got - want).max(), 1e-5 * max(1.0, np.abs(want).max()))

    def test_attention_is_causal_and_normalised(self):
        maps = self.model.attention(self.tokens)
        self.assertEqual(len(maps), self.model.n_layers)
        for a in maps:
            self.assertEqual(a.shape, (3, self.model.config["model"]["n_heads"], 24, 24))
            np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)
            self.assertEqual(np.triu(a, k=1).max(), 0.0)
        # One pass asked for everything gives the same numbers as the separate calls.
        both = self.model.run(self.tokens, attention=True, hidden_states=True)
        np.testing.assert_array_equal(both["logits"], self.model.forward(self.tokens))
        np.testing.assert_array_equal(both["attention"][1], maps[1])

    def test_generate_matches_the_cli(self):
        prompt = [int(t) for t in self.tokens[0, :6]]
        out = cli("generate", self.dir, "--prompt", ",".join(map(str, prompt)), "--max-new", 10).stdout
        line = next(l for l in out.splitlines() if l.startswith("generated "))
        self.assertEqual(self.model.generate(prompt, max_new=10), [int(t) for t in line.split()[1:]])
        many = self.model.generate([prompt, prompt[:3]], max_new=4)
        self.assertEqual(len(many), 2)
        self.assertEqual(many[0], self.model.generate(prompt, max_new=4))

    def test_state_dict_is_the_checkpoint_without_a_copy(self):
        from safetensors.numpy import load_file

        sd = self.model.state_dict(as_torch=False)
        stored = load_file(self.model.path)
        self.assertEqual(set(sd), set(stored) & set(sd))
        for name, array in sd.items():
            np.testing.assert_array_equal(array, stored[name], err_msg=name)
        # A view: writing through it changes the model's logits.
        before = self.model.forward(self.tokens)
        torch_sd = self.model.state_dict()
        saved = torch_sd["final_norm.weight"].clone()
        torch_sd["final_norm.weight"].mul_(2.0)
        self.assertFalse(np.array_equal(before, self.model.forward(self.tokens)))
        torch_sd["final_norm.weight"].copy_(saved)
        np.testing.assert_array_equal(before, self.model.forward(self.tokens))

    def test_eval_batches_give_the_summary_metric(self):
        # copy_acc recomputed from Model.forward on the held-out batches equals the trainer's final evaluation.
        hits = scored = 0.0
        for i in range(self.model.config["train"]["eval_batches"]):
            batch = self.model.eval_batch(i)
            predicted = self.model.forward(batch["tokens"]).argmax(-1)
            hits += float(((predicted == batch["targets"]) * batch["score_mask"]).sum())
            scored += float(batch["score_mask"].sum())
        self.assertAlmostEqual(hits / scored, self.trained.summary["eval"]["copy_acc"], places=12)
        self.assertEqual(self.model.decode([0])[0], self.model._core.token_text(0))
        with self.assertRaises(canonlab.Error) as caught:
            self.model.eval_batch(10**6)
        self.assertIn("held-out batches", str(caught.exception))

    def test_bad_tokens_are_refused_with_the_range(self):
        with self.assertRaises(canonlab.Error) as caught:
            self.model.forward([[0, self.model.vocab_size]])
        self.assertIn(f"outside the model's vocabulary [0, {self.model.vocab_size})", str(caught.exception))
        with self.assertRaises(canonlab.Error):
            self.model.forward(np.zeros((2, 2, 2), dtype=np.int64))
        with self.assertRaises(canonlab.Error) as caught:
            canonlab.Model.load(WORK / "no-such-run")
        self.assertIn("no-such-run", str(caught.exception))


class HuggingFaceFromPython(unittest.TestCase):
    """canonlab.export_hf / import_hf (the CLI's export and import-hf, tests/python/test_hf.py tests them in depth):
    a Llama-shaped run goes to transformers and back with the same logits and bits; a NoPE model is refused."""

    def test_export_then_import(self):
        run_dir, hf_dir, back_dir = WORK / "hf-run", WORK / "hf-out", WORK / "hf-back"
        for d in (run_dir, hf_dir, back_dir):
            shutil.rmtree(d, ignore_errors=True)
        run = canonlab.train(CONFIG, dict(SHORT, **{"model.mlp.kind": "swiglu"}), out=run_dir)
        self.assertEqual(canonlab.export_hf(run, hf_dir), hf_dir)
        import torch
        from transformers import LlamaForCausalLM

        model = run.model()
        tokens = model.eval_batch(0)["tokens"][:4]
        hf = LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
        with torch.no_grad():
            theirs = hf(torch.from_numpy(tokens)).logits.numpy()
        self.assertLess(np.abs(theirs - model.forward(tokens)).max(), 1e-5)
        back = canonlab.import_hf(hf_dir, back_dir)
        np.testing.assert_array_equal(back.model().forward(tokens), model.forward(tokens))
        nope_dir = WORK / "hf-nope-run"
        shutil.rmtree(nope_dir, ignore_errors=True)
        nope = canonlab.train(CONFIG, dict(SHORT, **{"model.mlp.kind": "swiglu", "model.attention.position": "nope",
                                                     "train.steps": 2}), out=nope_dir)
        with self.assertRaises(canonlab.Error) as caught:
            canonlab.export_hf(nope, WORK / "hf-nope")
        self.assertFalse((WORK / "hf-nope" / "config.json").exists())
        self.assertIn("model.attention.position", str(caught.exception))


class SweepMatchesReport(unittest.TestCase):
    """canonlab.sweep runs the CLI's sweep; Sweep.comparisons gives the numbers of `canonlab report`."""

    def test_sweep_results_and_paired_statistics(self):
        spec = WORK / "tiny-sweep.yaml"
        out = WORK / "tiny-sweep"
        shutil.rmtree(out, ignore_errors=True)
        spec.write_text(f"""name: tiny
base: {CONFIG}
set: {{train.steps: 12, train.eval_every: 12, task.eval_samples: 32}}
axes:
  - name: pos
    key: model.attention.position
    values: [rope, nope]
  - name: seed
    key: train.seed
    values: [0, 1, 2]
report: {{metric: copy_acc, pivot: [seed, pos], compare: ["rope:nope"]}}
""")
        sweep = canonlab.sweep(spec, out=out, jobs=2)
        results = sweep.results
        self.assertEqual(len(results), 6)
        self.assertEqual(set(results["state"]), {"done"})
        self.assertEqual(sorted(set(results["pos"])), ["nope", "rope"])
        cmp = sweep.comparisons()
        self.assertEqual(len(cmp), 1)
        row = cmp.iloc[0]
        self.assertEqual((row["A"], row["B"], row["pairs"]), ("pos=rope", "pos=nope", 3))
        # The report's table row for the same pair: wins / losses / ties and the test name agree.
        cli("report", out, "--out", WORK / "tiny-report")
        report = (WORK / "tiny-report" / "report.md").read_text()
        line = next(l for l in report.splitlines() if l.startswith("| pos=rope | pos=nope |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        self.assertEqual(cells[5], f"{row['wins']} / {row['losses']} / {row['ties']}")
        self.assertEqual(cells[7], row["test"])
        rope = results[results["pos"] == "rope"].sort_values("seed")["copy_acc"].to_numpy()
        nope = results[results["pos"] == "nope"].sort_values("seed")["copy_acc"].to_numpy()
        self.assertAlmostEqual(row["mean_delta"], float(np.mean(nope - rope)), places=12)
        self.assertEqual(len(sweep.runs), 6)
        self.assertEqual(sweep.run("pos=rope__seed=0").config["model"]["attention"]["position"], "rope")
        # pack=3: rope and nope runs share their shapes, so two packs of 3; every run's numbers are the same.
        shutil.rmtree(WORK / "tiny-sweep-packed", ignore_errors=True)
        packed = canonlab.sweep(spec, out=WORK / "tiny-sweep-packed", jobs=2, pack=3).results
        self.assertEqual(set(packed["state"]), {"done"})
        for pos in ("rope", "nope"):
            alone = results[results["pos"] == pos].sort_values("seed")
            side_by_side = packed[packed["pos"] == pos].sort_values("seed")
            self.assertEqual(list(side_by_side["copy_acc"]), list(alone["copy_acc"]))
            self.assertEqual(list(side_by_side["final_train_loss"]), list(alone["final_train_loss"]))


class DataAndHelp(unittest.TestCase):
    def test_data_show_is_the_cli_output(self):
        self.assertEqual(canonlab.data.show("copy", {"task.n_symbols": 8}, n=2, seed=3),
                         cli("data", "show", "copy", "--set", "task.n_symbols=8", "--n", 2, "--seed", 3).stdout)
        with self.assertRaises(canonlab.Error) as caught:
            canonlab.data.show("nosuchtask")
        self.assertIn("nosuchtask", str(caught.exception))

    def test_resolve_config_and_dry_run(self):
        cfg = canonlab.resolve_config(CONFIG, {"model.n_layers": 3})
        self.assertEqual(cfg["model"]["n_layers"], 3)
        self.assertEqual(cfg["model"]["attention"]["position"], "rope")
        self.assertEqual(canonlab.resolve_config(cfg), cfg)  # a dict config round-trips
        self.assertIn("parameters", canonlab.dry_run(CONFIG))

    def test_deep_files_raise_instead_of_crashing(self):
        """A Lano grammar 80,000 levels deep once killed the interpreter (signal 11) in dry_run and train: the
        nesting is now refused at parse time, in process, with the file named (docs/engine.md, "Untrusted input")."""
        grammar = WORK / "deep-grammar.json"
        grammar.write_text('{"depth": ' + "[" * 80000 + "]" * 80000 + "}")
        lano = {"task.name": "lano", "task.lano.grammar": str(grammar)}
        for call in (lambda: canonlab.dry_run(CONFIG, lano), lambda: canonlab.resolve_config(CONFIG, lano),
                     lambda: canonlab.train(CONFIG, lano, out=WORK / "deep-grammar-run")):
            with self.assertRaises(canonlab.Error) as caught:
                call()
            self.assertIn(f"'{grammar}': JSON nests deeper than 8 levels at 'depth[", str(caught.exception))
            self.assertLess(len(str(caught.exception)), 400)
        self.assertFalse((WORK / "deep-grammar-run").exists())
        folder = WORK / "deep-hf"
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": ' + "[" * 80000 + "]" * 80000 + "}")
        with self.assertRaises(canonlab.Error) as caught:
            canonlab.import_hf(folder, WORK / "deep-hf-run")
        self.assertIn("config.json': JSON nests deeper than 64 levels at 'hidden_size[", str(caught.exception))
        self.assertFalse((WORK / "deep-hf-run").exists())

    def test_help_and_stubs(self):
        text = pydoc.render_doc(canonlab.Model, renderer=pydoc.plaintext)
        for word in ("attention", "hidden_states", "generate", "state_dict", "load"):
            self.assertIn(word, text)
        self.assertIn("canonlab.train", pydoc.render_doc(canonlab, renderer=pydoc.plaintext))
        package = Path(canonlab.__file__).parent
        self.assertTrue((package / "_core.pyi").is_file())
        self.assertTrue((package / "py.typed").is_file())


def main():
    global CLI, WORK
    parser = argparse.ArgumentParser()
    parser.add_argument("--canonlab", required=True)
    parser.add_argument("--workdir", required=True)
    args, rest = parser.parse_known_args()
    CLI, WORK = str(Path(args.canonlab).resolve()), Path(args.workdir).resolve()
    WORK.mkdir(parents=True, exist_ok=True)
    os.chdir(WORK)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
