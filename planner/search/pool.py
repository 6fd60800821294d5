"""Two processes for one search: on machines with two or more cores, for a search of enough
work (`POOL_MIN_WORK`), this process and a forked child share the (tp, cp) pairs through a queue (largest first), each walks the pairs
it takes and ranks its own contenders ahead (`_ranked_ahead`); the child's results come back
pickled through a pipe, and the pairs' results are merged in one fixed order (`_merge`),
whoever computed them. Also the cyclic garbage collector paused during a search
(`_collector_paused`).
"""

from __future__ import annotations

import gc
import os
import pickle
from contextlib import contextmanager

from planner.config import Job
from planner.rules import split_options
from planner.search.rank import _by_bound
from planner.search.space import SearchOptions, _Space
from planner.search.walk import _collect, _Counter, _tp_cp_pairs

POOL_MIN_WORK = 100
"""The least work (leaf groups, `_pair_size` summed over the pairs) the search shares with a
forked child; below it one process walks everything. The child costs CPU of its own (the
fork, its copy-on-write page faults, pickling its share, the parent ranking the merge), and
saves wall time, which is what the user waits for. On the 2-core development machine, idle,
the search alone (`search()` in process, best of 3, h100-sxm, default training):

    job                 groups   one process: wall = CPU   forked: wall    CPU
    llama3-8b x 8           80                   0.076 s           0.052   0.092
    llama3-8b x 64         348                   0.179 s           0.110   0.207
    llama3-8b x 512        603                   0.249 s           0.146   0.277
    llama3-70b x 2,048     752                   0.499 s           0.280   0.541
    llama3-405b x 16,384 1,008                   0.664 s           0.364   0.703

So forking takes 30-45% off the wall time for 6-20% more CPU from 80 groups on; below 100
groups (a search of a few tens of milliseconds) one process is kept. Under other sessions'
load the child waits for a core and saves less (docs/search.md). With a framework filter
(`runs_as`) every fitting saver is ranked, work the groups do not count: it always forks."""


@contextmanager
def _collector_paused():
    """The cyclic garbage collector off during a search: the walk allocates millions of
    short-lived tuples (freed by reference counting as ever, none in cycles), and each of
    the collector's passes over the growing caches costs time (~8 % of the walk) for
    nothing. Restored as it was afterwards, once the caches are gone with the search's
    frame (the collector then runs as usual, over what is left)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _collect_all(job: Job, space: _Space, cm, opts: SearchOptions):
    """The whole space: (counter, contenders, closest misfit, {contender index: (variant, step time,
    memory total, bound)} of those timed ahead).

    On machines with two or more cores (PLANNER_SERIAL=1 turns it off), for a search of
    `POOL_MIN_WORK` leaf groups or more or with a framework filter, this process and a forked child share the (tp, cp) pairs, each taking the next from a common queue (largest
    first) until none is left, then rank their own contenders ahead (`_ranked_ahead`). The
    pairs' results are merged exactly, in one fixed order (`_merge`), whoever computed
    them: the same counts, contenders and closest misfit, and the ranking by time of the
    contenders kept gives the same as with all of them."""
    pairs = _tp_cp_pairs(job, space)
    if (
        not hasattr(os, "fork")
        or (os.cpu_count() or 1) < 2
        or len(pairs) < 6
        or os.environ.get("PLANNER_SERIAL")
    ):
        return _collect(job, space, cm, opts) + ({},)
    sizes = [_pair_size(job, space, *pair) for pair in pairs]
    if sum(sizes) < POOL_MIN_WORK and opts.runs_as is None:
        return _collect(job, space, cm, opts) + ({},)
    order = list(range(0, len(pairs), 2)) + list(range(1, len(pairs), 2))
    biggest = sorted(range(len(pairs)), key=lambda i: -sizes[i])
    queue, fill = os.pipe()
    os.write(fill, b"".join(i.to_bytes(2, "big") for i in biggest))  # < 64 KiB: no block
    os.close(fill)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(read_fd)
            data = pickle.dumps(_work(job, space, cm, opts, pairs, order, queue))
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write_fd)
    mine = _work(job, space, cm, opts, pairs, order, queue)
    os.close(queue)
    with os.fdopen(read_fd, "rb") as inp:
        data = inp.read()
    _, status = os.waitpid(pid, 0)
    theirs = pickle.loads(data) if status == 0 and data else {}
    results = {**theirs, **mine}
    for i in order:  # what a failed child left undone
        if i not in results:
            results[i] = _collect(job, space, cm, opts, [pairs[i]]) + ({},)
    return _merge([results[i] for i in order])


def _pair_size(job: Job, space: _Space, tp: int, cp: int) -> int:
    """The leaf groups (pp, vpp, ep, etp, sp) below one (tp, cp) pair: its share of the work,
    roughly, for the queue's order."""
    L = job.model.num_layers
    n = 0
    for pp in space.pp(job.num_gpus // (tp * cp), L):
        splits = split_options(L, pp)
        if splits:
            n += len(space.vpp(L, pp, splits[0]))
    return n * len(space.ep_etp(tp)) * len(space.sp(tp))


def _work(
    job: Job, space: _Space, cm, opts: SearchOptions, pairs: list, order: list[int], queue: int
) -> dict:
    """Collect the pairs taken from `queue` (2-byte indices; reads of a pipe this short are
    atomic) until it is empty, then rank them ahead: {pair index: `_ranked_ahead`'s}."""
    got = {}
    while True:
        taken = os.read(queue, 2)
        if not taken:
            break
        i = int.from_bytes(taken, "big")
        got[i] = _collect(job, space, cm, opts, [pairs[i]])
    return _ranked_ahead(got, order, opts, space, cm)


def _ranked_ahead(got: dict, order: list[int], opts: SearchOptions, space: _Space, cm) -> dict:
    """Per pair: (counter, contenders, closest misfit, {index among those contenders:
    (variant, step time, memory total, bound)}), after ranking this process's contenders alone by time (`_by_bound`), in
    the merge order, so the two processes time them side by side: only those that ranking
    timed are kept, with their timings.

    The ranking of all the contenders times no other of these (`_by_bound`), nor do the
    others change where it stops: it stops at the first contender whose bound passes the
    K-th best time so far, and each of these from where ranking them alone stopped on has a
    bound past the K-th best time of these before it, so of all before it. Ranking by memory
    needs them all."""
    mine = [i for i in order if i in got]
    if opts.sort_by == "memory":
        return {i: got[i] + ({},) for i in mine}
    cands, owner = [], []
    for i in mine:
        cands += got[i][1]
        owner += [i] * len(got[i][1])
    done = _by_bound(cands, opts.top, space, cm)[2]
    kept: dict = {i: ([], {}) for i in mine}
    for j in sorted(done):
        share, timings = kept[owner[j]]
        timings[len(share)] = done[j]
        share.append(cands[j])
    return {i: (got[i][0], kept[i][0], got[i][2], kept[i][1]) for i in mine}


def _merge(results: list) -> tuple:
    """The pairs' (counter, contenders, closest misfit, timings) as one, in this order:
    counts summed (the rules in the order they first pruned), contenders concatenated, the
    first smallest misfit."""
    cnt, cands, closest, known = _Counter(), [], [], {}
    for part, share, near, timings in results:
        for rule, count in part.pruned.items():
            cnt.pruned[rule] = cnt.pruned.get(rule, 0) + count
        cnt.searched += part.searched
        cnt.feasible += part.feasible
        cnt.evaluated += part.evaluated
        if near and (not closest or near[0][1] < closest[0][1]):
            closest = near
        known.update({len(cands) + j: got for j, got in timings.items()})
        cands += share
    return cnt, cands, closest, known
