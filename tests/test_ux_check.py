"""Issue 32 item 7: `check` on a log takes the model and the GPU the log names when they are not
given, and says when the log's model is not the compared one."""
from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from moeplan.cli import app

LOG = Path(__file__).parent / "data" / "logs" / "cuda-llama-server-qwen3moe.log"


def run(*args):
    return CliRunner().invoke(app, list(args))


def test_model_and_gpu_from_the_log():
    r = run("check", str(LOG), "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    check = json.loads(r.stdout)["logs"][0]["check"]
    notes = check["notes"]
    assert any(n.startswith("model from the log: Qwen3-30B-A3B-Q4_K_M") and "qwen3-30b-a3b (Q4_K_M)" in n
               for n in notes)
    assert any(n.startswith("hardware from the log: 1 x NVIDIA GeForce RTX 4090") for n in notes)
    decode = next(row for row in check["rows"] if row["item"].startswith("decode"))
    assert decode["predicted"] > 5  # a 4090's figure, not this CPU-only machine's


def test_differing_model_noted(tmp_path):
    text = LOG.read_text().replace("print_info: n_expert_used         = 8\n",
                                   "print_info: n_expert_used         = 8\nprint_info: n_embd_head_k         = 64\n")
    log = tmp_path / "run.log"
    log.write_text(text)
    r = run("check", str(log), "--json", "--hw", "desktop-4090-ddr5")
    notes = json.loads(r.stdout)["logs"][0]["check"]["notes"]
    assert any("the log's model is not the compared one (n_embd_head_k 64 in the log, 128 in" in n for n in notes)
    r = run("check", str(LOG), "--json", "--hw", "desktop-4090-ddr5", "--model", "qwen3-235b-a22b")
    notes = json.loads(r.stdout)["logs"][0]["check"]["notes"]
    assert any("n_layer 48 in the log, 94 in" in n for n in notes)
