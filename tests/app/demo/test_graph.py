"""The graph demo section prints the seeds' cycle claim and the karate-club split, and draws its picture."""

from omnipos.app.demo.graph import demo_section


def test_demo_section(tmp_path, capsys):
    demo_section(tmp_path)
    text = capsys.readouterr().out
    assert "(distinct rows: 1)" in text  # random-walk PE: all cycle nodes alike
    assert "distinct rows: 8," in text  # Laplacian PE: every node its own row
    assert "32/34 members" in text
    picture = tmp_path / "graph_laplacian_pe.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(picture) in text
