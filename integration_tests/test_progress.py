"""Long loops report progress through ``eff_shared.progress`` in every package (issue 22).

Off a terminal each prints a plain line every ``EFF_PROGRESS_EVERY_S`` seconds (set tiny here so a
few steps are enough), nothing under ``--quiet``/``EFF_QUIET``, and a loop nested in another
tracked loop is silent (one stream of lines per command).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

# the root conftest sets EFF_QUIET for the whole test session; these tests want the output
ENV = {k: v for k, v in os.environ.items() if k != "EFF_QUIET"}
ENV |= {"EFF_PROGRESS_EVERY_S": "1e-9", "OMP_NUM_THREADS": "1"}


@pytest.fixture
def every_line(monkeypatch):
    monkeypatch.setenv("EFF_PROGRESS_EVERY_S", "1e-9")
    monkeypatch.delenv("EFF_QUIET", raising=False)
    torch.set_num_threads(1)


def test_cli_solve_reports_iterations_and_is_silent_with_quiet():
    cmd = [sys.executable, "-m", "eff_shared", "games", "solve", "--game", "kuhn_poker"]
    cmd += ["--algo", "cfr+", "--iterations", "50", "--checkpoints", "10,50"]
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "cfr+ (iterations): 10/50 (20 %)" in proc.stderr
    assert "cfr+ (iterations): 50/50 (100 %)" in proc.stderr
    quiet = [sys.executable, "-m", "eff_shared", "--quiet", *cmd[3:]]
    proc = subprocess.run(quiet, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "(iterations)" not in proc.stderr


def test_lm_training_reports_steps(every_line, capsys):
    from transformers import LlamaConfig, LlamaForCausalLM

    from eff_llm._lm_train import TrainConfig, causal_lm_loss, train_lm

    cfg = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg)
    stream = torch.randint(0, 64, (2000,))
    loss = lambda m, x: causal_lm_loss(m(x).logits, x)  # noqa: E731
    train_lm(model, loss, stream, TrainConfig(steps=3, batch_size=2, seq_len=8))
    assert "LM training (steps): 3/3 (100 %)" in capsys.readouterr().err


def test_federation_reports_rounds_and_silences_nested_loops(every_line, capsys):
    from eff_shared.federated import FedAvg, InProcessRunner
    from eff_shared.progress import track

    def client(state, data, cfg, rng):
        for _ in track(range(4), "local steps"):  # nested: must stay silent
            pass
        return {"w": state["w"] + data}, 1, {}

    InProcessRunner(3, None, seed=0).run({"w": np.zeros(2)}, client, FedAvg(), [1.0, 2.0])
    err = capsys.readouterr().err
    assert "federation (rounds): 3/3 (100 %)" in err
    assert "local steps" not in err


def test_ppo_reports_updates(every_line, capsys):
    from eff_rl.cka_rl import CKAPolicy
    from eff_rl.envs import cartpole_task
    from eff_rl.ppo import ContinualPPO

    ppo = ContinualPPO(lambda n: cartpole_task(num_envs=n), CKAPolicy(4, 2, width=8), n_envs=2,
                       n_steps=16, n_epochs=1, n_minibatches=1)  # fmt: skip
    ppo.learn(64)
    assert "PPO (updates): 2/2 (100 %)" in capsys.readouterr().err


def test_reproduce_harness_silences_inner_loops(every_line, capsys):
    from eff_shared.reproduce import run_one

    result = run_one("shared.fedavg", "quick", 0)
    assert result.error is None
    assert "(rounds)" not in capsys.readouterr().err


def test_reproduce_off_a_terminal_prints_a_heartbeat_and_one_line_per_result():
    import shutil

    eff = shutil.which("eff") or os.path.join(os.path.dirname(sys.executable), "eff")
    env = ENV | {"EFF_PROGRESS_EVERY_S": "0.2"}
    cmd = [eff, "reproduce", "theory.lora_meta", "shared.fedavg", "-j", "1"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "reproduce: 0/2 finished, " in proc.stderr  # the heartbeat while the first one runs
    done = [ln for ln in proc.stdout.splitlines() if ln.startswith("[")]
    assert len(done) == 2, proc.stdout  # one line per finished reproduction
