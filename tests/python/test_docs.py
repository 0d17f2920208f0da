"""The Python examples of docs/python.md (and of README.md, once it has a ```python block) run."""
import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def python_blocks_of(text):
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def python_blocks(path):
    return python_blocks_of(path.read_text() if path.exists() else "")


DOCS = python_blocks(ROOT / "docs" / "python.md")
README = python_blocks(ROOT / "README.md")


def run(code, backend):
    if "sklearn" in code:
        pytest.importorskip("sklearn")
    # The examples use the default backend ('auto'); run them on the suite's backend.
    code = code.replace('backend="auto"', f'backend="{backend}"')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<docs>", "exec"), {"__name__": "__docs__"})
    return out.getvalue()


@pytest.mark.parametrize("code", DOCS, ids=[f"docs-{i}" for i in range(len(DOCS))])
def test_docs_example_runs(code, backend):
    run(code, backend)


def test_docs_have_examples():
    assert len(DOCS) >= 4


@pytest.mark.skipif(not README, reason="README.md has no Python example yet")
@pytest.mark.parametrize("code", README, ids=[f"readme-{i}" for i in range(len(README))])
def test_readme_example_runs(code, backend):
    run(code, backend)


def block_under(heading):
    """The first Python example after a heading of docs/python.md."""
    text = (ROOT / "docs" / "python.md").read_text()
    return python_blocks_of(text.split(heading, 1)[1])[0]


def test_streaming_example_prints_what_the_docs_say(backend):
    out = run(block_under("## River-style streaming"), backend)
    assert out.splitlines() == ["None {}", "ok {'ok': 1.0}", "['alarm']"], out


def test_kmeans_example_prints_scikit_learns_labels(backend):
    out = run(block_under("## K-means"), backend)
    labels, inertia, n_iter = out.split("]")[0] + "]", *out.split("]")[1].split()
    assert labels == "[2 2 2 2 2]" and abs(float(inertia) - 78.8557) < 1e-3 and n_iter == "12", out
