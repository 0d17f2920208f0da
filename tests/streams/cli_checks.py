#!/usr/bin/python3
"""The `streamknn` command line end to end: exit codes (0 success, 1 data error, 2 usage
error), messages that name the file, line and column, --batch invariance of the predictions
file, and the predictions / report / plot outputs; then `streamknn cluster` (cluster_checks):
its centroids, assignments and report against the data, its errors and its progress bar.

Usage: cli_checks.py PATH/TO/streamknn    (standard library only; the --plot check is skipped
where matplotlib is missing, the comparison with scikit-learn's KMeans where it is missing)
"""
import json
import math
import os
import pty
import random
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

        cluster_checks(tmp)

    print(f"{len(failures)} failures" if failures else "all command-line checks passed")
    return 1 if failures else 0


# ---- streamknn cluster ------------------------------------------------------------------------

def f32(v):
    """The float32 a value becomes (what the CSV reader keeps of a cell)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def read_csv_numbers(path):
    lines = read(path).splitlines()
    return lines[0].split(","), [[float(x) for x in line.split(",")] for line in lines[1:]]


def read_fvecs(path):
    with open(path, "rb") as f:
        data = f.read()
    rows, at = [], 0
    while at < len(data):
        (d,) = struct.unpack_from("<i", data, at)
        rows.append(list(struct.unpack_from(f"<{d}f", data, at + 4)))
        at += 4 + 4 * d
    return rows


def fvecs_bytes(rows):
    return b"".join(struct.pack(f"<i{len(r)}f", len(r), *r) for r in rows)


def summary_value(out, name):
    m = re.search(rf"^  {re.escape(name)}\s+(\S+)", out, re.M)
    return m.group(1) if m else None


def squared(a, b):
    return math.fsum((x - y) ** 2 for x, y in zip(a, b))


def check_clustering(name, out, points, centroids, labels, report):
    """The outputs of one fit against the data: each centroid is the mean of its points rounded
    once to float32 (the fit stopped on an unchanged labelling), each label a nearest centroid,
    and the report agrees with the summary and with the inertia of the outputs."""
    k = len(centroids)
    members = [[p for p, j in zip(points, labels) if j == c] for c in range(k)]
    means_ok = all(
        centroids[c][f] == f32(math.fsum(p[f] for p in members[c]) / len(members[c]))
        for c in range(k) if members[c] for f in range(len(points[0])))
    check(f"cluster {name}: each centroid is the float32 mean of its points", means_ok, centroids)
    nearest = all(squared(p, centroids[j]) <= min(squared(p, c) for c in centroids) for p, j in zip(points, labels))
    check(f"cluster {name}: each point's cluster is its nearest centroid", nearest)
    inertia = math.fsum(squared(p, centroids[j]) for p, j in zip(points, labels))
    sizes = [labels.count(c) for c in range(k)]
    ok = (report["points"] == len(points) and report["features"] == len(points[0]) and
          report["cluster_sizes"] == sizes and str(report["iterations"]) == summary_value(out, "iterations") and
          abs(report["inertia"] - float(summary_value(out, "inertia"))) <= 1e-8 * report["inertia"] and
          abs(report["inertia"] - inertia) <= 1e-9 * inertia and report["converged"] and
          report["stopped_by"] == "unchanged labels" and report["backend"] in ("cpu", "cuda") and report["device"])
    check(f"cluster {name}: the report matches the summary and the outputs", ok, f"{report}\n{out}\ninertia {inertia}")


def fit_outputs(tmp, name, args, *fragments):
    """Runs a fit writing every output; returns (stdout, centroids rows, labels, report)."""
    cent, assign, rep = (os.path.join(tmp, f"{name}.{ext}") for ext in ("csv", "assign.csv", "json"))
    out = expect(f"cluster ({name}): exit 0 and a summary",
                 ["cluster", *args, "--centroids", cent, "--assignments", assign, "--report", rep], 0,
                 "streamknn cluster: exact K-means", *fragments)
    if not os.path.exists(rep):
        return out, [], [], {}
    lines = read(assign).splitlines()
    check(f"cluster {name}: assignments are index,cluster in input order",
          lines[0] == "index,cluster" and all(line.split(",")[0] == str(i) for i, line in enumerate(lines[1:])),
          lines[:3])
    centroids = [[f32(v) for v in row] for row in read_csv_numbers(cent)[1]]  # 9 digits: the float32 exactly
    return out, centroids, [int(line.split(",")[1]) for line in lines[1:]], json.loads(read(rep))


def blobs(tmp):
    """400 points around 4 centres in 3 features, and a fourth column `blob` naming the centre."""
    rng = random.Random(7)
    centres = [(0, 0, 0), (6, 0, 0), (0, 6, 0), (0, 0, 6)]
    rows = [[round(c + rng.gauss(0, 1), 3) for c in centres[i % 4]] + [i % 4] for i in range(400)]
    path = write(tmp, "blobs.csv", "x,y,z,blob\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path, [[f32(v) for v in r] for r in rows]


def sklearn_parity(points, start, tol, labels, report):
    """scikit-learn's Lloyd loop from the same start, on the same float32 values (as float64)."""
    try:
        import numpy
        from sklearn.cluster import KMeans
    except ImportError:
        print(f"skip  cluster --tol {tol}: scikit-learn parity (scikit-learn is not importable)")
        return
    km = KMeans(n_clusters=len(start), init=numpy.array(start, dtype=numpy.float64), n_init=1, algorithm="lloyd",
                tol=tol, max_iter=300).fit(numpy.array(points, dtype=numpy.float64))
    check(f"cluster --init FILE --tol {tol}: labels, inertia, iterations of scikit-learn's KMeans(algorithm='lloyd')",
          km.labels_.tolist() == labels and abs(km.inertia_ - report["inertia"]) <= 1e-7 * km.inertia_ and
          km.n_iter_ == report["iterations"], f"sklearn {km.inertia_} in {km.n_iter_}; ours {report}")


def cluster_file_checks(tmp):
    data, points = blobs(tmp)
    fixed = ["--input", data, "--clusters", "4", "--tol", "0"]  # tol 0: stopped by an unchanged labelling
    out, cents, labels, rep = fit_outputs(tmp, "all", fixed, "400 x 4 features", "every column a feature")
    check("cluster: the centroids' header names every column", read(os.path.join(tmp, "all.csv")).startswith(
        "x,y,z,blob\n"))
    check_clustering("without --target", out, points, cents, labels, rep)
    points3 = [p[:3] for p in points]
    out, cents, labels, rep = fit_outputs(tmp, "target", [*fixed, "--target", "blob"], "400 x 3 features",
                                          "column \"blob\" left out")
    check_clustering("with --target", out, points3, cents, labels, rep)

    # A given start (the first point of each blob), from a CSV and from .fvecs; scikit-learn's too.
    start = points3[:4]
    init_csv = write(tmp, "start.csv", "x,y,z\n" + "".join(",".join(f"{v:.9g}" for v in r) + "\n" for r in start))
    out, cents, labels, rep = fit_outputs(tmp, "given", [*fixed, "--target", "blob", "--init", init_csv],
                                          "given: " + init_csv)
    check_clustering("--init FILE", out, points3, cents, labels, rep)
    sklearn_parity(points3, start, 0.0, labels, rep)
    _, _, tol_labels, tol_rep = fit_outputs(tmp, "given_tol", ["--input", data, "--clusters", "4", "--target", "blob",
                                                               "--init", init_csv, "--tol", "0.01"],
                                            "yes: the centroids moved at most --tol 0.01")
    check("cluster --tol 0.01: stopped by tol", tol_rep.get("stopped_by") == "tol", tol_rep)
    sklearn_parity(points3, start, 0.01, tol_labels, tol_rep)
    vecs = write(tmp, "blobs.fvecs", fvecs_bytes(points3))
    cent_vecs = os.path.join(tmp, "given.fvecs")
    assign_vecs = os.path.join(tmp, "given_vecs.csv")
    expect("cluster: .fvecs input, .fvecs centroids", ["cluster", "--input", vecs, "--clusters", "4", "--tol", "0",
                                                       "--init", write(tmp, "start.fvecs", fvecs_bytes(start)),
                                                       "--centroids", cent_vecs, "--assignments", assign_vecs],
           0, "400 x 3 features")
    check("cluster: .fvecs gives the CSV's centroids and assignments",
          read_fvecs(cent_vecs) == cents and read(assign_vecs) == read(os.path.join(tmp, "given.assign.csv")))
    again = fit_outputs(tmp, "again", [*fixed, "--target", "blob", "--init", os.path.join(tmp, "given.csv")])
    # From its own fixed point the fit stops after one iteration: the centroids do not move (tol 0 allows 0).
    check("cluster: --init reads --centroids back: the same fit, settled in 1 iteration",
          again[2] == labels and again[3].get("inertia") == rep["inertia"] and again[3].get("iterations") == 1,
          again[3])
    return data, vecs


def cluster_error_checks(tmp, data, vecs):
    usage = [
        ("no --clusters", ["--points", "100"], "--clusters is required"),
        ("--clusters 0", ["--clusters", "0"], "--clusters: 0 is outside [1, 2147483648]"),
        ("--clusters 2.5", ["--clusters", "2.5"], "--clusters: 2.5 is not a whole number"),
        ("--metric cosine", ["--clusters", "2", "--metric", "cosine"], "--metric: cosine does not fit K-means"),
        ("--metric manhattan", ["--clusters", "2", "--metric", "manhattan"], "--metric: manhattan is not a metric"),
        ("--centroids x.txt", ["--clusters", "2", "--centroids", "x.txt"],
         "--centroids x.txt: the format is chosen by the extension; give a file ending in .csv or .fvecs"),
        ("--assignments x.json", ["--clusters", "2", "--assignments", "x.json"], "--assignments x.json"),
        ("unknown option", ["--clusters", "2", "--bogus"], "--bogus"),
        ("--init of another kind", ["--clusters", "2", "--init", "best"], "--init: best is neither"),
        ("--init FILE with --n-init 2", ["--clusters", "2", "--init", "s.csv", "--n-init", "2"], "--n-init 2"),
        ("--init FILE with --kmeans-seed", ["--clusters", "2", "--init", "s.csv", "--kmeans-seed", "1"],
         "--kmeans-seed"),
        ("--target with vectors", ["--clusters", "2", "--input", vecs, "--target", "x"], "vector file"),
        ("--input with --stream", ["--clusters", "2", "--input", data, "--stream", "rbf"], "excludes"),
        ("--classes with the hyperplane", ["--clusters", "2", "--classes", "3"], "--classes does not apply"),
        ("two outputs on one file", ["--clusters", "2", "--report", "o.csv", "--centroids", "o.csv"],
         "--centroids and --report both name o.csv"),
        ("negative --tol", ["--clusters", "2", "--tol", "-1"], "--tol: -1 is negative"),
        ("--max-iter 0", ["--clusters", "2", "--max-iter", "0"], "--max-iter: 0 is outside"),
    ]
    for name, args, fragment in usage:
        expect("cluster usage error: " + name, ["cluster", *args], 2, fragment)
    start = write(tmp, "start3.csv", "x,y\n1,2\n3,4\n5,6\n")
    nowhere = os.path.join(tmp, "no", "such", "c.csv")
    bad = [
        ("more clusters than points", ["--input", data, "--limit", "10", "--clusters", "11"],
         f"--clusters 11 is more than the 10 points read from {data}"),
        ("a bad cell", ["--input", write(tmp, "bad_cell.csv", "a,b\n1,2\n3,x\n"), "--clusters", "1"],
         "line 3, column 2 (\"b\"): \"x\" is not a number"),
        ("a coordinate that could overflow",
         ["--input", write(tmp, "huge.csv", "a,b\n1,2\n1e30,1\n"), "--clusters", "1"],
         "line 3, column 1 (\"a\"): 1e+30 exceeds"),
        ("--init with other rows than --clusters", ["--input", data, "--clusters", "2", "--init", start],
         f"{start}: 3 starting centroids, but --clusters 2"),
        ("--init of another dimension", ["--input", data, "--clusters", "3", "--init", start],
         "starting centroids of 2 features, but the points"),
        ("a missing --init file", ["--clusters", "2", "--init", os.path.join(tmp, "none.csv")], "cannot open"),
        ("an output in a missing folder, before a long read",
         ["--points", "2000000000", "--clusters", "2", "--centroids", nowhere],
         f"--centroids {nowhere}: cannot open for writing (the folder"),
        ("a directory as --input", ["--input", tmp, "--clusters", "2"], "is a directory"),
    ]
    for name, args, fragment in bad:
        expect("cluster data error: " + name, ["cluster", *args], 1, fragment)
    rc, out, err = run("cluster", "--backend", "cuda", "--points", "200", "--clusters", "2")
    check("cluster --backend cuda: runs on a GPU, or exit 1 saying why not",
          (rc == 0 and "cuda" in out) or (rc == 1 and "CUDA" in err and "Traceback" not in err), out + err)


def cluster_progress_checks():
    def on_a_terminal(*extra):
        master, slave = pty.openpty()
        p = subprocess.Popen([RUNNER, "cluster", "--stream", "rbf", "--points", "5000", "--clusters", "4", *extra],
                             stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal's other side closed
                break
            if not chunk:
                break
            seen += chunk
        p.communicate()
        os.close(master)
        return p.returncode, seen.decode(errors="replace")

    rc, seen = on_a_terminal()
    check("cluster: a progress bar on a terminal, by iteration", rc == 0 and "start 1/1, iteration 1, 5,000 labels "
          "changed" in seen and "reading" in seen and seen.endswith("\r\033[K"), repr(seen[-300:]))
    rc, seen = on_a_terminal("--no-progress")
    check("cluster --no-progress: nothing drawn", rc == 0 and seen == "", repr(seen[:300]))


def cluster_checks(tmp):
    rc, out, err = run("--help")
    check("--help lists run and cluster", rc == 0 and re.search(r"^\s+run\s", out, re.M) is not None and
          re.search(r"^\s+cluster\s", out, re.M) is not None, out)
    expect("cluster --help exits 0", ["cluster", "--help"], 0, "--clusters", "--init", "--centroids", "--assignments")
    data, vecs = cluster_file_checks(tmp)

    report = os.path.join(tmp, "stream.json")
    out = expect("cluster: a built-in stream", ["cluster", "--stream", "rbf", "--points", "3000", "--dim", "4",
                                                "--clusters", "5", "--n-init", "3", "--report", report], 0,
                 "3,000 x 4 features", "3 starts")
    r = json.loads(read(report))
    check("cluster: the stream's report", r["points"] == 3000 and r["features"] == 4 and sum(r["cluster_sizes"]) == 3000
          and len(r["cluster_sizes"]) == 5 and r["iterations_all_starts"] >= r["iterations"] >= 1 and
          r["config"]["n_init"] == 3 and str(r["iterations"]) == summary_value(out, "iterations"), r)
    rc, out, err = run("cluster", "--stream", "drivers", "--points", "2000", "--drivers", "100", "--clusters", "3",
                       "--limit", "1500")
    check("cluster: --limit, and nothing on stderr off a terminal",
          rc == 0 and "1,500 x 2 features" in out and err == "", out + err)
    cluster_error_checks(tmp, data, vecs)
    cluster_progress_checks()


if __name__ == "__main__":
    sys.exit(main())
