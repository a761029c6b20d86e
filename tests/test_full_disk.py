"""A full disk (issue 51, root cause 6): every command names the file it could not write and the fix, exits 2
without a traceback, and leaves what was there byte for byte as it was, with no temporary file.

Each case runs the command in a private mount namespace (``unshare -rm``) on a small tmpfs mounted inside the test's
own temporary directory, at a ladder of sizes, so that the disk fills at each of the command's writes in turn (the
run record Hydra writes first, then each result file). Where a mount namespace cannot be made those tests are
skipped; the plot and study-lock tests need none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli
from sim_helpers import write_first_requests

DRIVER = textwrap.dedent(
    """
    import hashlib, json, os, shutil, subprocess, sys
    from pathlib import Path

    disk, cases = Path(sys.argv[1]), json.loads(sys.argv[2])

    def files():
        return {str(p.relative_to(disk)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(disk.rglob("*")) if p.is_file()}

    out = []
    for case in cases:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={case['kb']}k", "tmpfs", str(disk)], check=True)
        for src, dst in case["setup"]:
            (disk / dst).parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(src, disk / dst) if Path(src).is_dir() else shutil.copyfile(src, disk / dst)
        before = files()
        args = [a.replace("{disk}", str(disk)) for a in case["args"]]
        env = {**os.environ, "HOBBIT_CACHE": case["cache"]}
        r = subprocess.run([sys.executable, "-m", "hobbit", *args], capture_output=True, text=True, env=env, cwd=disk)
        out.append({**case, "rc": r.returncode, "err": r.stderr, "before": before, "after": files()})
        subprocess.run(["umount", str(disk)], check=True)
    print(json.dumps(out))
    """
)


def _namespaces() -> bool:
    if not shutil.which("unshare") or sys.platform != "linux":
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return probe.returncode == 0


namespaces = pytest.mark.skipif(not _namespaces(), reason="no private mount namespace here (unshare -rm)")


def _run(tmp_path: Path, cases: list[dict]) -> list[dict]:
    disk = tmp_path / "disk"
    disk.mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run(
        ["unshare", "-rm", sys.executable, str(driver), str(disk), json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _check(result: dict, disk: Path) -> str | None:
    """The contract for one run on a full disk; returns the file it named (None when the run succeeded)."""
    where = f"{result['args']} at {result['kb']} KiB"
    err, before, after = result["err"], result["before"], result["after"]
    assert result["rc"] in (0, 2), f"{where}: exit {result['rc']}\n{err}"
    assert "Traceback" not in err, f"{where}:\n{err}"
    leftovers = [f for f in after if Path(f).name.startswith(".") and f.endswith(".tmp") or f.endswith(".json.tmp")]
    assert not leftovers, f"{where}: temporary files left: {leftovers}"
    if result["rc"] == 0:
        return None
    lines = [ln for ln in err.splitlines() if ln.startswith("hobbit: error: ")]
    assert lines, f"{where}: no error line\n{err}"
    named = lines[0].removeprefix("hobbit: error: ").split(": No space left on device")[0]
    assert named.startswith(str(disk) + "/"), f"{where}: names {named}, not a file on the full disk"
    assert ": No space left on device (fix: free space there" in lines[0], lines[0]
    assert "files already there were kept as they were" in lines[0]
    changed = [f for f, digest in before.items() if after.get(f) != digest]
    assert not changed, f"{where}: files that were there changed: {changed}"
    return Path(named).relative_to(disk).as_posix()


SIZES = [20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 96]  # KiB; the earlier run takes 16 of them


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("inputs")
    trace = write_first_requests(d, 2)
    old = d / "old"  # an earlier run's results, in the directory the next run writes into
    assert run_cli(["sim", f"trace={trace}", "system.precision.t1=0.4", f"hydra.run.dir={old}", "use_cache=false"]) == 0
    shutil.rmtree(old / ".hydra")
    jsonl = d / "x.jsonl"
    assert run_cli(["export", f"trace={trace}", f"out={jsonl}"]) == 0
    return {"trace": trace, "old": old, "jsonl": jsonl, "dir": d}


@namespaces
def test_sim_on_a_full_disk_names_the_file_and_keeps_the_earlier_run(inputs, tmp_path):
    """At each size the disk fills at another write: the run's record, a table, results.json, the cache mark. The
    earlier run's three files stay together, byte for byte; a reader never sees one run's results.json beside
    another's tables. Cold (simulated) and warm (copied from the result cache)."""
    warm = tmp_path / "cache"
    trace = inputs["trace"]
    sim = ["sim", f"trace={trace}", "hydra.run.dir={disk}/run"]
    cases = [{"kb": kb, "setup": [[str(inputs["old"]), "run"]], "args": [*sim, "use_cache=false"], "cache": str(warm)}
             for kb in SIZES]  # fmt: skip
    cases += [{"kb": kb, "setup": [[str(inputs["old"]), "run"]], "args": sim, "cache": str(warm)} for kb in SIZES]
    assert run_cli(["sim", f"trace={trace}", f"hydra.run.dir={tmp_path / 'prime'}", f"cache_dir={warm}"]) == 0
    named = set()
    for r in _run(tmp_path, cases):
        named.add(_check(r, tmp_path / "disk"))
        if r["rc"] == 0:
            digests = {f: r["after"][f"run/{f}"] for f in ("results.json", "passes.parquet", "layers.parquet")}
            assert all(digests[f] != r["before"][f"run/{f}"] for f in digests), "a mix of two runs' files"
    assert None in named, "the largest disk should have held the run"
    assert "run/passes.parquet" in named and any(n and n.startswith("run/.hydra/") for n in named), named
    assert any(n and n.endswith(("results.json", ".cached", "layers.parquet")) for n in named), named


@namespaces
def test_writers_of_traces_studies_reports_and_sweeps_on_a_full_disk(inputs, tmp_path):
    """convert over an existing trace, export, tune's study, report's tables and plots, a sweep's own files."""
    trace, cache = inputs["trace"], str(tmp_path / "cache")
    cases = [
        {"kb": kb, "setup": [[str(trace), "t.parquet"]], "args": ["convert", f"in={inputs['jsonl']}", "out={disk}/t.parquet"]}
        for kb in (280, 360, 440)
    ]  # fmt: skip
    cases += [{"kb": 8, "setup": [], "args": ["export", f"trace={trace}", "out={disk}/x.jsonl"]}]
    cases += [
        {"kb": kb, "setup": [], "args": ["tune", f"trace={trace}", "trials=3", "hydra.run.dir={disk}/t"]}
        for kb in (16, 96, 144)
    ]
    cases += [{"kb": kb, "setup": [[str(inputs["old"]), "r"]], "args": ["report", "dir={disk}/r"]} for kb in (28, 60)]
    sweep = [
        "sim",
        f"trace={trace}",
        "system.precision.t1=0.3,0.6",
        "-m",
        "hydra.sweep.dir={disk}/sw",
        "use_cache=false",
    ]
    cases += [{"kb": kb, "setup": [], "args": sweep} for kb in (8, 24, 48)]
    for c in cases:
        c["cache"] = cache
    named = {}
    for r in _run(tmp_path, cases):
        named.setdefault(r["args"][0], set()).add(_check(r, tmp_path / "disk"))
    assert "t.parquet" in named["convert"] and "x.jsonl" in named["export"], named
    assert "t/study.db" in named["tune"], named
    assert any(n and n.startswith("r/report/") for n in named["report"]), named
    assert any(n and n.startswith("sw/.chunks/") for n in named["sim"]), named


def test_a_plot_that_fails_leaves_neither_image(tmp_path, monkeypatch):
    """The PNG and SVG of a plot are written together: a failure drawing either leaves neither, and no temporary
    file (a full disk, or Ctrl-C, mid-plot)."""
    from hobbit.analysis import plots

    plt = plots.pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    real = fig.savefig

    def savefig(fname, *, format, **kw):
        real(fname, format=format, **kw)
        if format == "svg":
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(fig, "savefig", savefig)
    with pytest.raises(OSError) as exc:
        plots.save(fig, tmp_path, "p")
    assert exc.value.filename == str(tmp_path / "p.svg")
    assert list(tmp_path.iterdir()) == []


def test_two_tune_runs_creating_one_study_at_once(tmp_path):
    """Four processes opening one new study at the same moment: each opens it (a lock around the creation of
    Optuna's tables; without it, "table studies already exists" or an IntegrityError for some)."""
    script = textwrap.dedent(
        """
        import multiprocessing as mp, sys
        from pathlib import Path
        from hobbit.sim.tune import TuneConfig, open_study

        def go(path, barrier, q):
            barrier.wait(timeout=60)
            try:
                open_study(TuneConfig(), Path(path))
                q.put("ok")
            except Exception as exc:
                q.put(f"{type(exc).__name__}: {exc}"[:300])

        if __name__ == "__main__":
            ctx = mp.get_context("fork")  # forked from a process that has imported optuna: all start at once
            bad = []
            for r in range(4):
                b, q = ctx.Barrier(4), ctx.Queue()
                ps = [ctx.Process(target=go, args=(f"{sys.argv[1]}/s{r}.db", b, q)) for _ in range(4)]
                [p.start() for p in ps]
                got = [q.get(timeout=120) for _ in ps]
                [p.join() for p in ps]
                bad += [g for g in got if g != "ok"]
            print(bad)
        """
    )
    driver = tmp_path / "race.py"
    driver.write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run(
        [sys.executable, str(driver), str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout
    assert sorted(p.name for p in tmp_path.glob("s*.db")) == ["s0.db", "s1.db", "s2.db", "s3.db"]
