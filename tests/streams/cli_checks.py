#!/usr/bin/python3
"""The `streamknn` command line end to end: exit codes (0 success, 1 data error, 2 usage
error), messages that name the file, line and column, --batch invariance of the predictions
file, and the predictions / report / plot outputs.

Usage: cli_checks.py PATH/TO/streamknn    (standard library only; the --plot check is skipped
where matplotlib is missing)
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

RUNNER = sys.argv[1]
failures = []


def run(*args):
    p = subprocess.run([RUNNER, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def check(name, ok, detail=""):
    print(("ok    " if ok else "FAIL  ") + name + ("" if ok else f"\n      {detail}"))
    if not ok:
        failures.append(name)


def expect(name, args, code, *fragments):
    rc, out, err = run(*args)
    text = out + err
    missing = [f for f in fragments if f not in text]
    check(name, rc == code and not missing,
          f"exit {rc} (want {code}); missing {missing}; output:\n{text.strip()[:800]}")
    return out


def write(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w" if isinstance(text, str) else "wb") as f:
        f.write(text)
    return path


def read(path):
    with open(path) as f:
        return f.read()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # ---- success, and the default -------------------------------------------------------
        out = expect("no arguments runs the default stream", [], 0, "accuracy", "Cohen's kappa", "points/s",
                     "predict latency p50", "predict latency p99", "backend")
        check("the default summary names the hyperplane stream", "hyperplane(" in out, out)
        expect("--help exits 0", ["run", "--help"], 0, "--window", "--batch", "--predictions")
        expect("--version exits 0", ["--version"], 0, "streamknn")
        expect("regression summary", ["run", "--stream", "drivers", "--points", "3000", "--drivers", "300"], 0,
               "MAE", "RMSE", "R^2", "haversine metric")
        expect("rbf stream", ["run", "--stream", "rbf", "--points", "2000", "--classes", "3"], 0, "accuracy")

        # ---- usage errors: exit 2 -------------------------------------------------------------
        usage = [
            ("unknown option", ["run", "--bogus"], "--bogus"),
            ("k out of range", ["run", "--k", "0"], "--k"),
            ("unknown metric", ["run", "--metric", "manhattan"], "manhattan"),
            ("unknown subcommand", ["walk"], "walk"),
            ("--input with --stream", ["run", "--input", "x.csv", "--stream", "rbf"], "excludes"),
            ("--target without --input", ["run", "--target", "y"], "--input"),
            ("--classes with the hyperplane", ["run", "--classes", "3"], "--classes does not apply to --stream hyperplane"),
            ("--task regress with the hyperplane", ["run", "--task", "regress"], "classification stream"),
            ("haversine on 10 features", ["run", "--metric", "haversine", "--points", "10"], "has 10 features"),
            ("distance weights with ip", ["run", "--metric", "ip", "--weights", "distance", "--points", "10"],
             "inner"),
            # numbers: checked on their text, never wrapped to 2^64 - 1 nor printed as 300 digits
            ("negative --window", ["run", "--window", "-1"], "--window: -1 is negative"),
            ("--window past 2^64", ["run", "--window", "99999999999999999999999"],
             "--window: 99999999999999999999999 is outside [0, 2147483648]"),
            ("--window past the store", ["run", "--window", "4294967296"], "--window: 4294967296 is outside"),
            ("negative --seed", ["run", "--seed", "-1"], "--seed: -1 is negative"),
            ("--seed past 2^64", ["run", "--seed", "18446744073709551616"], "--seed: 18446744073709551616 is outside"),
            ("negative --limit", ["run", "--limit", "-1"], "--limit: -1 is negative"),
            ("fractional --k", ["run", "--k", "5.5"], "--k: 5.5 is not a whole number"),
            ("--k beyond the maximum", ["run", "--k", "4097"], "--k: 4097 is outside [1, 4096]"),
            ("--points 0", ["run", "--points", "0"], "--points: 0 is outside [1, 2147483648]"),
            ("--batch text", ["run", "--batch", "many"], "--batch: many is not a whole number"),
            ("--batch 1e3", ["run", "--batch", "1e3"], "--batch: 1e3 is not a whole number"),
            ("--dim 0", ["run", "--dim", "0"], "--dim: 0 is outside [1, 4096]"),
            ("--classes 1", ["run", "--stream", "rbf", "--classes", "1"], "--classes: 1 is outside [2, 65536]"),
            ("negative --drivers", ["run", "--stream", "drivers", "--drivers", "-5"], "--drivers: -5 is negative"),
            ("negative --drift", ["run", "--drift", "-1"], "--drift: -1 is negative"),
            ("--drift text", ["run", "--drift", "fast"], "--drift: fast is not a number"),
            ("infinite --drift", ["run", "--drift", "1e999"], "--drift: 1e999 is not a finite number"),
            ("--plot in a format matplotlib is not asked for", ["run", "--plot", "x.txt"],
             "--plot x.txt: the format is chosen by the extension; give a file ending in .png, .pdf, .svg"),
            ("two outputs on one file", ["run", "--report", "same.out", "--predictions", "same.out"],
             "--report and --predictions both name same.out"),
        ]
        for name, args, fragment in usage:
            expect("usage error: " + name, args, 2, fragment)
        rc, out, err = run("run", "--drift", "-1")
        check("--drift -1: the value as given, no long number", re.search(r"\d{20}", out + err) is None, err)

        # ---- data errors: exit 1, with file, line and column ------------------------------------
        bad = [  # (name, CSV text, extra options, the place and problem the message must give)
            ("missing value", "a,b,y\n1,2,x\n3,,y\n", [], "line 3, column 2 (\"b\"): missing value (empty cell)"),
            ("NA placeholder", "a,b,y\n1,NA,x\n", [], "line 2, column 2 (\"b\"): missing value (\"NA\")"),
            ("? placeholder", "a,b,y\n?,1,x\n", [], "line 2, column 1 (\"a\"): missing value (\"?\")"),
            ("non-numeric cell", "a,b,y\n1,2,x\n3,four,y\n", [], "line 3, column 2 (\"b\"): \"four\" is not a number"),
            ("infinite cell", "a,b,y\n1,inf,x\n", [], "line 2, column 2 (\"b\"): \"inf\" is not a finite number"),
            ("beyond float32", "a,b,y\n1e39,1,x\n", [], "line 2, column 1 (\"a\"): \"1e39\" is outside the range"),
            ("short row", "a,b,y\n1,2,x\n3,4\n", [], "line 3, column 3: 2 fields, but the header (line 1) has 3"),
            ("long row", "a,b,y\n1,2,x,9\n", [], "line 2, column 4: 4 fields"),
            ("unclosed quote", "a,b,y\n1,\"2,x\n", [], "line 2, column 2: quoted field is never closed"),
            ("stray quote", "a,b,y\n1,2\",x\n", [], "line 2, column 2: '\"' inside an unquoted field"),
            ("text after a quote", "a,b,y\n1,\"2\"3,x\n", [], "line 2, column 2: unexpected '3' after the closing quote"),
            ("empty line", "a,b,y\n1,2,x\n\n3,4,y\n", [], "line 3, column 1: empty line"),
            ("blank last line", "a,b,y\n1,2,x\n\n", [], "line 3, column 1: empty line"),
            ("missing class", "a,b,y\n1,2,\n", [], "line 2, column 3 (\"y\"): missing class (empty cell)"),
            ("regression target", "a,t\n1,2\n2,high\n", ["--task", "regress"],
             "line 3, column 2 (\"t\"): \"high\" is not a number"),
            ("repeated header name", "a,a,y\n1,2,x\n", [], "line 1, column 2 (\"a\"): the header repeats"),
            ("empty header name", "a,,y\n1,2,x\n", [], "line 1, column 2: the header names no column"),
            ("header only", "a,b,y\n", [], "line 2: no data rows after the header (line 1)"),
            ("empty file", "", [], "line 1: the file is empty"),
        ]
        for name, text, extra, fragment in bad:
            path = write(tmp, "bad.csv", text)
            expect("data error: " + name, ["run", "--input", path, *extra], 1, path + ", " + fragment)
        two = struct.pack("<i2f", 2, 1.0, 2.0)
        labels2 = write(tmp, "l2.ivecs", struct.pack("<ii", 1, 0) * 2)
        bad_vecs = [  # (name, features, labels, the message)
            ("truncated vector", two + struct.pack("<i", 2) + b"\0\0", labels2,
             "vector 1 (byte offset 12): truncated: 2 bytes left of the 8"),
            ("truncated dimension", two + b"\2\0", labels2, "vector 1 (byte offset 12): truncated: 2 bytes left"),
            ("dimension 0", struct.pack("<i", 0), labels2, "vector 0 (byte offset 0): dimension 0 is outside"),
            ("dimension changes", two + struct.pack("<i3f", 3, 1, 2, 3), labels2,
             "vector 1 (byte offset 12): dimension 3, but vector 0 has 2"),
            ("NaN component", two + struct.pack("<i2f", 2, 1.0, float("nan")), labels2,
             "vector 1, component 1 (byte offset 20): NaN"),
            ("too few labels", two + two, write(tmp, "l1.ivecs", struct.pack("<ii", 1, 0)), "1 labels for the 2 vectors"),
        ]
        for name, features, labels, fragment in bad_vecs:
            vec = write(tmp, "bad.fvecs", features)
            expect("data error: " + name, ["run", "--input", vec, "--labels", labels], 1, fragment)
        vec = write(tmp, "x.fvecs", two)
        expect("data error: missing file", ["run", "--input", os.path.join(tmp, "none.csv")], 1, "cannot open")
        expect("data error: unknown --target", ["run", "--input", write(tmp, "t.csv", "a,y\n1,2\n"), "--target", "z"],
               1, "no column named \"z\"", "\"a\", \"y\"")
        geo = write(tmp, "geo.csv", "lat,lon,city\n48.85,2.35,Paris\n91,2,Nowhere\n")
        expect("data error: latitude out of range", ["run", "--input", geo, "--metric", "haversine"], 1,
               geo + ", line 3, column 1 (\"lat\"): latitude 91")
        expect("usage error: vectors without --labels", ["run", "--input", vec], 2, "--labels")
        expect("data error: unwritable predictions file",
               ["run", "--points", "100", "--predictions", os.path.join(tmp, "no", "such", "dir.csv")], 1,
               "cannot open for writing")

        # ---- outputs are checked before the input is read, by the user's path ------------------
        nowhere = os.path.join(tmp, "no", "such")
        slow = ["run", "--points", "2000000000"]  # would run for minutes if the check came last
        for option, name in (("--report", "r.json"), ("--predictions", "p.csv"), ("--plot", "p.png"),
                             ("--checkpoint", "c.skc")):
            path = os.path.join(nowhere, name)
            expect(f"{option} in a missing folder is refused before the run", [*slow, option, path], 1,
                   f"{option} {path}: cannot open for writing (the folder {nowhere} does not exist)")
        rc, out, err = run(*slow, "--plot", os.path.join(nowhere, "p.png"))
        check("an unwritable --plot names the plot, not a scratch file", ".predictions.csv" not in err, err)
        expect("an output that is a directory", [*slow, "--report", tmp], 1, f"--report {tmp}: cannot open for writing",
               "it is a directory")
        kept = write(tmp, "kept.json", "keep me")
        expect("outputs first, then the input", ["run", "--input", write(tmp, "late.csv", "a,y\n1,x\n2,\n"),
                                                 "--report", kept, "--plot", os.path.join(tmp, "x.svg2")], 2,
               "--plot")
        expect("an existing output is not truncated by the check",
               ["run", "--input", write(tmp, "late.csv", "a,y\n1,x\n2,\n"), "--report", kept], 1, "missing class")
        check("the existing report file keeps its contents", read(kept) == "keep me", read(kept))
        expect("data error: a directory as --input", ["run", "--input", tmp], 1, f"--input {tmp}: is a directory")
        expect("usage error: a directory as --resume", ["run", "--resume", tmp], 2, "--resume", "is actually a directory")
        expect("data error: a directory as --labels", ["run", "--input", write(tmp, "d.fvecs", two), "--labels", tmp],
               1, f"--labels {tmp}: is a directory")
        geo_lon = write(tmp, "geo_lon.csv", "lat,lon,city\n48.85,2.35,Paris\n10,181,Nowhere\n")
        expect("data error: longitude out of range", ["run", "--input", geo_lon, "--metric", "haversine"], 1,
               geo_lon + ", line 3, column 2 (\"lon\"): longitude 181 is outside [-180, 180]")
        huge = write(tmp, "huge.csv", "a,b,y\n1,2,x\n1e30,1,y\n")
        expect("data error: a coordinate that could overflow the distances", ["run", "--input", huge], 1,
               huge + ", line 3, column 1 (\"a\"): 1e+30 exceeds", "sqrt(FLT_MAX / (8 x dim))")

        rc, out, err = run("run", "--backend", "cuda", "--points", "200")
        check("--backend cuda: runs on a GPU, or exit 1 saying why not",
              (rc == 0 and "cuda" in out) or (rc == 1 and "CUDA" in err and "Traceback" not in err), out + err)

        # ---- a CSV with named classes, and a vector file with labels ---------------------------
        kinds = ["cat", '"dog, big"']  # a quoted class name with a comma
        rows = ["x,y,kind"] + [f"{i % 7},{(i * 3) % 5},{kinds[0] if i % 3 else kinds[1]}" for i in range(200)]
        named = write(tmp, "named.csv", "\n".join(rows) + "\n")
        pred = os.path.join(tmp, "named_pred.csv")
        expect("named classes are reported", ["run", "--input", named, "--predictions", pred], 0,
               "numbered in order of first appearance: dog, big=0, cat=1")
        lines = read(pred).splitlines()
        check("predictions file: header, one row per point, the first prediction empty",
              lines[0] == "index,prediction,truth" and len(lines) == 201 and lines[1] == '0,,"dog, big"',
              lines[:3])
        vecs = b"".join(struct.pack("<i3f", 3, i % 5, i % 3, 1.0) for i in range(100))
        labels = b"".join(struct.pack("<ii", 1, 10 + i % 2) for i in range(100))
        expect("vector files with labels", ["run", "--input", write(tmp, "v.fvecs", vecs), "--labels",
                                            write(tmp, "v.ivecs", labels), "--k", "3"], 0, "2 integer classes")

        # ---- --batch invariance of the predictions file ------------------------------------------
        reg_rows = ["a,b,c,t"] + [f"{(i * 37) % 101 / 10},{(i * 11) % 23},{(i * 5) % 7},{(i * 13) % 17 / 4}"
                                  for i in range(600)]
        regression = write(tmp, "reg.csv", "\n".join(reg_rows) + "\n")
        streams = [
            ("hyperplane", ["--points", "2500"]),
            ("rbf", ["--stream", "rbf", "--points", "2500", "--weights", "distance"]),
            ("drivers", ["--stream", "drivers", "--points", "2500", "--drivers", "200", "--weights", "distance"]),
            ("CSV regression", ["--input", regression, "--task", "regress", "--weights", "distance"]),
        ]
        for name, args in streams:
            for window in ("0", "100"):
                files = []
                for batch in ("1", "7", "64"):
                    out = os.path.join(tmp, f"b{batch}.csv")
                    rc, _, err = run("run", *args, "--window", window, "--batch", batch, "--predictions", out)
                    files.append(read(out) if rc == 0 else f"exit {rc}: {err}")
                check(f"--batch 1, 7, 64 identical: {name}, window {window}",
                      files[0] == files[1] == files[2] and files[0].startswith("index"), files[0][:200])

        # ---- attribute words and predicates ---------------------------------------------------------
        rows = ["x,y,flags,region,label"]
        for i in range(400):
            rows.append(f"{(i * 37) % 101 / 10},{(i * 53) % 97 / 10},{i % 4},{hex(i % 16)},{(i // 7) % 3}")
        attrs = write(tmp, "attrs.csv", "\n".join(rows) + "\n")
        base = ["run", "--input", attrs, "--target", "label", "--attributes", "flags,region", "--window", "100"]
        out = expect("--attributes with --require and --forbid", [*base, "--require", "0:1", "--forbid", "1:0x8"], 0,
                     "accuracy")
        files = []
        for batch in ("1", "13"):
            preds = os.path.join(tmp, f"pred{batch}.csv")
            rc, _, err = run(*base, "--require", "0:1", "--forbid", "1:0x8", "--batch", batch, "--predictions", preds)
            files.append(read(preds) if rc == 0 else f"exit {rc}: {err}")
        check("a predicate: --batch 1 and 13 identical", files[0] == files[1] and files[0].startswith("index"),
              files[0][:200])
        # Points with flags bit 0 clear never vote, so a predicate that nothing passes scores nothing.
        report = os.path.join(tmp, "none.json")
        expect("a predicate nothing passes", [*base, "--require", "0:4", "--report", report], 0)
        check("a predicate nothing passes scores no point", json.loads(read(report))["scored"] == 0,
              read(report)[:300])
        expect("--require WORD beyond --attributes", [*base, "--require", "2:1"], 2, "--require 2:1",
               "--attributes columns")
        for bad in ("1", "x:1", "0:", "0:0x", "4:1", "0:4294967296", "0:-1"):
            expect(f"--require {bad} is refused", [*base, "--require", bad], 2, "--require")
        expect("--forbid 0:zz is refused", [*base, "--forbid", "0:zz"], 2, "--forbid")
        expect("--require needs --attributes", ["run", "--input", attrs, "--require", "0:1"], 2, "--require")
        expect("--attributes needs --input", ["run", "--attributes", "flags"], 2, "--attributes")
        expect("--attributes naming the target", ["run", "--input", attrs, "--target", "label", "--attributes",
                                                  "label"], 2, "--attributes", "target")
        expect("--attributes naming a missing column", ["run", "--input", attrs, "--attributes", "nope"], 1,
               "no column named \"nope\" for --attributes")
        expect("--attributes with a bad cell", ["run", "--input", attrs, "--target", "label", "--attributes", "x,region"],
               1,
               "line 2, column 1 (\"x\")", "is not an attribute word")

        # ---- the JSON report ------------------------------------------------------------------------
        report = os.path.join(tmp, "r.json")
        expect("--report", ["run", "--points", "3000", "--window", "500", "--batch", "32", "--report", report], 0)
        r = json.loads(read(report))
        check("report: metrics, throughput, latency, backend, device",
              r["points"] == 3000 and r["scored"] == 2999 and 0 < r["metrics"]["accuracy"] <= 1 and
              "kappa" in r["metrics"] and r["points_per_second"] > 0 and
              r["predict_latency_us"]["p99"] >= r["predict_latency_us"]["p50"] > 0 and
              r["backend"] in ("cpu", "cuda") and r["device"] and r["config"]["window"] == 500 and
              r["config"]["batch"] == 32, r)

        # ---- --plot ------------------------------------------------------------------------------
        probe = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib, numpy"], capture_output=True)
        if probe.returncode != 0:
            print("skip  --plot (python3-matplotlib is not installed)")
        else:
            png = os.path.join(tmp, "plot.png")
            expect("--plot draws a PNG", ["run", "--points", "3000", "--plot", png], 0, "wrote")
            with open(png, "rb") as f:
                check("--plot output is a PNG", f.read(8) == b"\x89PNG\r\n\x1a\n")
            check("--plot leaves no scratch file behind", not os.path.exists(png + ".predictions.csv"))

    print(f"{len(failures)} failures" if failures else "all command-line checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
