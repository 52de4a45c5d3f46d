"""The DNA demo section prints its symmetry numbers (exact zeros) and draws its picture."""

from omnipos.app.cli import main


def test_dna_demo_section(tmp_path, capsys):
    assert main(["demo", "--section", "dna", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "1000 reads" in text
    assert "pads moved = 0, RC twice == identity: True" in text
    assert "PE(read) - PE(RC read, aligned)|      = 0.0e+00" in text
    assert "sin(read) + sin(RC read)|    = 0.0e+00" in text
    assert "identical: True" in text and "same multiset: True" in text
    assert "wrapped: 0.0e+00" in text
    # Enformer's basis: the trained model's per-feature gamma normalisation by default, the 2021 one by name
    assert "gamma block column maxima 1.000..1.000: each gamma feature divided by its own maximum" in text
    assert "gamma_normalization='global', the first release's single maximum: column maxima 0.890..1.000" in text
    picture = tmp_path / "dna_rc_symmetric_encoding.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(picture) in text
