"""The Python examples of docs/python.md (and of README.md, once it has a ```python block) run."""
import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def python_blocks(path):
    text = path.read_text() if path.exists() else ""
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


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


def test_streaming_example_prints_what_the_docs_say(backend):
    out = run(DOCS[2], backend)
    assert out.splitlines() == ["None {}", "ok {'ok': 1.0}", "['alarm']"], out
