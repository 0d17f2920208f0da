#!/usr/bin/env python3
"""KNN-Q on Mountain Car, in batches: the Python version of examples/knn_q_learning.cpp.

A Q-function is stored as states with one Q-value per action (streamknn.KnnQ). Each step, for a
batch of cars driving at once: look up the k nearest stored states of every car, average their
Q-values per action to pick the greedy action, move the cars, then write the TD targets back
to those neighbours with one ``lookup_and_update`` call. States far from every stored one are
added as the cars explore. Q-values start at 0 while every reward is -1, so unexplored actions
look best and get tried (optimistic initialisation; no epsilon needed). The update rule is the
C++ example's (each neighbour's Q-value for the action moves by alpha * (target - mean)); the
difference is that here many cars learn at once, one batched call per step.

    PYTHONPATH=build/python python3 python/examples/knn_q_mountain_car.py [--episodes 60] [--backend cpu]
"""
import argparse
import time

import numpy as np

import streamknn

LOW = np.array([-1.2, -0.07])
HIGH = np.array([0.6, 0.07])
GOAL = 0.5


def normalise(state):
    """Position and velocity scaled to [0, 1], so one distance weighs both alike."""
    return ((state - LOW) / (HIGH - LOW)).astype(np.float32)


def step(state, action):
    """Mountain Car dynamics (Sutton & Barto 10.1) for a batch: returns next state and done flags."""
    x, v = state[:, 0], state[:, 1]
    v = np.clip(v + 0.001 * (action - 1) - 0.0025 * np.cos(3 * x), LOW[1], HIGH[1])
    x = np.clip(x + v, LOW[0], HIGH[0])
    v = np.where(x <= LOW[0], 0.0, v)
    return np.column_stack([x, v]), x >= GOAL


def train(episodes=60, cars=16, k=4, alpha=0.3, gamma=1.0, max_steps=1000, new_state_radius=0.04,
          backend="auto", seed=0):
    """Runs until `episodes` episodes have ended; returns their lengths in order of ending."""
    rng = np.random.default_rng(seed)
    q = streamknn.KnnQ(2, 3, backend=backend)
    grid = np.stack(np.meshgrid(np.linspace(0, 1, 15), np.linspace(0, 1, 15)), axis=-1).reshape(-1, 2)
    q.add_states(grid)

    def reset(n):
        return np.column_stack([rng.uniform(-0.6, -0.4, n), np.zeros(n)])

    state, steps, lengths = reset(cars), np.zeros(cars, dtype=int), []
    values = q.q_values(normalise(state), k)
    while len(lengths) < episodes:
        best = values.max(axis=1, keepdims=True)
        action = np.array([rng.choice(np.flatnonzero(row == m)) for row, m in zip(values, best)])  # random among ties
        nxt, done = step(state, action)
        steps += 1
        timeout = steps >= max_steps
        next_values = q.q_values(normalise(nxt), k)
        target = -1.0 + gamma * np.where(done, 0.0, next_values.max(axis=1))
        q.lookup_and_update(normalise(state), k, action, target, alpha)
        # Explore the state space: store states that no stored state is near yet.
        dist, _, _ = q.store.search(normalise(nxt), 1)
        far = dist[:, 0] > new_state_radius
        if far.any():
            q.add_states(normalise(nxt[far]), next_values[far])
        ended = done | timeout
        lengths += steps[ended].tolist()
        nxt[ended], steps[ended] = reset(int(ended.sum())), 0
        state = nxt
        values = q.q_values(normalise(state), k)
    return np.array(lengths[:episodes]), q


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    lengths, q = train(args.episodes, backend=args.backend, seed=args.seed)
    seconds = time.perf_counter() - start
    tenth = max(1, len(lengths) // 10)
    print(f"{len(lengths)} episodes in {seconds:.1f} s on {q.store.backend_name}; {q.n_states} stored states")
    print(f"steps to the goal: first {tenth} episodes {lengths[:tenth].mean():.0f}, "
          f"last {tenth} episodes {lengths[-tenth:].mean():.0f}")


if __name__ == "__main__":
    main()
