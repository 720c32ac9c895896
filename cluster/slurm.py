"""`convgrid run GRID --slurm [SBATCH OPTIONS]` (and `convgrid tune STUDY --slurm ...`): the grid or study
as a SLURM batch job, from the template `cluster/slurm.sbatch` (see there for what the job does).

The script is written where the results are (`RESULTS/slurm/<name>-<time>.sbatch`; `./slurm/` for an
object-store root), so the user can read, keep and resubmit it, and submitted with `sbatch --parsable`;
the command prints the job id and the script's path. The sbatch options given after `--slurm` become
`#SBATCH` lines of the script, after the template's defaults (one node, one task per node,
`--requeue`, `--signal=B:USR1@120`, the output file), which an option of the same long name replaces.

`python -m cluster.slurm wait ADDRESS NODES TIMEOUT_S`, run by the job: returns once the Ray cluster at
ADDRESS answers with NODES live nodes (exit 0), or exits 3 after TIMEOUT_S seconds.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from runner.errors import ConfigError

TEMPLATE = Path(__file__).with_name("slurm.sbatch")
# The template's own #SBATCH options, by long name (None: a flag); an option of the same name replaces one.
DEFAULTS: dict[str, str | None] = {
    "--nodes": "1",
    "--ntasks-per-node": "1",
    "--requeue": None,
    "--signal": "B:USR1@120",
    "--open-mode": "append",  # a requeued job's output follows the first start's
}
START_TIMEOUT_S = 300  # how long the job waits for its Ray nodes


@dataclass(frozen=True)
class Submission:
    script: Path
    job_id: str
    output: Path


def script_folder(results: str) -> Path:
    """Where the job's script and output go: beside the results (a local root), else ./slurm."""
    return Path("slurm") if "://" in results else Path(results) / "slurm"


def sbatch_lines(options: list[str]) -> list[str]:
    """The #SBATCH lines for `options` as given on the command line (`--nodes 2`, `--nodes=2`, `-N 2`:
    an option and the values after it on one line), the template's defaults first unless replaced."""
    if options and not options[0].startswith("-"):
        raise ConfigError(f"sbatch options start with '-': {options[0]!r} is not one", key="--slurm")
    given: list[list[str]] = []
    for token in options:
        if token.startswith("-") or not given:
            given.append([token])
        else:
            given[-1].append(token)
    names = {group[0].split("=", 1)[0] for group in given}
    lines = [f"--{k[2:]}" + (f"={v}" if v is not None else "") for k, v in DEFAULTS.items() if k not in names]
    lines += [" ".join(shlex.quote(t) for t in group) for group in given]
    return [f"#SBATCH {line}" for line in lines]


def warning_s(options: list[str]) -> float | None:
    """Seconds before the time limit the job's `--signal` is sent (sbatch's `[B:]SIG[@S]`; 60 without
    `@`), from the options given or the template's; None where the options drop it."""
    for line in sbatch_lines(options):
        found = re.match(r"#SBATCH --signal[= ](\S+)$", line)
        if found:
            _, at, seconds = found.group(1).partition("@")
            try:
                return float(seconds) if at else 60.0
            except ValueError:
                raise ConfigError(
                    f"--signal={found.group(1)}: its time after '@' is not seconds", key="--signal"
                ) from None
    return None


def check_grace(options: list[str], grace_s: float) -> None:
    """The runs' preemption grace must end before the time limit: the signal comes `warning_s` before
    it, and the driver then takes up to `grace_s` for its runs to save (then it commits, and the script
    requeues the job). ConfigError where it would not."""
    lead = warning_s(options)
    if lead is not None and grace_s >= lead:
        raise ConfigError(
            f"--preempt-grace {grace_s:g} s does not end before the time limit: the job's signal comes "
            f"{lead:g} s before it (--signal): give a shorter --preempt-grace or an earlier signal "
            f"(--signal=B:USR1@{int(grace_s) + 60})",
            key="--preempt-grace",
        )


def render(
    driver_args: list[str], options: list[str], name: str, what: str, folder: Path, ray: bool, now: datetime
) -> str:
    """The job's script: the template with this command's values in."""
    output = folder.resolve() / f"{name}-%j.out"
    head = [f"#SBATCH --job-name=convgrid-{name}", f"#SBATCH --output={output}", f"#SBATCH --chdir={Path.cwd()}"]
    values = {
        "WHAT": what,
        "WHEN": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "SBATCH": "\n".join(head + sbatch_lines(options)),
        "BIN": str(Path(sys.executable).parent),
        "RAY": "yes" if ray else "no",
        "START_TIMEOUT_S": str(START_TIMEOUT_S),
        "ARGS": " ".join(shlex.quote(a) for a in driver_args),
    }
    text = TEMPLATE.read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    left = re.findall(r"\{\{[A-Z_]+\}\}", text)
    assert not left, f"template values not filled in: {left}"
    return text


def submit(driver_args: list[str], options: list[str], name: str, what: str, results: str, ray: bool) -> Submission:
    """Write the job's script beside the results and submit it (see the module)."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise ConfigError("sbatch is not on PATH: --slurm submits the job with SLURM's sbatch", key="--slurm")
    now = datetime.now(UTC)
    folder = script_folder(results)
    folder.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    text = render(driver_args, options, safe, what, folder, ray, now)
    stamp = now.strftime("%Y%m%dT%H%M%S")
    for n in range(1, 1000):  # two submissions in one second keep two scripts
        script = folder / (f"{safe}-{stamp}.sbatch" if n == 1 else f"{safe}-{stamp}-{n}.sbatch")
        try:
            with open(script, "x") as out:
                out.write(text)
            break
        except FileExistsError:
            continue
    script.chmod(0o755)
    done = subprocess.run([sbatch, "--parsable", str(script)], capture_output=True, text=True)
    if done.returncode != 0:
        script.unlink()  # nothing was submitted: no script that looks as if it had been
        raise ConfigError(
            f"sbatch refused the job ({script}): {done.stderr.strip() or done.stdout.strip()}", key="--slurm"
        )
    job_id = done.stdout.strip().split(";")[0]
    return Submission(script, job_id, folder.resolve() / f"{safe}-{job_id}.out")


def wait_for_cluster(address: str, nodes: int, timeout_s: float) -> int:
    """0 once the Ray cluster at `address` answers with `nodes` live nodes; 3 after `timeout_s`."""
    from cluster import ClusterError, connect

    deadline = time.monotonic() + timeout_s
    ray = None
    while ray is None:
        try:
            ray = connect(address)
        except ClusterError as exc:
            if time.monotonic() > deadline:
                print(f"convgrid: the Ray head at {address} did not answer: {exc}", file=sys.stderr)
                return 3
            time.sleep(1.0)
    try:
        while sum(1 for n in ray.nodes() if n.get("Alive")) < nodes:
            if time.monotonic() > deadline:
                print(f"convgrid: fewer than {nodes} Ray nodes joined {address} in {timeout_s:g} s", file=sys.stderr)
                return 3
            time.sleep(0.5)
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "wait":
        sys.exit("usage: python -m cluster.slurm wait ADDRESS NODES TIMEOUT_S")
    sys.exit(wait_for_cluster(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
