"""KnnQ: lookup, per-action average and Q-value write-back in one call, and the Python KNN-Q
example (python/examples/knn_q_mountain_car.py) learning on Mountain Car."""
import importlib.util
import pathlib

import numpy as np
import pytest

import streamknn

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "python" / "examples" / "knn_q_mountain_car.py"


def make(backend):
    q = streamknn.KnnQ(1, 2, backend=backend)
    ids = q.add_states([[0.0], [1.0], [2.0], [10.0]], [[1, 2], [3, 4], [5, 6], [7, 8]])
    np.testing.assert_array_equal(ids, [0, 1, 2, 3])
    return q


def stored_values(q):
    """The Q-values the library holds, read back through 1-NN regression on each state."""
    values, _ = streamknn.KnnRegressor(q.store, 1).predict(np.array([[0.0], [1.0], [2.0], [10.0]]))
    return values


def test_lookup_average_and_write_back(backend):
    q = make(backend)
    before = q.lookup_and_update([[0.4]], 2, 1, 10.0, 0.5)  # neighbours: states 0 and 1
    np.testing.assert_allclose(before, [[2, 3]])            # per-action mean of rows 0 and 1
    delta = 10.0 - 3.0
    want = np.array([[1, 2 + 0.5 * delta], [3, 4 + 0.5 * delta], [5, 6], [7, 8]], dtype=np.float32)
    np.testing.assert_allclose(q.table, want)
    np.testing.assert_allclose(stored_values(q), want)  # published before the call returned
    np.testing.assert_allclose(q.q_values([[0.4]], 2), [[2, 3 + 0.5 * delta]])


def test_increments_of_one_batch_add_up(backend):
    q = make(backend)
    before = q.lookup_and_update([[0.9], [1.6], [9.0]], 2, [0, 0, 1], [0.0, 2.0, 8.0], 0.25)
    np.testing.assert_allclose(before, [[2, 3], [4, 5], [6, 7]])
    d0, d1, d2 = 0.0 - 2, 2.0 - 4, 8.0 - 7  # every estimate from the snapshot before the call
    want = np.array([[1 + 0.25 * d0, 2], [3 + 0.25 * (d0 + d1), 4], [5 + 0.25 * d1, 6 + 0.25 * d2],
                     [7, 8 + 0.25 * d2]], dtype=np.float32)
    np.testing.assert_allclose(q.table, want, rtol=1e-6)
    np.testing.assert_allclose(stored_values(q), want, rtol=1e-6)


def test_no_stored_state_means_nan_and_no_write(backend):
    q = streamknn.KnnQ(3, 4, backend=backend, initial_q=-1.0)
    assert np.isnan(q.lookup_and_update(np.zeros((2, 3)), 5, 0, 1.0, 0.5)).all()
    q.add_states(np.ones((1, 3)))
    np.testing.assert_array_equal(q.table, [[-1, -1, -1, -1]])
    assert q.n_states == 1 and q.store.size == 1


def test_bad_arguments(backend):
    q = make(backend)
    with pytest.raises(ValueError, match="action"):
        q.lookup_and_update([[0.0]], 1, 2, 0.0, 0.1)
    with pytest.raises(ValueError, match="finite"):
        q.lookup_and_update([[0.0]], 1, 0, np.nan, 0.1)
    with pytest.raises(ValueError, match="states must have shape"):
        q.add_states([[0.0, 1.0]])
    with pytest.raises(ValueError, match="k=0"):
        q.q_values([[0.0]], 0)
    assert q.table.tolist() == [[1, 2], [3, 4], [5, 6], [7, 8]]


def test_non_positive_alpha_and_a_non_finite_write_back_change_nothing(backend):
    q = make(backend)
    for alpha in (0.0, -0.5):
        with pytest.raises(ValueError, match=f"alpha = {alpha:g} must be positive"):
            q.lookup_and_update([[0.0]], 1, 0, 1.0, alpha)
    epoch = q.store.epoch
    # Two increments of 3e38 onto state 0's first action: each finite, their sum not.
    with pytest.raises(ValueError, match=r"would set action 0 of id 0 to \+Inf.*nothing was written"):
        q.lookup_and_update([[0.0], [0.0]], 1, 0, 3e38, 1.0)
    assert q.store.epoch == epoch
    assert q.table.tolist() == [[1, 2], [3, 4], [5, 6], [7, 8]]
    np.testing.assert_array_equal(stored_values(q), q.table)


def test_the_example_learns(backend):
    spec = importlib.util.spec_from_file_location("knn_q_mountain_car", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    lengths, q = example.train(episodes=100, backend=backend, seed=0)
    assert len(lengths) == 100 and q.n_states > 225  # the grid, plus states found exploring
    assert lengths[-20:].mean() < 0.6 * lengths[:20].mean(), lengths  # about 500 -> 180 steps


def test_random_batches_match_a_host_model(backend, rng):
    """One library call per batch (ReferenceSet._lookup_and_update): the estimates equal the
    KnnRegressor means on the snapshot before the call, the neighbours its search, and the stored
    table a float32 host model that adds each query's increment in query order, bit for bit."""
    dim, n_actions, n = 3, 4, 150
    X = rng.uniform(size=(n, dim)).astype(np.float32)
    table = rng.normal(size=(n, n_actions)).astype(np.float32)
    q = streamknn.KnnQ(dim, n_actions, backend=backend)
    q.add_states(X, table)
    model = table.copy()
    for step in range(12):
        k = [1, 5, 12, 200][step % 4]  # 200 > the number of stored states
        S = np.vstack([X[rng.integers(0, n, 8)] + np.float32(0.01), rng.uniform(size=(8, dim))]).astype(np.float32)
        actions = rng.integers(0, n_actions, len(S))
        targets = rng.normal(size=len(S)).astype(np.float32)
        alpha = np.float32(0.3)
        want_q, _ = streamknn.KnnRegressor(q.store, k).predict(S)
        _, ids, epoch = q.store.search(S, k)
        got = q.lookup_and_update(S, k, actions, targets, alpha)
        np.testing.assert_array_equal(got, want_q)
        assert q.store.epoch == epoch + 1
        for i in range(len(S)):
            increment = alpha * (targets[i] - want_q[i, actions[i]])
            for j in ids[i][ids[i] != streamknn.invalid_id]:
                model[j, actions[i]] = model[j, actions[i]] + increment
        np.testing.assert_array_equal(q.table, model)
        stored, _ = streamknn.KnnRegressor(q.store, 1).predict(X)
        np.testing.assert_array_equal(stored, model)


def test_binding_returns_ids_and_epoch(backend):
    q = make(backend)
    before, ids, epoch = q.store._lookup_and_update(np.array([[0.4]], np.float32), 5, np.array([1]),
                                                    np.array([10.0], np.float32), 0.5)
    np.testing.assert_allclose(before, [[4, 5]])  # all four states (k = 5 > 4)
    assert ids.tolist() == [[0, 1, 2, 3, streamknn.invalid_id]] and epoch == q.store.epoch == 2
    with pytest.raises(ValueError, match="actions"):
        q.store._lookup_and_update(np.array([[0.4]], np.float32), 1, np.array([0, 1]), np.array([1.0], np.float32), 0.5)
    with pytest.raises(ValueError, match="outside"):
        q.store._lookup_and_update(np.array([[0.4]], np.float32), 1, np.array([2]), np.array([1.0], np.float32), 0.5)
