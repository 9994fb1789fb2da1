"""docs/engine-authoring.md works as written.

The guide's fenced code blocks carry their role in the info string:

* ```` ```cpp file=engine.cpp ````: a file the reader creates (a later block with the
  same path replaces it);
* ```` ```sh run ````: a command the reader runs, in the walk's folder;
* ```` ```c compile ```` / ```` ```cpp compile ````: a complete translation unit,
  compiled against the installed SDK headers (``std=c11`` picks another C standard);
* ```` ```text ````: output or a signature, not run.

Tests:

(a) the walk: the ``file=`` blocks are written and the ``run`` blocks run with bash
    (``set -euo pipefail``), in document order, in an empty folder, with
    ``OPENREG_SRC`` set to this checkout and ``python`` on PATH being this
    interpreter;
(b) the final version of each walk file is byte-identical to the file of the same
    name in examples/third_party_engine/, and every file of the example is shown;
(c) every ``compile`` block compiles with warnings as errors;
and every code block has one of those roles, so no snippet escapes testing.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "engine-authoring.md")
EXAMPLE = os.path.join(ROOT, "examples", "third_party_engine")

RUN_TIMEOUT = 600  # seconds, per run block (the whole walk takes about a minute)
CODE_LANGS = {"c", "cpp", "c++", "cmake", "sh", "bash", "shell", "console", "python", "py"}
# Variables a reader would not have set; the doc's commands set what they need.
CLEARED_ENV = ("OPENREG_ENGINE", "OPENREG_ENGINE_PATH", "OPENREG_FALLBACK", "OPENREG_VERBOSE",
               "OPENREG_DEVICE_COUNT")


# ------------------------------------------------------------------ parsing


class Block:
    def __init__(self, line, lang, attrs, flags, text):
        self.line = line      # 1-based line of the opening fence
        self.lang = lang      # "cpp", "sh", ...
        self.attrs = attrs    # {"file": "engine.cpp", "std": "c11"}
        self.flags = flags    # {"run"} / {"compile"}
        self.text = text

    @property
    def file(self):
        return self.attrs.get("file")

    def where(self):
        return f"docs/engine-authoring.md:{self.line} (```{self.lang} {self.info_rest()})"

    def info_rest(self):
        parts = sorted(self.flags) + [f"{k}={v}" for k, v in self.attrs.items()]
        return " ".join(parts)


_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def parse_blocks(path=DOC):
    """Fenced code blocks of a Markdown file (CommonMark fences), in order."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or (m.group("fence")[0] == "`" and "`" in m.group("info")):
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        close = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        start = i
        body = []
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            line = lines[i]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])
            i += 1
        assert i < len(lines), f"docs/engine-authoring.md:{start + 1}: unclosed code fence"
        i += 1
        tokens = m.group("info").split()
        lang = tokens[0] if tokens else ""
        attrs, flags = {}, set()
        for tok in tokens[1:]:
            if "=" in tok:
                key, value = tok.split("=", 1)
                attrs[key] = value
            else:
                flags.add(tok)
        text = "\n".join(body)
        if body:
            text += "\n"
        blocks.append(Block(start + 1, lang, attrs, flags, text))
    return blocks


BLOCKS = parse_blocks()
COMPILE_BLOCKS = [b for b in BLOCKS if "compile" in b.flags]


def _final_files():
    files = {}
    for b in BLOCKS:
        if b.file:
            files[b.file] = b
    return files


# ----------------------------------------------------------------- helpers


def _sdk_prefix():
    import openreg

    return openreg.cmake_prefix_path


def _walk_env(tmp_path):
    """os.environ as a reader would have it, plus the doc's placeholders."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / "python"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    env = dict(os.environ)
    for key in CLEARED_ENV:
        env.pop(key, None)
    env["PATH"] = str(bindir) + os.pathsep + env.get("PATH", "")
    env["OPENREG_SRC"] = ROOT
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    return env


def _tail(text, limit=6000):
    return text if len(text) <= limit else "...\n" + text[-limit:]


# ------------------------------------------------------------------- tests


def test_every_code_block_is_tested():
    assert BLOCKS, "no code blocks found in docs/engine-authoring.md"
    for b in BLOCKS:
        roles = [r for r in ("run", "compile") if r in b.flags] + (["file="] if b.file else [])
        if b.lang in ("text", ""):
            assert not roles, f"{b.where()}: a text block cannot be {roles}"
            assert b.lang == "text", f"{b.where()}: give the block a language (text for output)"
            continue
        assert b.lang in CODE_LANGS, f"{b.where()}: unknown block language {b.lang!r}"
        assert len(roles) == 1, (
            f"{b.where()}: a code block needs exactly one of file=<path>, run, compile "
            f"(has {roles or 'none'}), so that CI builds or runs it")
        if "run" in b.flags:
            assert b.lang == "sh", f"{b.where()}: run blocks are sh"
        if "compile" in b.flags:
            assert b.lang in ("c", "cpp"), f"{b.where()}: compile blocks are c or cpp"
        if b.file:
            assert not os.path.isabs(b.file) and ".." not in b.file.split("/"), (
                f"{b.where()}: file= must be a path inside the walk's folder")


def test_walk_files_are_the_example():
    """The guide shows one engine: the final walk files are the example's files."""
    final = _final_files()
    example_files = sorted(os.listdir(EXAMPLE))
    missing = [f for f in example_files if f not in final]
    assert not missing, f"examples/third_party_engine files never shown in the guide: {missing}"
    for name in example_files:
        with open(os.path.join(EXAMPLE, name), encoding="utf-8") as f:
            want = f.read()
        got = final[name].text
        assert got == want, (
            f"the last version of {name} in the guide ({final[name].where()}) differs from "
            f"examples/third_party_engine/{name}; the guide must show the example as it is")


def test_walk(tmp_path):
    """Follow the walk literally in an empty folder."""
    if shutil.which("cmake") is None or shutil.which("c++") is None:
        pytest.fail("the walk needs cmake and a C++ compiler on PATH (bash scripts/setup.sh installs them)")
    work = tmp_path / "my_engine"
    work.mkdir()
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    env = _walk_env(tmp_path)
    started = time.monotonic()
    ran = 0
    for b in BLOCKS:
        if b.file:
            target = work / b.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(b.text, encoding="utf-8")
        elif "run" in b.flags:
            script = scripts / f"block_{b.line}.sh"
            script.write_text("set -euo pipefail\n" + b.text, encoding="utf-8")
            try:
                proc = subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True,
                                      text=True, timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired as exc:
                pytest.fail(f"{b.where()} timed out after {RUN_TIMEOUT}s:\n{b.text}\n"
                            f"--- stdout ---\n{_tail(exc.stdout or '')}\n--- stderr ---\n{_tail(exc.stderr or '')}")
            if proc.returncode != 0:
                pytest.fail(f"{b.where()} failed with exit status {proc.returncode}:\n{b.text}\n"
                            f"--- stdout ---\n{_tail(proc.stdout)}\n--- stderr ---\n{_tail(proc.stderr)}")
            ran += 1
    assert ran >= 5, f"only {ran} run blocks found; the walk lost its commands"
    print(f"walk: {ran} run blocks in {time.monotonic() - started:.1f}s")


def _compile_id(block):
    return f"line{block.line}-{block.lang}"


@pytest.mark.parametrize("block", COMPILE_BLOCKS, ids=[_compile_id(b) for b in COMPILE_BLOCKS])
def test_compile_block(block, tmp_path):
    include = os.path.join(_sdk_prefix(), "include")
    assert os.path.isfile(os.path.join(include, "openreg", "engine.h")), (
        f"the SDK headers are not installed under {include}")
    if block.lang == "c":
        compiler = os.environ.get("CC", "cc")
        source = tmp_path / "snippet.c"
        std = block.attrs.get("std", "c99")
        flags = [f"-std={std}", "-pedantic"]
    else:
        compiler = os.environ.get("CXX", "c++")
        source = tmp_path / "snippet.cpp"
        flags = [f"-std={block.attrs.get('std', 'c++17')}"]
    source.write_text(block.text, encoding="utf-8")
    argv = [compiler, *flags, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{include}", str(source)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (
        f"{block.where()} does not compile:\n$ {shlex.join(argv)}\n{proc.stderr}\n--- source ---\n{block.text}")
