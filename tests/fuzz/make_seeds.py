#!/usr/bin/env python3
"""Seed inputs for the fuzz targets that are easier to generate than to write by hand.

  make_seeds.py committed tests/fuzz/corpus    the small generated seeds that are committed (safetensors files,
                                               checkpoint-metadata JSON variants, an exponential grammar,
                                               Hugging Face folders for hf_folder);
                                               rerun it after changing this file
  make_seeds.py large DIR                      regression inputs too big to commit (deep nesting), which
                                               scripts/fuzz.sh writes into its build directory and runs once
                                               before fuzzing

Both write DIR/<target>/<name> and print nothing on success. Only the standard library is used.
"""
import json
import pathlib
import struct
import sys

HERE = pathlib.Path(__file__).resolve().parent


def write(out, target, name, data):
    path = out / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None, pad=True):
    """The safetensors layout without canonlab's checksums: tensors = [(name, dtype, shape, raw bytes)]."""
    header, offset, buffer = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        buffer += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + buffer


def raw_safetensors(header, buffer):
    """A header written as given (offsets included), padded, then the buffer."""
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + buffer


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


def real_checkpoint_config():
    """The canonlab.config metadata of the committed checkpoint seed (a real training run's)."""
    raw = (HERE / "corpus/safetensors/checkpoint-model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n])["__metadata__"]["canonlab.config"]


def committed(out):
    # safetensors: valid files of every dtype, then one defect each.
    write(out, "safetensors", "gen-f32-matrix.safetensors",
          safetensors([("w", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6))], {"format": "pt"}))
    write(out, "safetensors", "gen-all-dtypes.safetensors", safetensors([
        ("a", "F64", [2], struct.pack("<2d", 0.5, -1e300)),
        ("b", "I32", [1, 1, 2], struct.pack("<2i", -7, 2**31 - 1)),
        ("c", "I64", [], struct.pack("<q", -(2**63))),
        ("d", "F32", [0, 4], b""),
    ]))
    write(out, "safetensors", "gen-unpadded-no-metadata.safetensors",
          safetensors([("x", "F32", [1], f32(3.5))], pad=False))
    config = real_checkpoint_config()
    write(out, "safetensors", "gen-config-metadata.safetensors",
          safetensors([("tok_emb.weight", "F32", [2, 2], f32(0, 1, 2, 3))],
                      {"canonlab.config": config, "canonlab.step": "4"}))
    write(out, "safetensors", "near-overlap.safetensors",
          raw_safetensors({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                           "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}, f32(1, 2)))
    write(out, "safetensors", "near-trailing-bytes.safetensors",
          safetensors([("x", "F32", [1], f32(1))]) + b"tail")
    write(out, "safetensors", "near-header-too-long.safetensors", struct.pack("<Q", 2**40) + b"{}      ")
    write(out, "safetensors", "near-bf16.safetensors", safetensors([("x", "BF16", [2], b"\0\0\0\0")]))
    write(out, "safetensors", "near-shape-mismatch.safetensors", safetensors([("x", "F32", [3], f32(1, 2))]))
    write(out, "safetensors", "near-huge-shape.safetensors",
          safetensors([("x", "F32", [2**62, 2**62, 0], b"")]))
    write(out, "safetensors", "near-checksum-mismatch.safetensors",
          safetensors([("x", "F32", [1], f32(1))],
                      {"canonlab.data_checksum": "0123456789abcdef", "canonlab.checksum_algo": "xxh64"}))
    write(out, "safetensors", "near-nul-in-header.safetensors", struct.pack("<Q", 8) + b"{}\0 junk")
    write(out, "safetensors", "near-bad-config-metadata.safetensors",
          safetensors([], {"canonlab.config": '{"model": {"d_model": "64"}, "train": [1, 2]'}))

    # checkpoint_json: the real config, then the defects a damaged or hand-edited checkpoint could carry.
    write(out, "checkpoint_json", "real-config.json", config)
    real = json.loads(config)
    write(out, "checkpoint_json", "minimal.json", json.dumps({"task": {"name": "copy", "vocab": 8, "n_symbols": 3}}))

    def variant(name, edit):
        doc = json.loads(config)
        edit(doc)
        write(out, "checkpoint_json", name, json.dumps(doc))

    variant("near-string-for-int.json", lambda d: d["model"].update(d_model="64"))
    variant("near-float-for-int.json", lambda d: d["model"].update(n_layers=2.5, n_heads=1e30))
    variant("near-integral-float.json", lambda d: d["model"].update(n_layers=1.0))
    variant("near-unknown-key.json", lambda d: d["model"].update(atention={"position": "rope"}))
    variant("near-null-section.json", lambda d: d.update(train=None))
    variant("near-array-for-section.json", lambda d: d.update(probe=[1, 2, 3]))
    variant("near-big-ints.json", lambda d: d["train"].update(steps=2**64 - 1, seed=-(2**63), threads=2**31))
    variant("near-bool-for-string.json", lambda d: d["task"].update(name=True))
    variant("near-nested-list.json", lambda d: d["model"]["attention"]["key_shift"].update(layers=[[0], [1, [2]]]))
    write(out, "checkpoint_json", "near-not-an-object.json", json.dumps([real]))
    write(out, "checkpoint_json", "near-truncated.json", config[: len(config) // 2])

    # grammar: every level has one symbol with the rule [0, 0], so a sentence of depth 30 has 2^30 tokens.
    depth = 30
    grammar = {"depth": depth, "sizes": [1] * (depth + 1), "idx": [[depth + 1 - d] for d in range(depth + 1)],
               "all": [[{"id": depth + 1 - d, "children": [[0, 0]]}] for d in range(depth)] +
                      [[{"id": 1, "children": None}]]}
    write(out, "grammar", "regress-exponential-sentences.json", json.dumps(grammar))

    hf_folder_seeds(out)


HF_MARKER = b"\n==>\n"


def hf_input(config, header_tensors=None, index=None, data=None, header_text=None):
    """An hf_folder input: config.json ==> index ==> safetensors header ==> data (tests/fuzz/hf_folder.cpp)."""
    if header_text is None:
        header, offset, buffer = {}, 0, b""
        for name, dtype, shape in header_tensors or []:
            n = 1
            for d in shape:
                n *= d
            raw = bytes(n * (4 if dtype == "F32" else 2))
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
            offset += len(raw)
            buffer += raw
        header_text = json.dumps(header, separators=(",", ":"))
        data = buffer if data is None else data
    parts = [config if isinstance(config, str) else json.dumps(config),
             "" if index is None else (index if isinstance(index, str) else json.dumps(index)), header_text]
    return HF_MARKER.join(p.encode() for p in parts) + HF_MARKER + (data or b"")


def llama_tensors(d, layers, ffn, vocab, tied=False, dtype="F32"):
    t = [("model.embed_tokens.weight", dtype, [vocab, d]), ("model.norm.weight", dtype, [d])]
    for i in range(layers):
        p = f"model.layers.{i}."
        t += [(p + f"self_attn.{x}_proj.weight", dtype, [d, d]) for x in "qkvo"]
        t += [(p + "mlp.gate_proj.weight", dtype, [ffn, d]), (p + "mlp.up_proj.weight", dtype, [ffn, d]),
              (p + "mlp.down_proj.weight", dtype, [d, ffn]), (p + "input_layernorm.weight", dtype, [d]),
              (p + "post_attention_layernorm.weight", dtype, [d])]
    if not tied:
        t.append(("lm_head.weight", dtype, [vocab, d]))
    return t


def hf_folder_seeds(out):
    llama = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
             "vocab_size": 10, "intermediate_size": 16, "max_position_embeddings": 32, "tie_word_embeddings": False,
             "rope_theta": 10000.0, "rms_norm_eps": 1e-6}
    tensors = llama_tensors(8, 1, 16, 10)
    write(out, "hf_folder", "gen-llama.bin", hf_input(llama, tensors))
    write(out, "hf_folder", "gen-llama-bf16-tied.bin",
          hf_input(dict(llama, tie_word_embeddings=True), llama_tensors(8, 1, 16, 10, tied=True, dtype="BF16")))
    index = {"metadata": {}, "weight_map": {name: "model-00001-of-00001.safetensors" for name, _, _ in tensors}}
    write(out, "hf_folder", "gen-llama-sharded.bin", hf_input(llama, tensors, index=index))
    canon = dict(llama, model_type="LlamaCanon", canon_set="ABCD", canon_residual=True, canon_kernel=4,
                 rope_dim=2, partial_rotary_factor=0.5, intermediate_size=None, rope_parameters={"rope_type": "default"})
    write(out, "hf_folder", "gen-llama-canon.bin", hf_input(canon, tensors))
    base = {"hidden_size": 16, "num_hidden_layers": 1, "vocab_size": 10, "max_position_embeddings": 32}
    write(out, "hf_folder", "gen-gla.bin", hf_input(dict(base, model_type="GLACanon", num_heads=2, use_short_conv=True,
                                                         canon_set="AC", hidden_ratio=4), []))
    write(out, "hf_folder", "gen-gdn.bin", hf_input(dict(base, model_type="GatedDeltaNetCanon", num_heads=2, head_dim=8,
                                                         expand_v=2, canon_set="ABCD"), []))
    write(out, "hf_folder", "gen-mamba2.bin", hf_input(dict(base, model_type="Mamba2Canon", num_heads=4, head_dim=8,
                                                            expand=2, n_groups=1, state_size=16,
                                                            residual_in_fp32=False, mlp_type="mlp10"), []))
    # One defect each: the sizes that overflowed int, out-of-range values, damaged headers and indexes.
    write(out, "hf_folder", "near-hidden-size-1e9.bin", hf_input(dict(llama, hidden_size=10**9, num_attention_heads=1), []))
    write(out, "hf_folder", "near-canon-null-intermediate-huge.bin",
          hf_input(dict(canon, hidden_size=1_000_000_000 - 1, num_attention_heads=1), []))
    write(out, "hf_folder", "near-gla-hidden-ratio-huge.bin",
          hf_input(dict(base, model_type="GLACanon", num_heads=2, use_short_conv=True, hidden_ratio=10**9), []))
    write(out, "hf_folder", "near-gdn-head-dim-huge.bin",
          hf_input(dict(base, model_type="GatedDeltaNetCanon", num_heads=16384, head_dim=10**9, expand_v=10**9), []))
    write(out, "hf_folder", "near-mamba2-heads-huge.bin",
          hf_input(dict(base, model_type="Mamba2Canon", num_heads=10**9, head_dim=10**9, expand=10**9), []))
    write(out, "hf_folder", "near-long-string.bin", hf_input(dict(llama, hidden_act="x" * 20000), tensors))
    write(out, "hf_folder", "near-header-huge-shape.bin",
          hf_input(llama, header_text='{"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}}',
                   data=bytes(4)))
    write(out, "hf_folder", "near-header-offsets-past-end.bin",
          hf_input(llama, header_text='{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', data=bytes(4)))
    write(out, "hf_folder", "near-index-not-a-string.bin",
          hf_input(llama, tensors, index={"weight_map": {"model.norm.weight": [1, [2]]}}))
    write(out, "hf_folder", "near-index-path-escape.bin",
          hf_input(llama, tensors, index={"weight_map": {"model.norm.weight": "../x.safetensors"}}))
    # Nesting just past the limits (64 for config.json and the index, 3 for a header); the 80,000-deep versions of the
    # first findings are the large inputs below.
    nest = lambda n: "[" * n + "]" * n
    write(out, "hf_folder", "regress-deep-config-value.bin",
          hf_input('{"model_type":"llama","hidden_size":' + nest(70) + "}", tensors))
    write(out, "hf_folder", "regress-deep-header-shape.bin",
          hf_input(llama, header_text='{"w":{"dtype":"F32","shape":' + nest(3) + ',"data_offsets":[0,0]}}', data=b""))
    write(out, "hf_folder", "regress-deep-weight-map.bin",
          hf_input(llama, tensors, index='{"weight_map":{"model.norm.weight":' + nest(70) + "}}"))
    write(out, "grammar", "regress-deep-depth-value.json", '{"depth":' + nest(70) + "}")


def large(out):
    deep = 200_000
    write(out, "yaml_config", "regress-deep-flow-open.yaml", "[" * deep)
    write(out, "yaml_config", "regress-deep-flow-closed.yaml", "train: {decay_on: " + "[" * deep + "]" * deep + "}")
    write(out, "yaml_config", "regress-deep-block.yaml", "".join(" " * i + "- \n" for i in range(0, 4000)))
    write(out, "sweep", "regress-deep-values.yaml",
          "base: ../demo.yaml\naxes:\n  - key: seed\n    values: [" + "[" * deep + "]" * deep + "]\n")
    write(out, "sweep", "regress-deep-report.yaml",
          "base: ../demo.yaml\naxes: [{key: seed, values: [0]}]\nreport: {a: " + "[" * deep + "]" * deep + "}\n")
    for target in ("checkpoint_json", "grammar"):
        write(out, target, "regress-deep-array.json", "[" * deep + "]" * deep)
        write(out, target, "regress-deep-object.json", '{"model":' * deep + "1" + "}" * deep)
        write(out, target, "regress-deep-open.json", "[" * deep)
    header = ('{"x":' * deep + "1" + "}" * deep).encode()
    write(out, "safetensors", "regress-deep-header.safetensors", struct.pack("<Q", len(header)) + header)
    config = '{"model":' * deep + "1" + "}" * deep
    write(out, "safetensors", "regress-deep-config-metadata.safetensors",
          safetensors([], {"canonlab.config": config}))
    # The findings of the untrusted-input review: about 80,000 levels (160 KB) in a value that a message once dumped.
    nest = "[" * 80_000 + "]" * 80_000
    write(out, "grammar", "regress-deep-depth-value.json", '{"depth":' + nest + "}")
    write(out, "grammar", "regress-deep-all.json", '{"depth":1,"sizes":[1,1],"idx":[[2],[1]],"all":' + nest + "}")
    tensors = llama_tensors(8, 1, 16, 10)
    llama = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
             "vocab_size": 10, "intermediate_size": 16}
    write(out, "hf_folder", "regress-deep-hidden-size.bin", hf_input('{"model_type":"llama","hidden_size":' + nest + "}"))
    write(out, "hf_folder", "regress-deep-rope-parameters.bin",
          hf_input(json.dumps(llama)[:-1] + ',"rope_parameters":{"rope_type":' + nest + "}}", tensors))
    write(out, "hf_folder", "regress-deep-header-entry.bin", hf_input(llama, header_text='{"w":' + nest + "}"))
    write(out, "hf_folder", "regress-deep-header-shape.bin",
          hf_input(llama, header_text='{"w":{"dtype":"F32","shape":' + nest + ',"data_offsets":[0,0]}}'))
    write(out, "hf_folder", "regress-deep-weight-map.bin",
          hf_input(llama, tensors, index='{"weight_map":{"model.norm.weight":' + nest + "}}"))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("committed", "large"):
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[2])
    (committed if sys.argv[1] == "committed" else large)(out)


if __name__ == "__main__":
    main()
