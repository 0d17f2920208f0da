#!/usr/bin/env python3
"""Nearest-driver dispatch over a fleet sharded across the ranks of an MPI job.

Every rank runs one dispatch office: it tracks the drivers of its own zone (pushing their moves,
whatever rank owns their ids) and takes the ride requests of its passengers. Each tick, all ranks
publish the moves together (one global epoch), then every rank asks for the nearest free drivers
of its passengers in one collective search (each shard answers for the drivers it holds; one
exact merge gives the answer one store would give). Two offices can want the same driver: the
proposals are exchanged and the nearest passenger wins (ties: the lower rank, then the lower
passenger number); the winner's office erases the driver, who rejoins the fleet when the ride ends.
Tick 0 checks the answers against a NumPy brute force over the whole fleet.

    mpirun -np 4 python3 python/examples/distributed_drivers.py [--drivers 20000] [--ticks 10]
    (PYTHONPATH=<build>/python; as root add --allow-run-as-root; --oversubscribe on small machines)
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

import streamknn

EARTH = streamknn.earth_radius_metres
CITY = (52.52, 13.405)  # lat, lon of the centre; drivers and passengers within about 20 km


def haversine(a, b):
    """Great-circle metres between rows of (lat, lon) degrees, a (n, 2) against b (m, 2)."""
    la, lo = np.radians(a[:, :1]), np.radians(a[:, 1:])
    lb, lob = np.radians(b[:, 0])[None, :], np.radians(b[:, 1])[None, :]
    h = np.sin((lb - la) / 2) ** 2 + np.cos(la) * np.cos(lb) * np.sin((lob - lo) / 2) ** 2
    return 2 * EARTH * np.arcsin(np.sqrt(np.minimum(h, 1.0)))


def around(rng, n, spread=0.15):
    return (np.array(CITY) + rng.normal(0, spread, size=(n, 2))).astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drivers", type=int, default=20000, help="drivers in the whole fleet")
    parser.add_argument("--passengers", type=int, default=64, help="ride requests per office and tick")
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--k", type=int, default=8, help="candidate drivers asked per passenger")
    parser.add_argument("--backend", default="auto")
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(1234 + rank)
    fleet = streamknn.DistributedReferenceSet(2, "haversine", comm=comm, backend=args.backend,
                                              capacity_hint=args.drivers // ranks + 1024)

    # This office's drivers: ids rank, rank + ranks, ... (their owners are spread over all ranks).
    mine = np.arange(rank, args.drivers, ranks, dtype=np.uint64)
    where = around(rng, len(mine))
    fleet.insert(mine, where)
    fleet.publish()
    busy_until = {}  # driver id -> tick when its ride ends (this office's drivers only)
    index = {int(d): i for i, d in enumerate(mine)}
    if rank == 0:
        print(f"{ranks} offices, {fleet.size} drivers on {ranks} shards ({fleet.backend_name}); "
              f"this rank holds {fleet.shard_size}")

    for tick in range(args.ticks):
        started = time.perf_counter()
        # 1. Free drivers drift about 100 m; drivers whose ride ended rejoin where it ended.
        free = np.array([d for d in mine if int(d) not in busy_until], dtype=np.uint64)
        where[[index[int(d)] for d in free]] += rng.normal(0, 0.001, size=(len(free), 2)).astype(np.float32)
        fleet.move(free, where[[index[int(d)] for d in free]])
        back = [d for d, until in busy_until.items() if until <= tick]
        if back:
            fleet.insert(np.array(back, dtype=np.uint64), where[[index[d] for d in back]])
            for d in back:
                del busy_until[d]
        report = fleet.publish()  # collective: every office's moves, one epoch on every shard

        # 2. Every office asks for its passengers' nearest free drivers (one collective search).
        passengers = around(rng, args.passengers)
        distances, ids, epoch = fleet.search(passengers, args.k)
        if tick == 0:
            check_against_brute_force(comm, fleet, mine, where, busy_until, passengers, distances, ids)

        # 3. Proposals: each passenger's nearest candidate; conflicts go to the nearest passenger.
        proposals = [(float(distances[p, 0]), rank, p, int(ids[p, 0])) for p in range(len(passengers))
                     if ids[p, 0] != streamknn.invalid_id]
        winners = {}
        for proposal in sorted(sum(comm.allgather(proposals), [])):
            winners.setdefault(proposal[3], proposal)
        won = [w for w in winners.values() if w[1] == rank]
        # The winning office erases its driver (any rank may push any id); the ride ends later,
        # and the driver's own office puts it back (here: the office that tracks it).
        fleet.erase(np.array([w[3] for w in won], dtype=np.uint64))
        for w in winners.values():
            if int(w[3]) in index:
                busy_until[int(w[3])] = tick + 3
        matched = comm.allreduce(len(won))
        pickup = comm.allreduce(sum(w[0] for w in won)) / max(matched, 1)
        if rank == 0:
            print(f"tick {tick}: epoch {epoch}, {report.size} drivers free, {matched} of "
                  f"{args.passengers * ranks} passengers matched, mean pickup {pickup:.0f} m, "
                  f"{1e3 * (time.perf_counter() - started):.1f} ms")
    fleet.publish()  # the last erases


def check_against_brute_force(comm, fleet, mine, where, busy_until, passengers, distances, ids):
    """The sharded answer equals NumPy's over the whole fleet (distances within float32 rounding)."""
    free = [i for i, d in enumerate(mine) if int(d) not in busy_until]
    all_ids = np.concatenate(comm.allgather(mine[free]))
    all_where = np.concatenate(comm.allgather(where[free]))
    exact = haversine(passengers.astype(np.float64), all_where.astype(np.float64))
    k = ids.shape[1]
    order = np.lexsort((np.broadcast_to(all_ids, exact.shape), exact), axis=1)[:, :k]
    near = np.take_along_axis(exact, order, axis=1)
    same = np.allclose(distances, near, rtol=1e-5, atol=0.5)
    ok = comm.allreduce(int(same), op=MPI.MIN)
    if comm.Get_rank() == 0:
        print("tick 0: sharded answers match a brute force over the whole fleet" if ok
              else "tick 0: MISMATCH against the brute force")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
