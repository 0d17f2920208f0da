"""Checkpoints from Python: ReferenceSet.save / load / to_bytes / from_bytes, the journal, the
errors, and the estimators' pickles (which carry the store as a checkpoint)."""
import os
import pickle
import tempfile

import numpy as np
import pytest

import streamknn

from conftest import BACKEND


def _store(rng, metric="l2", dim=3, **target):
    s = streamknn.ReferenceSet(dim, metric, backend=BACKEND, cpu_threads=1, **target)
    n = 200
    if metric == "haversine":
        x = np.column_stack([rng.uniform(-80, 80, n), rng.uniform(-180, 180, n)]).astype(np.float32)
    else:
        x = rng.standard_normal((n, dim)).astype(np.float32)
    if "n_classes" in target:
        s.insert(np.arange(n, dtype=np.uint64), x, rng.integers(0, target["n_classes"], n))
    elif "n_outputs" in target:
        s.insert(np.arange(n, dtype=np.uint64), x, rng.standard_normal((n, target["n_outputs"])).astype(np.float32))
    else:
        s.insert(np.arange(n, dtype=np.uint64), x)
    s.publish()
    s.erase(np.arange(0, n, 7, dtype=np.uint64))
    s.publish()
    return s, x


def _same_answers(a, b, queries, k=5):
    da, ia, ea = a.search(queries, k)
    db, ib, eb = b.search(queries, k)
    assert ea == eb
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_array_equal(da.view(np.uint32), db.view(np.uint32))  # bit for bit


def test_load_takes_the_options_checkpoints_do_not_record():
    # The CUDA backend's spatial index and reduced-precision copy change how it searches, never
    # the answers; a load (or from_bytes) may set them, and names a value it does not know.
    rng = np.random.default_rng(12)
    s, x = _store(rng, "l2", 96)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "store.skc")
        s.save(path)
        t = streamknn.ReferenceSet.load(path, backend=BACKEND, spatial_index="off", reduced_screen="always",
                                        reduced_format="int8")
        _same_answers(s, t, x[:9])
        with pytest.raises(ValueError, match="ReferenceSet.load: unknown reduced_format 'bf16'"):
            streamknn.ReferenceSet.load(path, reduced_format="bf16")
    u = streamknn.ReferenceSet.from_bytes(s.to_bytes(), backend=BACKEND, reduced_screen="always",
                                          reduced_format="float16")
    _same_answers(s, u, x[:9])
    with pytest.raises(ValueError, match="ReferenceSet.from_bytes: unknown spatial_index 'kd'"):
        streamknn.ReferenceSet.from_bytes(s.to_bytes(), spatial_index="kd")


@pytest.mark.parametrize("metric,target", [("l2", {}), ("ip", {"n_classes": 4}), ("cosine", {"n_outputs": 2}),
                                           ("haversine", {"n_classes": 3})])
def test_save_load_round_trip(metric, target):
    rng = np.random.default_rng(11)
    s, x = _store(rng, metric, 2 if metric == "haversine" else 3, **target)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "store.skc")
        s.save(path)
        t = streamknn.ReferenceSet.load(path, backend="cpu")
        assert t.epoch == s.epoch and t.size == s.size and t.metric == s.metric
        assert t.load_report == {"checkpoint_epoch": s.epoch, "epoch": s.epoch, "replayed": 0, "skipped": 0,
                                 "torn": 0}
        assert t.to_bytes()[144:] == s.to_bytes()[144:]
        _same_answers(s, t, x[:17])
        u = streamknn.ReferenceSet.from_bytes(s.to_bytes(), backend="cpu")
        _same_answers(s, u, x[:17])
        assert s.load_report is None


def test_journal_replay_and_errors():
    rng = np.random.default_rng(12)
    s, x = _store(rng, n_outputs=2)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, journal = os.path.join(tmp, "s.skc"), os.path.join(tmp, "s.journal")
        s.save(ckpt)
        s.open_journal(journal, sync_each_publish=False)
        s.move(np.arange(1, 50, dtype=np.uint64), x[1:50] + 1)
        s.publish()
        s.set_target(np.arange(1, 5, dtype=np.uint64), np.ones((4, 2), np.float32))
        s.publish()
        t = streamknn.ReferenceSet.load(ckpt, journal=journal)
        assert t.load_report["replayed"] == 2 and t.epoch == s.epoch
        _same_answers(s, t, x[:9])
        with open(ckpt, "r+b") as f:
            f.seek(200)
            byte = f.read(1)
            f.seek(200)
            f.write(bytes([byte[0] ^ 0x20]))
        with pytest.raises(streamknn.CheckpointError, match="s.skc: IDS section at byte"):
            streamknn.ReferenceSet.load(ckpt)
        with pytest.raises(streamknn.CheckpointError, match="missing.skc"):
            streamknn.ReferenceSet.load(os.path.join(tmp, "missing.skc"))
        with pytest.raises(streamknn.CheckpointError):
            streamknn.ReferenceSet.from_bytes(b"SKNNCKPT" + bytes(100))
        assert issubclass(streamknn.CheckpointError, streamknn.Error)


def test_estimator_pickles_carry_the_store():
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(13)
    X = rng.standard_normal((300, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    clf = streamknn.KNeighborsClassifier(n_neighbors=5, backend=BACKEND).fit(X, y)
    again = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(clf.predict(X[:50]), again.predict(X[:50]))
    np.testing.assert_array_equal(clf.predict_proba(X[:50]), again.predict_proba(X[:50]))
    d1, i1 = clf.kneighbors(X[:20])
    d2, i2 = again.kneighbors(X[:20])
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_array_equal(d1, d2)
    assert "_store_checkpoint" in clf.__getstate__()
    reg = streamknn.KNeighborsRegressor(n_neighbors=3, backend=BACKEND).fit(X, X[:, 1])
    np.testing.assert_array_equal(reg.predict(X[:30]), pickle.loads(pickle.dumps(reg)).predict(X[:30]))


def test_stream_and_knnq_pickles_carry_the_store():
    rng = np.random.default_rng(14)
    X = rng.standard_normal((120, 3)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    window = streamknn.SlidingWindowKNNClassifier(n_neighbors=3, window_size=50, backend=BACKEND)
    window.learn_many(X[:100], y[:100])
    again = pickle.loads(pickle.dumps(window))
    assert again.predict_many(X[100:]) == window.predict_many(X[100:])
    again.learn_many(X[100:], y[100:])
    window.learn_many(X[100:], y[100:])
    assert again.predict_many(X[:30]) == window.predict_many(X[:30])

    q = streamknn.KnnQ(3, 2, backend=BACKEND)
    q.add_states(X[:60])
    q.lookup_and_update(X[60:70], 3, np.zeros(10, np.int64), np.ones(10, np.float32), 0.5)
    q2 = pickle.loads(pickle.dumps(q))
    np.testing.assert_array_equal(q.table, q2.table)
    np.testing.assert_array_equal(q.q_values(X[:20], 3), q2.q_values(X[:20], 3))
    assert q2.store.epoch == q.store.epoch


RUNNER = os.environ.get("STREAMKNN_RUNNER")


@pytest.mark.skipif(not RUNNER, reason="STREAMKNN_RUNNER is not set (ctest sets it)")
def test_runner_checkpoint_and_resume():
    import csv
    import subprocess

    def run(*args):
        return subprocess.run([RUNNER, "run", "--stream", "rbf", "--points", "6000", "--backend", BACKEND,
                               "--no-progress", *args], capture_output=True, text=True)

    def predictions(path):
        with open(path) as f:
            return {row["index"]: row["prediction"] for row in csv.DictReader(f)}

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "run.skc")
        full = run("--predictions", os.path.join(tmp, "full.csv"))
        assert full.returncode == 0, full.stderr
        first = run("--limit", "2500", "--batch", "40", "--checkpoint", ckpt, "--checkpoint-every", "1000")
        assert first.returncode == 0, first.stderr
        rest = run("--resume", ckpt, "--predictions", os.path.join(tmp, "rest.csv"))
        assert rest.returncode == 0, rest.stderr
        assert "resumed" in rest.stdout
        whole, resumed = predictions(os.path.join(tmp, "full.csv")), predictions(os.path.join(tmp, "rest.csv"))
        assert min(map(int, resumed)) == 2500 and len(resumed) == 3500
        assert all(whole[i] == p for i, p in resumed.items())

        bad = run("--checkpoint-every", "100")
        assert bad.returncode == 2 and "--checkpoint" in bad.stderr
        other = run("--resume", ckpt, "--metric", "cosine")
        assert other.returncode == 2 and "checkpoint holds" in other.stderr
        with open(ckpt, "r+b") as f:
            f.seek(300)
            b = f.read(1)
            f.seek(300)
            f.write(bytes([b[0] ^ 1]))
        broken = run("--resume", ckpt)
        assert broken.returncode == 1 and ckpt in broken.stderr and "checksum" in broken.stderr
