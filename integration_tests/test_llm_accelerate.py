"""eff-llm's LRC training loop under ``accelerate launch`` with two CPU processes.

The loop draws one global batch per step and each process trains on its shard; DDP averages the
gradients, so two processes must end with the parameters of one process on the whole batch.

Note (accelerate 1.15): ``accelerate launch --cpu --num_processes 2`` uses the *simple* launcher,
which starts a single process unless an MPI hostfile is given. Two CPU processes are started with
the torchrun-based launcher (``--multi_gpu``) and ``ACCELERATE_USE_CPU=1``, which makes every process
an ``Accelerator`` of type ``MULTI_CPU`` (gloo); the test asserts that two processes really ran.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ACCELERATE = str(Path(sys.executable).with_name("accelerate"))
COMMAND = ["llm", "lrc-train"]  # `eff llm lrc-train` (`python -m eff_shared` is `eff`)
ARGS = ["--steps", "3", "--batch-size", "8", "--seq-len", "16", "--seed", "2"]


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", ACCELERATE_USE_CPU="1", HF_HUB_OFFLINE="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


@pytest.mark.slow
def test_lrc_under_accelerate_launch_two_cpu_processes_matches_one_process(tmp_path):
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    subprocess.run(
        [sys.executable, "-m", "eff_shared", *COMMAND, *ARGS, "--out", str(one)],
        check=True,
        env=_env(),
        timeout=300,
        capture_output=True,
    )
    launch = [
        ACCELERATE,
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "29531",
        "-m",
        "eff_shared",
        *COMMAND,
        *ARGS,
        "--out",
        str(two),
    ]
    proc = subprocess.run(launch, env=_env(), timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert a["num_processes"] == 1 and b["num_processes"] == 2
    assert a["params"].keys() == b["params"].keys()
    worst = max(
        abs(x - y) for k in a["params"] for x, y in zip(a["params"][k], b["params"][k], strict=True)
    )
    assert worst <= 1e-5
    # The norm gains start at 1: they moved, so the comparison is not vacuous.
    assert max(abs(x - 1.0) for x in b["params"]["norms.final"]) > 1e-4
