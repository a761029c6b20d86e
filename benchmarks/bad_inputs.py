"""A probe of bad input: what a careless or hostile user gives the commands, and whether each case behaves.

A case *behaves* when the command
- exits 2 with one ``hobbit: error: ...`` line and no traceback (a case expected to be refused), or exits 0 (a case
  that is odd but valid: a name with spaces, quotes or non-ASCII letters);
- ends within its time limit (a FIFO or a device as input must not block it);
- leaves every file that was there byte for byte as it was (sha256), and no hidden temporary file.

Each case runs ``python -m hobbit ...`` in a directory of its own, holding fresh copies of the fixtures its
arguments name: ``{trace}`` (a valid two-request trace), ``{jsonl}`` (the same as JSONL), ``{empty}``, ``{binary}``,
``{truncated}`` (the trace cut in half), ``{text}`` (plain text), ``{csv}``, ``{yaml}``, ``{dir}`` (an empty
directory), ``{fifo}``, ``{loop}`` (a symlink loop), ``{link}`` (a symlink to ``{trace}``), ``{wrongtrace}`` (a
Parquet file of another schema), ``{badyaml}`` (a hardware YAML with a string where a number goes).

    python benchmarks/bad_inputs.py                 # the built-in cases
    python benchmarks/bad_inputs.py --cases more.jsonl   # and others: {"name", "args", "expect": "refuse"|"ok"}
    python benchmarks/bad_inputs.py --only convert  # the cases whose name starts so

It ends with ``cases=<n> behaved=<m>``; each case that did not behave is printed with what went wrong.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hobbit.traces.io import read_trace, write_trace
from hobbit.traces.tiny import bundled_trace

R, OK = "refuse", "ok"
# name, arguments, expectation. Names start with the command; sweeps and Hydra's own flags included.
CASES: list[tuple[str, list[str], str]] = [
    # --- paths given to inputs
    ("trace-info missing", ["trace-info", "nope.parquet"], R),
    ("trace-info empty file", ["trace-info", "{empty}"], R),
    ("trace-info binary", ["trace-info", "{binary}"], R),
    ("trace-info truncated", ["trace-info", "{truncated}"], R),
    ("trace-info other schema", ["trace-info", "{wrongtrace}"], R),
    ("trace-info directory", ["trace-info", "{dir}"], R),
    ("trace-info fifo", ["trace-info", "{fifo}"], R),
    ("trace-info loop", ["trace-info", "{loop}"], R),
    ("trace-info text", ["trace-info", "{text}"], R),
    ("trace-info two paths", ["trace-info", "{trace}", "{trace}"], R),
    ("trace-info link", ["trace-info", "{link}"], OK),
    ("trace-info json", ["trace-info", "{trace}", "--json"], OK),
    ("trace-info max_layer_rows negative", ["trace-info", "{trace}", "max_layer_rows=-3"], R),
    ("trace-info unknown knob", ["trace-info", "{trace}", "jsn=true"], R),
    ("sim missing trace", ["sim", "trace=nope.parquet"], R),
    ("sim trace is csv", ["sim", "trace={csv}"], R),
    ("sim trace is jsonl", ["sim", "trace={jsonl}"], R),
    ("sim trace is dir", ["sim", "trace={dir}"], R),
    ("sim trace fifo", ["sim", "trace={fifo}"], R),
    ("sim trace truncated", ["sim", "trace={truncated}"], R),
    ("sim trace empty string", ["sim", "trace="], R),
    ("convert missing input", ["convert", "in=nope.jsonl", "out=o.parquet"], R),
    ("convert binary input", ["convert", "in={binary}", "out=o.parquet"], R),
    ("convert empty input", ["convert", "in={empty}", "out=o.parquet"], R),
    ("convert text as jsonl", ["convert", "in={text}", "out=o.parquet"], R),
    ("convert parquet as jsonl", ["convert", "in={trace}", "out=o.parquet"], R),
    ("convert csv as vllm", ["convert", "in={csv}", "format=vllm", "out=o.parquet"], R),
    ("convert jsonl as flame", ["convert", "in={jsonl}", "format=flame", "out=o.parquet"], R),
    ("convert jsonl as tec", ["convert", "in={jsonl}", "format=tec", "out=o.parquet"], R),
    ("convert jsonl as llama", ["convert", "in={jsonl}", "format=llamacpp", "out=o.parquet"], R),
    ("convert unknown format", ["convert", "in={jsonl}", "format=parquet", "out=o.parquet"], R),
    ("convert fifo input", ["convert", "in={fifo}", "out=o.parquet"], R),
    ("convert loop input", ["convert", "in={loop}", "out=o.parquet"], R),
    # --- paths given to outputs
    ("convert out is input", ["convert", "in={jsonl}", "out={jsonl}"], R),
    ("convert out is link to input", ["convert", "in={jsonl}", "out={linkjsonl}"], R),
    ("convert out is dir", ["convert", "in={jsonl}", "out={dir}"], R),
    ("convert out in missing dir", ["convert", "in={jsonl}", "out=missing/sub/o.parquet"], R),
    ("convert out under a file", ["convert", "in={jsonl}", "out={text}/o.parquet"], R),
    ("convert out fifo", ["convert", "in={jsonl}", "out={fifo}"], R),
    ("convert out loop", ["convert", "in={jsonl}", "out={loop}"], R),
    ("convert out existing trace", ["convert", "in={jsonl}", "out={trace}"], OK),
    ("convert out with spaces", ["convert", "in={jsonl}", "out=my trace.parquet"], OK),
    ("convert out unicode", ["convert", "in={jsonl}", "out=trace-Ωμ.parquet"], OK),
    ("convert out with quote", ["convert", "in={jsonl}", "out=it's.parquet"], OK),
    ("convert out with equals", ["convert", "in={jsonl}", "out=a=b.parquet"], OK),
    ("convert out long name", ["convert", "in={jsonl}", "out=" + "x" * 245 + ".parquet"], OK),
    ("convert out too long name", ["convert", "in={jsonl}", "out=" + "x" * 256 + ".parquet"], R),
    ("convert out empty", ["convert", "in={jsonl}", "out="], R),
    ("export out is trace", ["export", "trace={trace}", "out={trace}"], R),
    ("export unknown format", ["export", "trace={trace}", "format=xml", "out=o.xml"], R),
    ("export out dir", ["export", "trace={trace}", "out={dir}"], R),
    ("export missing out", ["export", "trace={trace}"], R),
    ("export tec", ["export", "trace={trace}", "format=tec", "out=o.tec"], OK),
    ("hardware out is spec", ["hardware", "spec={yaml}", "out={yaml}"], R),
    ("hardware bad spec", ["hardware", "spec={badyaml}", "out=h.yaml"], R),
    ("hardware binary spec", ["hardware", "spec={binary}", "out=h.yaml"], R),
    ("hardware unknown gpu", ["hardware", "gpu=rtx9999", "out=h.yaml"], R),
    ("hardware negative ram", ["hardware", "gpu=rtx4090", "ram=-64GB", "out=h.yaml"], R),
    ("hardware ram words", ["hardware", "gpu=rtx4090", "ram=lots", "out=h.yaml"], R),
    ("hardware pcie junk", ["hardware", "gpu=rtx4090", "pcie=gen9x16", "out=h.yaml"], R),
    ("hardware sockets zero", ["hardware", "gpu=rtx4090", "cpu=epyc-9654", "sockets=0", "out=h.yaml"], R),
    ("hardware nothing", ["hardware", "out=h.yaml"], R),
    # --- knobs
    ("sim unknown knob", ["sim", "trace={trace}", "sytem=hobbit"], R),
    ("sim unknown group option", ["sim", "trace={trace}", "system=nosuch"], R),
    ("sim unknown model", ["sim", "trace={trace}", "model=nosuch"], R),
    ("sim unknown hardware", ["sim", "trace={trace}", "hardware=nosuch"], R),
    ("sim t1 word", ["sim", "trace={trace}", "system.precision.t1=abc"], R),
    ("sim t1 nan", ["sim", "trace={trace}", "system.precision.t1=nan"], R),
    ("sim t1 inf", ["sim", "trace={trace}", "system.precision.t1=inf"], R),
    ("sim t1 above 1", ["sim", "trace={trace}", "system.precision.t1=1.5"], R),
    ("sim t1 negative", ["sim", "trace={trace}", "system.precision.t1=-0.1"], R),
    ("sim t1 list without -m", ["sim", "trace={trace}", "system.precision.t1=[0.3,0.6]"], R),
    ("sim link zero", ["sim", "trace={trace}", "hardware.link_gbps=0"], R),
    ("sim link negative", ["sim", "trace={trace}", "hardware.link_gbps=-16"], R),
    ("sim link huge", ["sim", "trace={trace}", "hardware.link_gbps=1e400"], R),
    ("sim vram string", ["sim", "trace={trace}", "hardware.gpu_mem_gb=24GB"], R),
    ("sim policy unknown", ["sim", "trace={trace}", "system.cache.policy=mru2"], R),
    ("sim weights negative", ["sim", "trace={trace}", "system.cache.multidim.w_lru=-1"], R),
    ("sim topology mismatch", ["sim", "trace={trace}", "model=qwen3-30b-a3b"], R),
    ("sim timeline backwards", ["sim", "trace={trace}", "timeline=true", "timeline_tokens=10:2"], R),
    ("sim timeline junk", ["sim", "trace={trace}", "timeline=true", "timeline_tokens=a:b"], R),
    ("sim plus key", ["sim", "trace={trace}", "+foo=1"], R),
    ("sim tilde key", ["sim", "trace={trace}", "~system"], R),
    ("sim quoted number", ["sim", "trace={trace}", "system.precision.t1='0.3'"], R),
    ("sim empty override", ["sim", "trace={trace}", "="], R),
    ("sim seed float", ["sim", "trace={trace}", "seed=1.5"], R),
    ("sim cache_dir file", ["sim", "trace={trace}", "cache_dir={text}"], OK),
    ("sim out_dir is file", ["sim", "trace={trace}", "out_dir={text}"], R),
    ("sim out_dir is trace dir", ["sim", "trace={trace}", "out_dir=."], OK),
    ("sim run dir is file", ["sim", "trace={trace}", "hydra.run.dir={text}"], R),
    ("sim flags junk", ["sim", "trace={trace}", "system=llama.cpp", "system.flags=--n-cpu-moe x"], R),
    ("sim flags unknown", ["sim", "trace={trace}", "system=llama.cpp", "system.flags=--no-such-flag"], R),
    # --- sweeps
    ("sim sweep bad middle value", ["sim", "trace={trace}", "system.precision.t1=0.3,abc,0.6", "-m"], R),
    ("sim sweep bad group option", ["sim", "trace={trace}", "system=hobbit,nosuch", "-m"], R),
    ("sim sweep unknown knob", ["sim", "trace={trace}", "sytem.precision.t1=0.3,0.6", "-m"], R),
    ("sim sweep range backwards", ["sim", "trace={trace}", "system.precision.t1=range(0.9,0.1,0.1)", "-m"], R),
    ("sim sweep -m in middle", ["sim", "system.precision.t1=0.3,0.6", "-m", "trace={trace}"], OK),
    (
        "sim sweep dir is file",
        ["sim", "trace={trace}", "system.precision.t1=0.3,0.6", "-m", "hydra.sweep.dir={text}"],
        R,
    ),
    (
        "sim sweep chunk zero",
        ["sim", "trace={trace}", "system.precision.t1=0.3,0.6", "-m", "hydra.sweeper.chunk_size=-1"],
        R,
    ),
    # --- other commands
    ("tune trials negative", ["tune", "trace={trace}", "trials=-1"], R),
    ("tune trials float", ["tune", "trace={trace}", "trials=2.5"], R),
    ("tune objective unknown", ["tune", "trace={trace}", "objective=fastest", "trials=1"], R),
    ("tune study is text", ["tune", "trace={trace}", "study={text}", "trials=1"], R),
    ("tune study is binary", ["tune", "trace={trace}", "study={binary}", "trials=1"], R),
    ("tune study is trace", ["tune", "trace={trace}", "study={trace}", "trials=1"], R),
    ("tune study is dir", ["tune", "trace={trace}", "study={dir}", "trials=1"], R),
    ("tune budget negative", ["tune", "trace={trace}", "quality_budget=-1", "trials=1"], R),
    ("compare profile missing", ["compare", "trace={trace}", "profile=nope.yaml", "tune_trials=0"], R),
    ("compare profile binary", ["compare", "trace={trace}", "profile={binary}", "tune_trials=0"], R),
    ("compare profile bad", ["compare", "trace={trace}", "profile={badyaml}", "tune_trials=0"], R),
    ("compare profile is trace", ["compare", "trace={trace}", "profile={trace}", "tune_trials=0"], R),
    ("compare systems unknown", ["compare", "trace={trace}", "systems=[nosuch]", "tune_trials=0"], R),
    ("plan unknown model", ["plan", "model=nosuch", "hardware=rtx4090-pcie4"], R),
    ("plan model file binary", ["plan", "model={binary}", "hardware=rtx4090-pcie4"], R),
    ("plan model gguf empty", ["plan", "model={emptygguf}", "hardware=rtx4090-pcie4"], R),
    ("plan context negative", ["plan", "model=mixtral-8x7b", "hardware=rtx4090-pcie4", "context=-1"], R),
    ("plan prompt zero", ["plan", "model=mixtral-8x7b", "hardware=rtx4090-pcie4", "prompt=0"], R),
    ("plan context words", ["plan", "model=mixtral-8x7b", "hardware=rtx4090-pcie4", "context=long"], R),
    ("plan ram junk", ["plan", "model=mixtral-8x7b", "gpu=rtx4090", "ram=64XB"], R),
    ("plan runtimes unknown", ["plan", "model=mixtral-8x7b", "hardware=rtx4090-pcie4", "runtimes=[vllm9]"], R),
    ("plan weights unknown", ["plan", "model=mixtral-8x7b", "hardware=rtx4090-pcie4", "weights=q9_z"], R),
    ("plan trace other model", ["plan", "model=qwen3-30b-a3b", "hardware=rtx4090-pcie4", "trace={trace}"], R),
    ("plan kv unknown", ["plan", "model=mixtral-8x7b", "hardware=rtx4090-pcie4", "kv_cache=q3"], R),
    ("report missing dir", ["report", "dir=nope"], R),
    ("report file", ["report", "dir={text}"], R),
    ("report empty dir", ["report", "dir={dir}"], R),
    ("report fifo", ["report", "dir={fifo}"], R),
    ("validate missing checkpoint", ["validate", "trace={trace}", "checkpoint=nope"], R),
    ("validate requests zero", ["validate", "trace={trace}", "requests=0"], R),
    ("validate requests too many", ["validate", "trace={trace}", "requests=50"], R),
    ("validate tuned is text", ["validate", "trace={trace}", "tuned={text}"], R),
    ("validate engine unknown", ["validate", "trace={trace}", "engine=warp"], R),
    ("calibrate name escape", ["calibrate", "name=../x"], R),
    ("calibrate name slash", ["calibrate", "name=a/b"], R),
    ("calibrate scale zero", ["calibrate", "scale=0"], R),
    ("calibrate device unknown", ["calibrate", "device=tpu"], R),
    ("calibrate statistic unknown", ["calibrate", "statistic=mode"], R),
    ("quality text binary", ["quality", "text={binary}"], R),
    ("quality text empty", ["quality", "text={empty}"], R),
    ("quality checkpoint file", ["quality", "checkpoint={text}"], R),
    ("quality group 7", ["quality", "group=7"], R),
    ("quality pair unknown", ["quality", "precision_pair=fp8-int1"], R),
    ("capture prompts binary", ["capture", "prompts={binary}", "out=t.parquet"], R),
    ("capture prompts empty", ["capture", "prompts={empty}", "out=t.parquet"], R),
    ("capture model not a checkpoint", ["capture", "model={dir}", "out=t.parquet"], R),
    ("capture model file", ["capture", "model={text}", "out=t.parquet"], R),
    ("capture out is prompts", ["capture", "prompts={text}", "out={text}"], R),
    ("capture lookahead negative", ["capture", "lookahead=-1", "out=t.parquet"], R),
    ("capture new tokens zero", ["capture", "max_new_tokens=0", "out=t.parquet"], R),
    ("capture dtype unknown", ["capture", "dtype=fp7", "out=t.parquet"], R),
    ("reproduce models unknown", ["reproduce", "models=[nosuch]"], R),
    ("reproduce tolerance negative", ["reproduce", "tolerance=-1"], R),
    ("demo max_prompts zero", ["demo", "max_prompts=0"], R),
    ("demo hardware unknown", ["demo", "hardware=nosuch"], R),
    # --- a second round: numbers at the edges, Hydra's own syntax and flags, odd but valid traces
    ("sim top_k above experts", ["sim", "trace={trace}", "model.top_k=100"], R),
    ("sim layers zero", ["sim", "trace={trace}", "model.num_layers=0"], R),
    ("sim high_fraction 2", ["sim", "trace={trace}", "system.cache.high_fraction=2"], R),
    ("sim vram misspelt", ["sim", "trace={trace}", "hardware.gpu_mem_gb=1e30"], R),
    ("sim link huge but finite", ["sim", "trace={trace}", "hardware.link_gbps=1e6"], OK),
    ("sim seed negative", ["sim", "trace={trace}", "seed=-1"], R),
    ("sim synthetic", ["sim", "trace=synthetic", "model=olmoe-1b-7b"], OK),
    ("sim syntax error", ["sim", "trace={trace}", "system.precision.t1=[0.3"], R),
    ("sim list without -m", ["sim", "trace={trace}", "system.precision.t1=0.3,0.6"], R),
    ("sim cfg job", ["sim", "trace={trace}", "--cfg", "job"], OK),
    ("sim info", ["sim", "--info", "searchpath"], OK),
    ("sim run dir empty", ["sim", "trace={trace}", "hydra.run.dir="], R),
    ("sim chdir", ["sim", "trace={trace}", "hydra.job.chdir=true"], OK),
    ("sim one-token trace", ["sim", "trace={onetoken}"], OK),
    ("sim trace link", ["sim", "trace={link}"], OK),
    ("sim profile_trace binary", ["sim", "trace={trace}", "profile_trace={binary}"], R),
    ("sim timeline", ["sim", "trace={trace}", "timeline=true", "timeline_tokens=0:4"], OK),
    ("sim timeline past the end", ["sim", "trace={trace}", "timeline=true", "timeline_tokens=5000:6000"], R),
    ("trace-info json word", ["trace-info", "{trace}", "json=maybe"], R),
    ("trace-info jsonl", ["trace-info", "{jsonl}"], R),
    ("trace-info one-token", ["trace-info", "{onetoken}"], OK),
    ("convert vllm empty dir", ["convert", "in={dir}", "format=vllm", "out=o.parquet"], R),
    ("convert layers negative", ["convert", "in={jsonl}", "num_layers=-1", "out=o.parquet"], R),
    ("convert top_k zero", ["convert", "in={jsonl}", "top_k=0", "out=o.parquet"], R),
    ("convert header only", ["convert", "in={headeronly}", "out=o.parquet"], R),
    ("convert warmup junk", ["convert", "in={jsonl}", "warmup_passes=some", "out=o.parquet"], R),
    ("export csv", ["export", "trace={trace}", "format=llamacpp_csv", "out=o.csv"], OK),
    ("export into dir", ["export", "trace={trace}", "out={dir}/o.jsonl"], OK),
    ("compare decode-less", ["compare", "trace={onetoken}", "tune_trials=0"], R),
    ("compare systems empty", ["compare", "trace={trace}", "systems=[]", "tune_trials=0"], OK),
    ("compare trials negative", ["compare", "trace={trace}", "tune_trials=-2"], R),
    ("tune one-token trace", ["tune", "trace={onetoken}", "trials=1"], R),
    ("validate jsonl trace", ["validate", "trace={jsonl}"], R),
    ("validate one-token trace", ["validate", "trace={onetoken}"], R),
    ("plan nothing fits", ["plan", "model=deepseek-v3", "gpu=rtx4060ti-16gb", "ram=8GB", "points=2"], OK),
    ("plan points one", ["plan", "model=mixtral-8x7b", "hardware=rtx4090-pcie4", "points=1"], R),
    ("plan gpu unknown", ["plan", "model=mixtral-8x7b", "gpu=rtx9999"], R),
    ("plan gpu and hardware", ["plan", "model=mixtral-8x7b", "gpu=rtx4090", "hardware=rtx4090-pcie4"], OK),
    ("plan cpu unknown", ["plan", "model=mixtral-8x7b", "gpu=rtx4090", "cpu=pentium-4"], R),
    ("plan ssd junk", ["plan", "model=mixtral-8x7b", "gpu=rtx4090", "ssd=fastdisk"], R),
    ("report broken run", ["report", "dir={brokenrun}"], R),
    ("hardware vram zero", ["hardware", "gpu=rtx4090", "vram=0GB", "out=h.yaml"], R),
    ("hardware ssd rate", ["hardware", "gpu=rtx4090", "ssd=7GB/s", "out=h.yaml"], OK),
    # --- a third round: converter inputs cut or twisted, paths with odd characters, flags mixed in
    ("convert jsonl nan weight", ["convert", "in={nanjsonl}", "out=o.parquet"], R),
    ("convert jsonl rows cut", ["convert", "in={cutjsonl}", "out=o.parquet"], R),
    ("convert jsonl crlf", ["convert", "in={crlfjsonl}", "out=o.parquet"], OK),
    ("convert jsonl bom", ["convert", "in={bomjsonl}", "out=o.parquet"], OK),
    ("convert csv cut", ["convert", "in={cutcsv}", "format=llamacpp", "out=o.parquet"], R),
    ("convert tec garbage", ["convert", "in={binary}", "format=tec", "out=o.parquet"], R),
    ("convert vllm garbage dir", ["convert", "in={garbagedir}", "format=vllm", "out=o.parquet"], R),
    ("convert flame text", ["convert", "in={text}", "format=flame", "out=o.parquet"], R),
    ("convert out newline name", ["convert", "in={jsonl}", "out=a\nb.parquet"], OK),
    ("convert out dot", ["convert", "in={jsonl}", "out=."], R),
    ("convert out dotdot", ["convert", "in={jsonl}", "out=.."], R),
    ("convert out root", ["convert", "in={jsonl}", "out=/"], R),
    ("convert out proc", ["convert", "in={jsonl}", "out=/proc/self/status"], R),
    ("convert out dev null", ["convert", "in={jsonl}", "out=/dev/null"], R),
    ("convert in dev zero", ["convert", "in=/dev/zero", "out=o.parquet"], R),
    ("convert in proc", ["convert", "in=/proc/self/status", "out=o.parquet"], R),
    ("trace-info dev zero", ["trace-info", "/dev/zero"], R),
    ("trace-info tilde missing", ["trace-info", "~/no-such-trace.parquet"], R),
    ("trace-info parquet missing column", ["trace-info", "{nocolumn}"], R),
    ("sim trace missing column", ["sim", "trace={nocolumn}"], R),
    ("sim trace dev zero", ["sim", "trace=/dev/zero"], R),
    ("sim help with bad override", ["sim", "--help", "system.precision.t1=abc"], R),
    ("sim cfg with sweep", ["sim", "trace={trace}", "--cfg", "job", "system.precision.t1=0.3,0.6", "-m"], R),
    ("sim cfg mid-line", ["sim", "--cfg", "job", "trace={trace}"], OK),
    ("sim two -m", ["sim", "trace={trace}", "-m", "-m", "system.precision.t1=0.3"], OK),
    ("sim unknown flag", ["sim", "trace={trace}", "--fast"], R),
    ("sim key with space", ["sim", "trace={trace}", "system .precision.t1=0.3"], R),
    ("sim value unicode", ["sim", "trace={trace}", "system=hоbbit"], R),
    ("sim model as path missing", ["sim", "trace={trace}", "model=./nope.gguf"], R),
    ("sim hardware as path bad", ["sim", "trace={trace}", "hardware={badyaml}"], R),
    ("sim hardware as binary path", ["sim", "trace={trace}", "hardware={binary}"], R),
    ("export jsonl of one-token", ["export", "trace={onetoken}", "out=o.jsonl"], OK),
    ("export out proc", ["export", "trace={trace}", "out=/proc/version"], R),
    ("tune study in missing dir", ["tune", "trace={trace}", "study=nope/s.db", "trials=1"], R),
    ("tune study fifo", ["tune", "trace={trace}", "study={fifo}", "trials=1"], R),
    ("tune study empty file", ["tune", "trace={trace}", "study={empty}", "trials=1"], OK),
    ("compare profile empty", ["compare", "trace={trace}", "profile={empty}", "tune_trials=0"], R),
    ("compare profile dir", ["compare", "trace={trace}", "profile={dir}", "tune_trials=0"], R),
    ("plan model dir without config", ["plan", "model={dir}", "hardware=rtx4090-pcie4"], R),
    ("plan model json garbage", ["plan", "model={badjson}", "hardware=rtx4090-pcie4"], R),
    ("plan profile binary", ["plan", "model=mixtral-8x7b", "profile={binary}"], R),
    ("report dir is trace", ["report", "dir={trace}"], R),
    ("hardware spec empty", ["hardware", "spec={empty}", "out=h.yaml"], R),
    ("hardware spec list", ["hardware", "spec={listyaml}", "out=h.yaml"], R),
    ("hardware out proc", ["hardware", "gpu=rtx4090", "out=/proc/version"], R),
    ("validate profile binary", ["validate", "trace={trace}", "profile={binary}"], R),
    ("quality text dir", ["quality", "text={dir}"], R),
    ("quality window zero", ["quality", "context_length=0"], R),
    ("capture prompts fifo", ["capture", "prompts={fifo}", "out=t.parquet"], R),
    ("capture prompts dev zero", ["capture", "prompts=/dev/zero", "out=t.parquet"], R),
    ("capture prompts bad jsonl", ["capture", "prompts={badjson}", "out=t.parquet"], R),
    ("unknown command", ["simulate", "trace={trace}"], R),
    ("no command", [], R),
]


def fixtures(d: Path, trace: Path, jsonl: Path) -> None:
    """The files a case's arguments may name, fresh in ``d``."""
    shutil.copyfile(trace, d / "trace.parquet")
    shutil.copyfile(jsonl, d / "trace.jsonl")
    (d / "empty.txt").write_bytes(b"")
    (d / "binary.bin").write_bytes(bytes(range(256)) * 64)
    data = trace.read_bytes()
    (d / "truncated.parquet").write_bytes(data[: len(data) // 2])
    (d / "text.txt").write_text("def f():\n    return 1\n")
    (d / "data.csv").write_text("a,b\n1,2\n")
    (d / "spec.yaml").write_text("gpu: rtx4090\nram: 64GB\n")
    (d / "bad.yaml").write_text("name: x\nlink_gbps: fast\n")
    (d / "empty.gguf").write_bytes(b"GGUF")
    (d / "empty_dir").mkdir()
    (d / "header_only.jsonl").write_text(jsonl.read_text().splitlines()[0] + "\n")
    run = d / "broken_run"
    run.mkdir()
    (run / "results.json").write_text("{")
    shutil.copyfile(trace.with_name("one_token.parquet"), d / "one_token.parquet")
    lines = jsonl.read_text().splitlines()
    row = json.loads(lines[1])
    row["gate_weights"] = [float("nan")] * len(row["gate_weights"])
    (d / "nan.jsonl").write_text("\n".join([lines[0], json.dumps(row), *lines[2:20]]) + "\n")
    (d / "cut.jsonl").write_text("\n".join(lines[:20]) + "\n" + lines[20][: len(lines[20]) // 2])
    (d / "crlf.jsonl").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    (d / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode())
    (d / "cut.csv").write_text("layer,token,expert\n0,0\n")
    (d / "garbage_dir").mkdir()
    (d / "garbage_dir" / "route.jsonl").write_bytes(bytes(range(256)))
    (d / "bad.json").write_text('{"model_type": ')
    (d / "list.yaml").write_text("- 1\n- 2\n")
    pq.write_table(pq.read_table(trace).drop(["layer"]), d / "no_column.parquet")
    os.mkfifo(d / "pipe")
    (d / "loop_a").symlink_to(d / "loop_b")
    (d / "loop_b").symlink_to(d / "loop_a")
    (d / "link.parquet").symlink_to(d / "trace.parquet")
    (d / "link.jsonl").symlink_to(d / "trace.jsonl")
    pq.write_table(pa.table({"x": [1, 2, 3]}), d / "other.parquet")


NAMES = {
    "trace": "trace.parquet",
    "jsonl": "trace.jsonl",
    "empty": "empty.txt",
    "binary": "binary.bin",
    "truncated": "truncated.parquet",
    "text": "text.txt",
    "csv": "data.csv",
    "yaml": "spec.yaml",
    "badyaml": "bad.yaml",
    "emptygguf": "empty.gguf",
    "dir": "empty_dir",
    "fifo": "pipe",
    "loop": "loop_a",
    "link": "link.parquet",
    "linkjsonl": "link.jsonl",
    "wrongtrace": "other.parquet",
    "headeronly": "header_only.jsonl",
    "brokenrun": "broken_run",
    "onetoken": "one_token.parquet",
    "nanjsonl": "nan.jsonl",
    "cutjsonl": "cut.jsonl",
    "crlfjsonl": "crlf.jsonl",
    "bomjsonl": "bom.jsonl",
    "cutcsv": "cut.csv",
    "garbagedir": "garbage_dir",
    "badjson": "bad.json",
    "listyaml": "list.yaml",
    "nocolumn": "no_column.parquet",
}


def _files(d: Path) -> dict[str, str]:
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_symlink() or not p.is_file():
            continue
        out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_case(case: tuple[str, list[str], str], base: Path, trace: Path, jsonl: Path, limit: float) -> tuple[str, str]:
    """('' or what went wrong, the case's name)."""
    name, args, expect = case
    d = base / f"case-{abs(hash(name)) % 10**10}"
    d.mkdir()
    fixtures(d, trace, jsonl)
    args = [a.format(**{k: str(d / v) for k, v in NAMES.items()}) if "{" in a else a for a in args]
    before = _files(d)
    env = {**os.environ, "HOBBIT_CACHE": str(base / "cache")}
    try:
        r = subprocess.run(
            [sys.executable, "-m", "hobbit", *args],
            cwd=d,
            check=False,
            capture_output=True,
            text=True,
            env=env,
            timeout=limit,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"did not end within {limit:.0f} s", name
    problems = []
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("hobbit: error:")]
    if "Traceback" in r.stderr:
        problems.append("traceback")
    if expect == R and r.returncode != 2:
        problems.append(f"exit {r.returncode}, not 2")
    if expect == OK and r.returncode != 0:
        problems.append(f"exit {r.returncode}, not 0")
    if r.returncode == 2 and len(errors) != 1:
        problems.append(f"{len(errors)} error lines")
    if r.returncode == 2 and sum(1 for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("paths:")) > 2:
        problems.append("more than the error line on stderr")
    after = _files(d)
    written = {  # what an odd but valid case was asked to write (an output, a study)
        str(Path(a.partition("=")[2]).relative_to(d)) for a in args if a.startswith(("out=", "study=")) and str(d) in a
    }
    changed = [f for f, h in before.items() if after.get(f) != h and not (expect == OK and f in written)]
    if changed:
        problems.append(f"changed or removed {changed}")
    temps = [f for f in after if Path(f).name.endswith(".tmp")]
    if temps:
        problems.append(f"temporary files left {temps}")
    if problems:
        tail = (errors[0] if errors else r.stderr.strip().splitlines()[-1:] or [""])[0][:200]
        return "; ".join(problems) + f" | {tail}", name
    return "", name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=Path, help="JSONL of more cases: {name, args, expect}")
    ap.add_argument("--only", default="", help="only the cases whose name starts with this")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--limit", type=float, default=120.0, help="seconds a case may take")
    a = ap.parse_args(argv)
    cases = list(CASES)
    if a.cases:
        for line in a.cases.read_text().splitlines():
            if line.strip():
                c = json.loads(line)
                cases.append((c["name"], c["args"], c.get("expect", R)))
    cases = [c for c in cases if c[0].startswith(a.only)]

    with tempfile.TemporaryDirectory(prefix="hobbit-probe-") as tmp:
        base = Path(tmp)
        whole = read_trace(bundled_trace())
        first2 = whole.arrays.take(np.flatnonzero(whole.arrays.request_id < 2))  # the bundled trace's first requests
        trace = write_trace(base / "first2.parquet", first2, whole.meta)
        first = whole.arrays.take(slice(0, whole.meta.model.num_layers))  # one prompt token: prefill only
        write_trace(base / "one_token.parquet", first, whole.meta)
        jsonl = base / "trace.jsonl"
        subprocess.run([sys.executable, "-m", "hobbit", "export", f"trace={trace}", f"out={jsonl}"], check=True,
                       capture_output=True)  # fmt: skip
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            results = list(pool.map(lambda c: run_case(c, base, trace, jsonl, a.limit), cases))
        bad = [(why, name) for why, name in results if why]
        for why, name in bad:
            print(f"MISBEHAVED {name}: {why}")
        print(f"cases={len(cases)} behaved={len(cases) - len(bad)} seconds={time.perf_counter() - start:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
