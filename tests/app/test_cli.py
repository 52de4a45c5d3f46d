import subprocess
import sys

import pytest

from omnipos.app.cli import main


def test_demo_prints_seed_table_and_draws(tmp_path, capsys):
    out = tmp_path / "pictures"
    assert main(["demo", "--out", str(out), "--section", "core"]) == 0
    text = capsys.readouterr().out
    assert "PE[1] = [ 0.841,  0.540,  0.010,  1.000]" in text
    assert "PE[2] = [ 0.909, -0.416,  0.020,  1.000]" in text
    assert "(50, 128)" in text
    for name in ("sinusoid_heatmap.png", "sinusoid_similarity.png"):
        path = out / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert str(path) in text


def test_demo_no_plot_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--no-plot", "--section", "core"]) == 0
    assert not (tmp_path / "omnipos-demo").exists()


def test_unknown_section_is_an_error(capsys):
    assert main(["demo", "--no-plot", "--section", "nope"]) == 2
    assert "unknown demo section" in capsys.readouterr().err


def test_help_lists_commands():
    result = subprocess.run([sys.executable, "-m", "omnipos", "--help"], capture_output=True, text=True, check=True)
    assert "demo" in result.stdout


def test_no_command_is_a_usage_error():
    with pytest.raises(SystemExit):
        main([])
