#!/usr/bin/env python3
"""Every shell command the README, CONTRIBUTING.md, bench/README.md and docs/ show still exists.

    tests/docs_commands.py SOURCE_DIR BUILD_DIR

Reads the ```sh blocks and checks each command line: a script or program it starts exists (a
tracked script, or a program this build makes), a `make` goal is in the Makefile, a `cmake
--target` names a target some CMakeLists.txt defines, and the options it passes to the runner
and the bench scripts are ones they take. Commands that need no GPU and finish in seconds (the
report on the reference results, the runner's --help) are run. Standard library only.
"""
import os
import re
import shlex
import subprocess
import sys

DOCS = ["README.md", "CONTRIBUTING.md", "bench/README.md", "bench/reference/README.md"]
RUN_PREFIXES = ("bench/report.py bench/reference", "/usr/bin/python3 bench/paper_tables.py",
                "/usr/bin/python3 bench/targets.py", "build/streams/streamknn run --help")


def commands(path):
    """(line number, command) of every line in a ```sh block, continuation lines joined."""
    out, block, pending = [], False, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("```"):
                block = line.strip() in ("```sh", "```bash", "```console") and not block
                continue
            if not block:
                continue
            text = line.split(" #")[0].rstrip() if not line.lstrip().startswith("#") else ""
            if pending:
                text = pending[1] + " " + text.strip()
                n = pending[0]
            if text.endswith("\\"):
                pending = (n, text[:-1].rstrip())
                continue
            pending = None
            if text.strip():
                out.append((n, text.strip()))
    return out


def cmake_targets(src):
    names = set()
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith(("build", ".")) and d != "node_modules"]
        if "CMakeLists.txt" in files:
            text = open(os.path.join(root, "CMakeLists.txt")).read()
            names.update(re.findall(r"add_(?:executable|library|custom_target)\(\s*([\w$\{\}-]+)", text))
            names.update("replay_" + h for h in re.findall(r"streamknn_fuzz_replay\((\w+)", text))
            names.update(re.findall(r"streamknn_test\((\w+)", text))
            for names_list in re.findall(r"foreach\(\w+ ([\w ]+)\)", text):
                names.update(names_list.split())
    return names


def check(src, build, doc, n, cmd, targets, makefile):
    """None when the command checks out, else what is wrong."""
    for part in re.split(r"\s*(?:&&|\|\|)\s*", cmd):
        try:
            words = shlex.split(part)
        except ValueError as e:
            return f"cannot be parsed: {e}"
        if not words:
            continue
        prog = words[0]
        if prog == "make":
            for goal in (w for w in words[1:] if "=" not in w and not w.startswith("-")):
                if not re.search(rf"^(?:[\w.-]+ )*{re.escape(goal)}(?: [\w.-]+)*\s*:", makefile, re.M) and \
                        not re.search(rf"^\.PHONY:.*\b{re.escape(goal)}\b", makefile, re.M):
                    return f"make has no goal {goal}"
        elif prog == "cmake" and "--target" in words:
            for t in words[words.index("--target") + 1:]:
                if t.startswith("-"):
                    break
                if t not in targets:
                    return f"no CMake target named {t}"
        elif re.match(r"build[\w-]*/", prog) or (prog.startswith("PYTHONPATH=") and len(words) > 1):
            if prog.startswith("PYTHONPATH="):
                continue
            name = os.path.basename(prog)
            if name not in targets and name != "streamknn":
                return f"{prog}: no CMake target builds {name}"
            sources = {"streamknn": "streams", "nearest_drivers": "examples", "online_classification": "examples",
                       "knn_q_learning": "examples", "dispatch": "examples"}.get(name)
            if sources:
                text = "".join(open(os.path.join(src, sources, f)).read()
                               for f in os.listdir(os.path.join(src, sources)) if f.endswith(".cpp"))
                for flag in (f for f in re.findall(r"(--[a-z][\w-]*)", part) if f != "--help"):
                    if f'"{flag}' not in text and f"'{flag}" not in text and f"{flag}," not in text:
                        return f"{name} takes no option {flag}"
        elif "/" in prog and not prog.startswith(("/usr", "/tmp", "/opt")) and "<" not in prog:
            if not os.path.exists(os.path.join(src, prog)):
                return f"{prog} does not exist"
        elif prog.startswith("/usr/bin/python3") and len(words) > 1 and words[1].endswith(".py"):
            if not os.path.exists(os.path.join(src, words[1])):
                return f"{words[1]} does not exist"
    return None


def main():
    src, build = sys.argv[1], sys.argv[2]
    docs = DOCS + ["docs/" + f for f in sorted(os.listdir(os.path.join(src, "docs"))) if f.endswith(".md")]
    targets = cmake_targets(src)
    makefile = open(os.path.join(src, "Makefile")).read()
    failed = checked = ran = 0
    for doc in docs:
        path = os.path.join(src, doc)
        if not os.path.exists(path):
            continue
        for n, cmd in commands(path):
            checked += 1
            problem = check(src, build, doc, n, cmd, targets, makefile)
            if problem:
                failed += 1
                print(f"{doc}:{n}: {cmd}\n    {problem}")
                continue
            if cmd.startswith(RUN_PREFIXES):
                run = cmd.replace("build/", build.rstrip("/") + "/", 1) if cmd.startswith("build/") else cmd
                env = dict(os.environ, MPLBACKEND="Agg")
                r = subprocess.run(run, shell=True, cwd=src, capture_output=True, text=True, env=env, timeout=300)
                ran += 1
                if r.returncode != 0:
                    failed += 1
                    print(f"{doc}:{n}: {cmd}\n    exit {r.returncode}: {(r.stderr or r.stdout)[-400:]}")
    print(f"docs commands: {checked} checked, {ran} run, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
