"""The documentation holds together: README.md stays short, its generated blocks exist, and every relative
link in README.md, CHANGELOG.md and docs/*.md points to a file of the repository."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Generated blocks README.md must keep (their scripts splice into them: scripts/example.py).
README_BLOCKS = ("setup", "speed", "example", "zoo-example")
#: A link target that another branch delivers (docs/RESULTS.md: the generated results); absent is allowed.
ARRIVING = {"docs/RESULTS.md"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(path: Path) -> list[str]:
    """Link targets of Markdown file ``path`` that are not URLs or in-page anchors, without ``#anchor``."""
    targets = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def test_readme_has_at_most_200_lines():
    n = len(README.read_text().splitlines())
    assert n <= 200, f"README.md has {n} lines; move detail to docs/"


@pytest.mark.parametrize("name", README_BLOCKS)
def test_readme_generated_blocks_exist(name):
    text = README.read_text()
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    assert text.count(start) == 1 and text.count(end) == 1, name
    assert text.index(start) < text.index(end), name


@pytest.mark.parametrize("doc", [p for p in DOCS if p.exists()], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(doc):
    missing = []
    for target in relative_links(doc):
        resolved = (doc.parent / target).resolve()
        rel = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)
        if not resolved.exists() and rel not in ARRIVING:
            missing.append(target)
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files: {missing}"


def test_the_link_check_sees_links(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("[a](docs/A.md) [b](https://example.org) [c](#top) ![d](fig.png#x)")
    assert relative_links(doc) == ["docs/A.md", "fig.png"]


def test_speed_block_table_from_the_benchmarks_last_lines():
    """scripts/speed.py turns the two benchmarks' last lines into the README's table: old = new x ratio,
    a skipped old run is n/a, never a number."""
    from scripts.speed import table

    t = {"old_s": "33.3", "new_s": "14.2", "ratio": "0.427", "loaded_ratio": "1.5", "quickstart_first_shortlist_s": "42.9",
         "old_loaded_s": "60.0", "new_loaded_s": "21.3", "old_quickstart_first_shortlist_s": "91.2"}
    s = {"s3072": "0.400", "s100k": "8.000", "s1m": "80.0", "peak_MB_1m": "2100", "ratio_3072": "2.00",
         "ratio_100k": "3.00", "ratio_1m": "skipped"}
    text = table(t, s)
    assert "| 33 s | 14 s | 0.43 |" in text and "| 91 s | 43 s | 0.47 |" in text
    assert "| 0.80 s | 0.40 s | 0.50 |" in text and "| 24 s | 8.00 s | 0.33 |" in text
    assert "| n/a | 80 s | n/a |" in text and "(2100 MB peak)" in text
