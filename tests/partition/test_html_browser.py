"""The HTML partition picture in a real browser (headless Chromium): the page's script runs
without errors under its own content policy, the graph is in the DOM, a script smuggled in
would be blocked and reported, and a screenshot shows the backends' colors.

Skipped when Chromium is not installed (``apt-get install chromium``; CI's ``.ci/run`` installs
it where it can)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from partition.html_support import EVIL, read_png, two_devices

from tessera.partition.html import COPY_COLOR, PALETTE, to_html

CHROMIUM = next((p for p in (os.environ.get("CHROMIUM"), "/usr/bin/chromium",
                             shutil.which("chromium"), shutil.which("chromium-browser"))
                 if p and os.access(p, os.X_OK)), None)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (/usr/bin/chromium); install it with "
                             "`apt-get install chromium` to run the browser test")


def _chromium(tmp_path: Path, page: Path, *flags: str) -> str:
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    assert CHROMIUM is not None
    run = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}", *flags,
         page.as_uri()],
        capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def _body(dom: str) -> str:
    match = re.search(r"<body[^>]*>", dom)
    assert match, dom[:2000]
    return match.group(0)


@pytest.mark.slow
def test_page_renders_in_chromium(tmp_path: Path) -> None:
    result = two_devices()
    page = tmp_path / "two.html"
    page.write_text(to_html(result.graph, title="two.onnx", report=result.report),
                    encoding="utf-8")
    dom = _chromium(tmp_path, page, "--dump-dom")
    body = _body(dom)
    assert 'data-errors=""' in body, body
    assert 'data-ready="1"' in body, body  # the viewer's script ran to its end
    drawn = sum(1 for n in result.graph.nodes if n.op != "Region") + sum(
        len(n.body.nodes) for n in result.graph.nodes if n.body is not None)
    nodes = len(result.graph.inputs) + len(result.graph.outputs) + drawn
    assert dom.count('<g class="node"') == nodes
    assert dom.count('<path class="edge') >= nodes - 1
    assert dom.count("<script") == 2 and "<script>alert" not in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom

    shot = tmp_path / "two.png"
    _chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=900,700")
    pixels = read_png(shot.read_bytes())[..., :3]
    assert pixels.shape[:2] == (700, 900)
    assert (pixels != 255).any(-1).mean() > 0.05, "the screenshot is (nearly) blank"
    colors = {tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))
              for c in (PALETTE[0][0], PALETTE[1][0], PALETTE[0][2], "#fff4e0", COPY_COLOR)}
    found = {c for c in colors if (pixels == np.array(c, np.uint8)).all(-1).sum() >= 20}
    assert found == colors, f"colors missing from the screenshot: {colors - found}"


def test_a_smuggled_script_is_blocked_and_reported(tmp_path: Path) -> None:
    """Were a name ever left unescaped, the page's policy blocks the script it carries and the
    error recorder says so on <body data-errors>."""
    result = two_devices()
    html = to_html(result.graph, report=result.report)
    page = tmp_path / "smuggled.html"
    page.write_text(html.replace("<h1>", f"{EVIL}<h1>", 1), encoding="utf-8")
    body = _body(_chromium(tmp_path, page, "--dump-dom"))
    assert "blocked by the page policy" in body, body
    assert 'data-ready="1"' in body, body
