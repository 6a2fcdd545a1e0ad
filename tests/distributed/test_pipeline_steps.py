"""Equal steps: every consumer of a pipeline takes the same number of steps."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcio.distributed import RuntimeContext
from hpcio.errors import StepPlanError, UnequalStepsError
from hpcio.pipeline import Pipeline

SCRIPT = Path(__file__).with_name("mpi_pipeline_steps.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")


@pytest.mark.mpi
def test_four_ranks_take_equal_steps_under_gloo_all_reduce():
    """Each rank joins one all_reduce per step; a rank that ran out would hang the
    others, so the timeout (many times a normal run) turns a hang into a failure."""
    pytest.importorskip("torch")
    if MPIEXEC is None:
        pytest.fail("mpiexec not found: pip install mpich mpi4py (the [mpi] extra)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for var in [v for v in env if v.startswith(("SLURM_", "PMI_", "PMIX_"))]:
        del env[var]
    out = subprocess.run(
        [MPIEXEC, "-n", "4", sys.executable, "-m", "mpi4py", str(SCRIPT), "300"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    steps = dict(re.findall(r"^STEPS (\S+) (\[.*\])$", out.stdout, re.M))
    assert sorted(steps) == ["bucketed", "budget", "packed", "select", "select-budget"]
    for name, counts in steps.items():
        counts = ast.literal_eval(counts)
        assert len(set(counts)) == 1 and counts[0] > 0, (name, counts)
    assert ast.literal_eval(steps["select"]) == [10] * 4
    assert "DONE" in out.stdout


# --- in one process: consumers as explicit contexts ------------------------------------------
def tokens_of(sample):
    return {"id": sample["id"], "tokens": np.arange(len(sample["text"]), dtype=np.int64)}


def wrong_tokens(sample):
    return {"id": sample["id"], "tokens": np.arange(3, dtype=np.int64)}


def short(sample):
    return len(sample["text"]) < 10  # ids 0..99


def ctx(rank=0, world=1, **kw):
    return RuntimeContext(rank=rank, world_size=world, **kw)


@pytest.fixture
def texts(make_dataset):
    """Samples whose texts run from 8 to 10 characters ("sample 0" .. "sample 299")."""
    return make_dataset(300)


PLANNED = {
    "budget": lambda p: p.map(tokens_of).batch(max_tokens=50, token_field="tokens", lengths="text"),
    "bytes": lambda p: p.batch(max_bytes=60, lengths="text"),
    "bucketed": lambda p: p.map(tokens_of).batch(max_tokens=50, token_field="tokens", lengths="text",
                                                  buckets=[8, 9]),
    "select-budget": lambda p: p.select(short).batch(max_tokens=50, lengths="text"),
    "packed": lambda p: p.map(tokens_of).pack(32, eos=-1, lengths="text"),
    "packed-batched": lambda p: p.map(tokens_of).pack(32, eos=-1, lengths="text").batch(3),
}


@pytest.mark.parametrize("kind", sorted(PLANNED))
@pytest.mark.parametrize("world,workers", [(4, 1), (3, 2)])
def test_planned_pipelines_take_equal_steps(texts, kind, world, workers):
    pipe = PLANNED[kind](Pipeline(texts, seed=5, plan_window=64))
    assert pipe.step_policy == "planned"
    counts = [len(list(pipe.iterate(ctx(r, world, worker_id=w, num_workers=workers))))
              for r in range(world) for w in range(workers)]
    assert len(set(counts)) == 1 and counts[0] > 0
    assert counts[0] == pipe.steps(ctx(0, world, num_workers=workers))


def positions_of(item):
    if isinstance(item, dict):
        return item["__position__"]
    if isinstance(item, list) and item and isinstance(item[0], dict) and "cu_seqlens" in item[0]:
        return [p for row in item for p in row["__position__"]]
    return [s["__position__"] for s in item]


def tokens_kept(sample):
    return {**tokens_of(sample), **{k: v for k, v in sample.items() if k.startswith("__")}}


@pytest.mark.parametrize("kind", ["budget", "bucketed", "packed-batched"])
def test_consumers_read_disjoint_groups_and_only_the_last_round_is_left(texts, kind):
    build = {"budget": lambda p: p.map(tokens_kept).batch(max_tokens=50, token_field="tokens", lengths="text"),
             "bucketed": lambda p: p.batch(max_tokens=50, lengths="text", buckets=3),
             "packed-batched": lambda p: p.map(tokens_kept).pack(32, eos=-1, lengths="text").batch(3)}[kind]
    pipe = build(Pipeline(texts, seed=5, plan_window=64, provenance=True))
    seen = [p for r in range(4) for item in pipe.iterate(ctx(r, 4)) for p in positions_of(item)]
    assert len(seen) == len(set(seen))
    groups = list(pipe.plan(ctx()).groups())
    left = {int(wp[o]) for wp, g in groups[len(groups) // 4 * 4:]
            for o in (g.tolist() if isinstance(g, np.ndarray) else [x for row in g for x in row[:, 0].tolist()])}
    assert sorted(set(seen) | left) == list(range(300))


def test_packed_rows_fit_whole_documents_with_cu_seqlens(texts):
    pipe = Pipeline(texts, seed=2, provenance=True).map(tokens_kept).pack(32, eos=-1, lengths="text")
    rows = list(pipe.iterate(ctx()))
    docs = 0
    for row in rows:
        cu = row["cu_seqlens"].tolist()
        assert row["tokens"].shape == (32,) and cu[0] == 0 and cu[-1] == row["length"] <= 32
        for k, (a, b) in enumerate(zip(cu, cu[1:])):
            i = row["__index__"][k]
            assert row["tokens"][a:b].tolist() == [*range(len(f"sample {i}")), -1]  # whole, eos last
            assert row["position_ids"][a:b].tolist() == list(range(b - a))
            assert (row["doc_ids"][a:b] == k).all()
        assert (row["doc_ids"][row["length"]:] == -1).all()
        docs += len(cu) - 1
    assert docs == 300
    fill = sum(r["length"] for r in rows) / (32 * len(rows))
    assert fill > 0.95


def test_split_documents_cut_only_when_asked(texts):
    with pytest.raises(StepPlanError, match=r"^a document of 11 tokens does not fit a row of 10; "
                       r"pack\(split_documents=True\) cuts long documents into rows$"):
        list(Pipeline(texts).map(tokens_of).pack(10, eos=-1, lengths="text").iterate(ctx()))
    rows = list(Pipeline(texts, shuffle=False).map(tokens_of)
                .pack(6, eos=-1, lengths="text", split_documents=True).iterate(ctx()))
    assert sum(r["length"] for r in rows) == sum(len(f"sample {i}") + 1 for i in range(300))
    assert all(r["length"] <= 6 for r in rows)


def test_a_length_that_differs_from_the_plan_is_refused(texts):
    pipe = Pipeline(texts, shuffle=False).map(wrong_tokens).batch(max_tokens=50, token_field="tokens",
                                                                  lengths="text")
    with pytest.raises(StepPlanError, match=r"^the plan counted 8 tokens for 'tokens' at epoch position 0 "
                       r"but the sample has 3; lengths= must name what the stages leave in 'tokens'$"):
        list(pipe.iterate(ctx()))


def test_an_unequal_pipeline_is_refused_under_pipeline_dataset(texts):
    ht = pytest.importorskip("hpcio.torch")
    pipe = Pipeline(texts, context={"rank": 0, "world_size": 2}).select(short).batch(4)
    assert pipe.step_policy == "unequal"
    with pytest.raises(UnequalStepsError, match=r"^this pipeline's consumers would take different numbers "
                       r"of steps \(2 consumers; a select, budget batch or assemble changes "
                       r"counts\): plan the batches from lengths \(batch\(\.\.\., lengths=\), pack\(\)\) "
                       r"or give the Pipeline steps_per_epoch=$"):
        list(ht.PipelineDataset(pipe))
    fixed = Pipeline(texts, steps_per_epoch=7).select(short).batch(4)
    assert fixed.step_policy == "fixed"
    got = [list(fixed.iterate(ctx(r, 4))) for r in range(4)]
    assert [len(g) for g in got] == [7] * 4
    # a consumer whose part runs out reads its part of the next epoch's order
    assert all(len(b) == 4 for g in got for b in g[:-1])


def test_the_greedy_packer_says_where_documents_start(texts):
    from hpcio.pipeline import SequencePacker

    rows = list(Pipeline(texts, shuffle=False).map(tokens_of)
                .assemble(SequencePacker.factory(16, eos=-1)).iterate(ctx()))
    # "sample 0" .. : 8 tokens + eos each, cut across rows
    assert rows[0]["cu_seqlens"].tolist() == [0, 9, 16]
    assert rows[0]["position_ids"].tolist() == [*range(9), *range(7)]
    assert rows[1]["cu_seqlens"].tolist() == [0, 2, 11, 16]


def run_mpi(nprocs: int, *args: str) -> str:
    if MPIEXEC is None:
        pytest.fail("mpiexec not found: pip install mpich mpi4py (the [mpi] extra)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for var in [v for v in env if v.startswith(("SLURM_", "PMI_", "PMIX_"))]:
        del env[var]
    out = subprocess.run([MPIEXEC, "-n", str(nprocs), sys.executable, "-m", "mpi4py", str(SCRIPT), *args],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.mpi
def test_stopped_on_four_ranks_and_resumed_on_three_reads_every_document_once(tmp_path):
    """4 mpiexec ranks with 2 DataLoader workers each stop after 3 steps; 3 ranks with
    none resume from the saved states: nothing is read twice, and the planned pipelines
    read every document but for the last partial round."""
    import json

    pytest.importorskip("torch")
    names = ["select", "budget", "bucketed", "packed"]
    stop, resume = run_mpi(4, "300", "stop", str(tmp_path)), run_mpi(3, "300", "resume", str(tmp_path))
    for name in names:
        assert f"STOP {name} OK size=4 steps=[3, 3, 3, 3]" in stop
        assert f"RESUME {name} OK size=3" in resume
        first = json.loads((tmp_path / f"stop-{name}.json").read_text())
        then = json.loads((tmp_path / f"resume-{name}.json").read_text())
        seen = [p for part in first["read"] + then["read"] for p in part]
        assert len(seen) == len(set(seen)), name
        assert all(first["read"]) and all(then["read"]) and len(set(then["steps"])) == 1, name
        if name == "select":  # steps_per_epoch=3 on 2 workers: the rank's 6 steps in all
            assert then["steps"] == [6 - 3] * 3
        else:
            assert sorted(set(seen) | set(then["left"])) == list(range(300)), name


@pytest.mark.parametrize("build", [
    lambda p: p.batch(7),
    lambda p: p.batch(7, drop_last=True),
    lambda p: p.shuffle(5).batch(4).unbatch(),
    lambda p: p.batch(4, drop_last=True).unbatch().batch(3),
])
def test_counted_pipelines_know_their_steps(texts, build):
    pipe = build(Pipeline(texts, seed=1))
    assert pipe.step_policy == "counted"
    counts = {len(list(pipe.iterate(ctx(r, 3, worker_id=w, num_workers=2)))) for r in range(3) for w in range(2)}
    assert counts == {pipe.steps(ctx(0, 3, num_workers=2))}


def at_most_nine(n):
    return n <= 9


def test_a_length_select_is_planned_so_batches_stay_full(texts):
    pipe = (Pipeline(texts, seed=3, plan_window=64, provenance=True).select(at_most_nine, lengths="text")
            .batch(size=5, max_tokens=1000, lengths="text"))
    assert pipe.step_policy == "planned"
    got = [list(pipe.iterate(ctx(r, 4))) for r in range(4)]
    assert len({len(g) for g in got}) == 1
    ids = [s["id"] for g in got for b in g for s in b]
    assert len(ids) == len(set(ids)) and max(ids) <= 99  # "sample 99" has 9 characters
    assert sum(len(b) < 5 for g in got for b in g) <= 5  # at most each window's last batch is short
