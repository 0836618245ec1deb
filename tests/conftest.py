import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def _cli(*args):
    from typer.testing import CliRunner

    from moeplan.cli import app

    return CliRunner().invoke(app, list(args))


# the machines of issue 32's users (an RTX 3090 + Ryzen 9 5950X desktop; 2x RTX 3090 + two EPYC 7543)
@pytest.fixture(scope="module")
def hw3090(tmp_path_factory):
    out = tmp_path_factory.mktemp("hw") / "3090.json"
    r = _cli("hardware", "--gpu", "RTX 3090", "--cpu", "Ryzen 9 5950X", "--ram", "128G", "--out", str(out))
    assert r.exit_code == 0, r.stdout
    return str(out)


@pytest.fixture(scope="module")
def hw_epyc(tmp_path_factory):
    out = tmp_path_factory.mktemp("hw") / "epyc.json"
    r = _cli("hardware", "--gpu", "RTX 3090", "--gpu-count", "2", "--cpu", "EPYC 7543", "--sockets", "2",
            "--ram", "512G", "--out", str(out))
    assert r.exit_code == 0, r.stdout
    return str(out)
