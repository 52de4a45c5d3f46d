"""Every option of a precompute job is checked before its first unit (issue 23): a refused job runs nothing and
leaves its output folder as it was (here: not created)."""

import gzip

import pytest

from omnipos.app.cli import main
from omnipos.scale import precompute_meds, precompute_reads


@pytest.fixture
def root(tmp_path, meds_root):
    return meds_root(tmp_path / "meds", seed=3)


@pytest.mark.parametrize("options, error, words", [
    ({"origin": "yesterday"}, ValueError, "origin must be one of"),
    ({"unit": "fortnight"}, ValueError, "unit must be one of"),
    ({"vocab": ["A", "B"]}, ValueError, "vocab must be a previous EventBatch's vocab"),
    ({"vocab": 5}, TypeError, "vocab must be a list"),
    ({"unknown_code": "guess"}, ValueError, "unknown_code must be one of"),
    ({"max_len": 0}, ValueError, "max_len must be >= 1"),
    ({"max_len": 4, "truncation": "middle"}, ValueError, "truncation must be one of"),
])
def test_bad_meds_options_refused_before_any_unit(tmp_path, root, monkeypatch, options, error, words):
    import omnipos.scale.meds as meds_module

    ran = []
    monkeypatch.setattr(meds_module, "_meds_unit", lambda *a, **k: ran.append(a))
    out = tmp_path / "out"
    with pytest.raises(error, match=words):
        precompute_meds(root, out, progress=False, **options)
    assert not ran and not out.exists()


def test_cli_origin_yesterday_refused_and_the_corrected_command_runs(tmp_path, root, capsys):
    out = tmp_path / "m"
    assert main(["precompute", "meds", str(root), "--out", str(out), "--origin", "yesterday", "--no-progress"]) == 2
    assert "origin must be one of" in capsys.readouterr().err
    assert not out.exists()
    assert main(["precompute", "meds", str(root), "--out", str(out), "--origin", "epoch", "--no-progress"]) == 0


def test_an_existing_folder_is_left_as_it_was(tmp_path, root):
    out = tmp_path / "m"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="origin"):
        precompute_meds(root, out, origin="yesterday", progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_mixed_fasta_and_fastq_inputs_refused_before_any_unit(tmp_path):
    fasta, fastq = tmp_path / "a.fa", tmp_path / "b.fq.gz"
    fasta.write_bytes(b">r1\nACGT\n")
    fastq.write_bytes(gzip.compress(b"@r2\nACGT\n+\nIIII\n"))
    out = tmp_path / "reads"
    with pytest.raises(ValueError, match=r"mix FASTA \('.*a\.fa'\) and FASTQ \('.*b\.fq\.gz'\)"):
        precompute_reads([fasta, fastq], out, progress=False)
    assert not out.exists()
    empty = tmp_path / "empty.fq"
    empty.write_bytes(b"")
    result = precompute_reads([empty, fasta], out, progress=False)  # an empty file fits either format
    assert result.items == 1
