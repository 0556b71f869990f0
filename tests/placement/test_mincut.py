"""Unit tests of placement/mincut.py: the exact min cut that places free nodes (source = LOW, sink =
FP32), on hand-built networks and cross-checked against brute force on small random ones.

The random networks are built the way passes/assign.py builds its cut: node vertices, fixed
nodes tied to their side by INF edges, preference edges of weight 1, and per value the two-helper
gadget whose cut costs the value's Cast weight once whatever the number of disagreeing readers.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_convert.placement import mincut
from amp_convert.placement.mincut import INF, FlowNetwork
from tests.placement.dinic_reference import DinicNetwork

pytestmark = pytest.mark.integration


def _net(n: int) -> tuple[FlowNetwork, list[int]]:
    net = FlowNetwork()
    return net, [net.add_vertex() for _ in range(n)]


def _cut_cost(net_edges: list[tuple[int, int, int]], side: set[int]) -> int:
    """What a cut with source side `side` costs: the capacities of the edges leaving it."""
    return sum(c for u, v, c in net_edges if u in side and v not in side)


# ---------------------------------------------------------------- hand-built networks
def test_vertices_are_numbered_in_order() -> None:
    net, vs = _net(3)
    assert vs == [0, 1, 2]
    assert net.add_vertex() == 3


def test_self_loops_and_non_positive_capacities_add_no_edge() -> None:
    net, (s, a, t) = _net(3)
    net.add_edge(s, s, 5)
    net.add_edge(s, a, 0)
    net.add_edge(a, t, -3)
    assert net.head == [] and net.cap == []
    assert net.max_flow(s, t) == 0
    assert net.source_side(s) == {s}


def test_an_edge_has_a_zero_capacity_reverse() -> None:
    net, (s, t) = _net(2)
    net.add_edge(s, t, 9)
    assert net.head == [t, s] and net.cap == [9, 0]
    assert net.adj == [[0], [1]]


def test_disconnected_sink_needs_no_cut() -> None:
    net, (s, a, t) = _net(3)
    net.add_edge(s, a, 4)
    assert net.max_flow(s, t) == 0
    assert net.source_side(s) == {s, a}


def test_chain_is_cut_at_its_cheapest_edge() -> None:
    net, (s, a, b, c, t) = _net(5)
    for (u, v), w in zip([(s, a), (a, b), (b, c), (c, t)], [7, 5, 2, 6], strict=True):
        net.add_edge(u, v, w)
    assert net.max_flow(s, t) == 2
    assert net.source_side(s) == {s, a, b}


def test_diamond_sums_both_paths() -> None:
    """s -> a -> t and s -> b -> t, each cut at its own bottleneck."""
    net, (s, a, b, t) = _net(4)
    net.add_edge(s, a, 3)
    net.add_edge(a, t, 8)
    net.add_edge(s, b, 9)
    net.add_edge(b, t, 4)
    assert net.max_flow(s, t) == 7
    assert net.source_side(s) == {s, b}


def test_diamond_with_a_cross_edge() -> None:
    """Flow through the cross edge a -> b; two cuts of 11 tie and the smaller side is kept."""
    net, (s, a, b, t) = _net(4)
    net.add_edge(s, a, 10)
    net.add_edge(s, b, 1)
    net.add_edge(a, b, 10)
    net.add_edge(a, t, 1)
    net.add_edge(b, t, 10)
    assert net.max_flow(s, t) == 11
    assert net.source_side(s) == {s}


def test_a_tie_leaves_the_smallest_source_side() -> None:
    """Two cuts cost the same: the residual graph reaches only what must be LOW."""
    net, (s, a, t) = _net(3)
    net.add_edge(s, a, 5)
    net.add_edge(a, t, 5)
    assert net.max_flow(s, t) == 5
    assert net.source_side(s) == {s}


def test_a_weight_one_preference_breaks_a_tie() -> None:
    """assign's tie-break: a weight-1 edge from the source pulls a free node LOW."""
    net, (s, a, t) = _net(3)
    net.add_edge(s, a, 5)
    net.add_edge(s, a, 1)  # parallel edges add up
    net.add_edge(a, t, 5)
    assert net.max_flow(s, t) == 5
    assert net.source_side(s) == {s, a}


def test_infinite_edges_hold_a_fixed_node_on_its_side() -> None:
    net, (s, fixed_low, fixed_fp32, free, t) = _net(5)
    net.add_edge(s, fixed_low, INF)
    net.add_edge(fixed_fp32, t, INF)
    net.add_edge(fixed_low, free, 3)
    net.add_edge(free, fixed_fp32, 2)
    assert net.max_flow(s, t) == 2
    assert net.source_side(s) == {s, fixed_low, free}


def test_infinite_path_gives_an_infinite_flow() -> None:
    """Conflicting hard rules are an INF-sized cut, which a caller can see."""
    net, (s, a, t) = _net(3)
    net.add_edge(s, a, INF)
    net.add_edge(a, t, INF)
    assert net.max_flow(s, t) == INF


def test_a_second_max_flow_finds_nothing_left() -> None:
    net, (s, a, t) = _net(3)
    net.add_edge(s, a, 4)
    net.add_edge(a, t, 6)
    assert net.max_flow(s, t) == 4
    assert net.max_flow(s, t) == 0
    assert net.source_side(s) == {s}


def test_long_chain_does_not_recurse() -> None:
    """The DFS is iterative: a chain far deeper than Python's recursion limit is fine."""
    net = FlowNetwork()
    s = net.add_vertex()
    chain = [net.add_vertex() for _ in range(5000)]
    t = net.add_vertex()
    net.add_edge(s, chain[0], INF)
    for u, v in itertools.pairwise(chain):
        net.add_edge(u, v, 3)
    net.add_edge(chain[-1], t, 2)
    assert net.max_flow(s, t) == 2
    assert net.source_side(s) == {s, *chain}


# ---------------------------------------------------------------- brute force on random networks
@dataclass(frozen=True)
class _Value:
    """A float value: its producer and readers (node indices, or the sides "low"/"fp32")."""

    producer: int | str
    readers: tuple[int | str, ...]
    weight: int


@dataclass(frozen=True)
class _Problem:
    fixed: dict[int, bool]  # node -> LOW?
    free: int  # nodes fixed..fixed+free-1 are free
    prefer_low: bool
    values: tuple[_Value, ...]

    @property
    def nodes(self) -> int:
        return len(self.fixed) + self.free


def _casts(problem: _Problem, low: dict[int | str, bool]) -> int:
    """The cost assign's cut stands for: per value, its weight once for a Cast up (LOW producer,
    some FP32 reader) and once for a Cast down (FP32 producer, some LOW reader)."""
    cost = 0
    for value in problem.values:
        p = low[value.producer]
        if any(low[r] != p for r in value.readers):
            cost += value.weight
    return cost


def _preference(problem: _Problem, low: dict[int | str, bool]) -> int:
    free = range(len(problem.fixed), problem.nodes)
    return sum(1 for i in free if low[i] != problem.prefer_low)


def _build(problem: _Problem) -> tuple[FlowNetwork, int, int, list[int]]:
    """The network passes/assign.py builds for these nodes and values (its _add_value gadget)."""
    net = FlowNetwork()
    src, sink = net.add_vertex(), net.add_vertex()
    vertex = [net.add_vertex() for _ in range(problem.nodes)]
    side = {"low": src, "fp32": sink}
    for i, is_low in problem.fixed.items():
        net.add_edge(*((src, vertex[i]) if is_low else (vertex[i], sink)), INF)
    for i in range(len(problem.fixed), problem.nodes):
        net.add_edge(*((src, vertex[i]) if problem.prefer_low else (vertex[i], sink)), 1)
    for value in problem.values:
        p = side[value.producer] if isinstance(value.producer, str) else vertex[value.producer]
        readers = {side[r] if isinstance(r, str) else vertex[r] for r in value.readers} - {p}
        if not readers:
            continue
        if p != sink:
            a = net.add_vertex()
            net.add_edge(p, a, value.weight)
            for r in readers:
                net.add_edge(a, r, INF)
        if p != src:
            b = net.add_vertex()
            net.add_edge(b, p, value.weight)
            for r in readers:
                net.add_edge(r, b, INF)
    return net, src, sink, vertex


@st.composite
def _problems(draw: st.DrawFn) -> _Problem:
    n_fixed = draw(st.integers(0, 3))
    n_free = draw(st.integers(1, 8))
    n = n_fixed + n_free
    fixed = {i: draw(st.booleans()) for i in range(n_fixed)}
    ends: st.SearchStrategy[int | str] = st.one_of(
        st.integers(0, n - 1), st.sampled_from(["low", "fp32"])
    )
    value = st.builds(
        _Value,
        producer=ends,
        readers=st.lists(ends, min_size=1, max_size=4).map(tuple),
        weight=st.integers(1, 1000),
    )
    values = draw(st.lists(value, min_size=0, max_size=12).map(tuple))
    return _Problem(fixed, n_free, draw(st.booleans()), values)


def _brute_force(problem: _Problem) -> int:
    """min over every assignment of the free nodes of (casts, then preference) as one number."""
    per_cast = problem.free + 1  # as in assign: one unit of weight outweighs every preference
    best: int | None = None
    n_fixed = len(problem.fixed)
    for bits in itertools.product([False, True], repeat=problem.free):
        low: dict[int | str, bool] = {"low": True, "fp32": False}
        low.update(problem.fixed.items())
        low.update({n_fixed + i: b for i, b in enumerate(bits)})
        cost = _casts(problem, low) * per_cast + _preference(problem, low)
        best = cost if best is None else min(best, cost)
    assert best is not None
    return best


def _scaled(problem: _Problem) -> _Problem:
    """The same values with weights scaled the way assign scales bytes above the preference."""
    per_cast = problem.free + 1
    values = tuple(_Value(v.producer, v.readers, v.weight * per_cast) for v in problem.values)
    return _Problem(problem.fixed, problem.free, problem.prefer_low, values)


@settings(max_examples=150, deadline=None)
@given(_problems())
def test_cut_matches_brute_force_over_every_assignment(problem: _Problem) -> None:
    net, src, sink, vertex = _build(_scaled(problem))
    flow = net.max_flow(src, sink)
    expected = _brute_force(problem)
    assert flow == expected
    side = net.source_side(src)
    assert sink not in side
    low: dict[int | str, bool] = {"low": True, "fp32": False}
    low.update({i: vertex[i] in side for i in range(problem.nodes)})
    assert all(low[i] == is_low for i, is_low in problem.fixed.items())  # hard rules hold
    per_cast = problem.free + 1
    assert _casts(problem, low) * per_cast + _preference(problem, low) == expected


_EDGE = st.tuples(st.integers(0, 11), st.integers(0, 11), st.integers(1, 50))


@settings(max_examples=150, deadline=None)
@given(
    n_free=st.integers(1, 10),
    terminals=st.lists(st.booleans(), max_size=3),
    edges=st.lists(_EDGE, max_size=30),
)
def test_raw_cut_matches_brute_force(n_free: int, terminals: list[bool], edges: list) -> None:
    """On arbitrary directed graphs: the flow equals the cheapest s-t cut over all 2^n sides of
    the free vertices, and source_side is such a cut; fixed vertices keep their side."""
    net = FlowNetwork()
    s, t = net.add_vertex(), net.add_vertex()
    fixed = [net.add_vertex() for _ in terminals]
    free = [net.add_vertex() for _ in range(n_free)]
    everything = [s, t, *fixed, *free]
    added: list[tuple[int, int, int]] = []

    def add(u: int, v: int, c: int) -> None:
        net.add_edge(u, v, c)
        if u != v:
            added.append((u, v, c))

    for f, is_low in zip(fixed, terminals, strict=True):
        add(*((s, f) if is_low else (f, t)), INF)
    for u, v, c in edges:
        add(everything[u % len(everything)], everything[v % len(everything)], c)
    flow = net.max_flow(s, t)
    forced = {s, *(f for f, is_low in zip(fixed, terminals, strict=True) if is_low)}
    best = min(
        _cut_cost(added, forced | {v for v, b in zip(free, bits, strict=True) if b})
        for bits in itertools.product([False, True], repeat=n_free)
    )
    assert flow == best
    side = net.source_side(s)
    assert t not in side and forced <= side
    assert not (set(fixed) - forced) & side
    assert _cut_cost(added, side) == best


@pytest.mark.parametrize("prefer_low", [True, False])
def test_gadget_counts_a_value_once_however_many_readers_disagree(prefer_low: bool) -> None:
    """One LOW producer read by three FP32 nodes is one Cast, not three."""
    problem = _Problem(
        fixed={0: True, 1: False, 2: False, 3: False},
        free=0,
        prefer_low=prefer_low,
        values=(_Value(0, (1, 2, 3), 7),),
    )
    net, src, sink, _ = _build(problem)
    assert net.max_flow(src, sink) == 7


def test_gadget_moves_a_free_node_to_the_cheaper_side() -> None:
    """A free node between a LOW producer (heavy value) and an FP32 reader (light value)."""
    problem = _Problem(
        fixed={0: True, 1: False},
        free=1,
        prefer_low=False,
        values=(_Value(0, (2,), 100), _Value(2, (1,), 10)),
    )
    net, src, sink, vertex = _build(_scaled(problem))
    assert net.max_flow(src, sink) == 10 * 2 + 1  # the light Cast, and the preference lost
    assert vertex[2] in net.source_side(src)


# ---------------------------------------------------------------- cut values and sides
def test_min_cut_value_and_side() -> None:
    net, (s, a, b, t) = _net(4)
    net.add_edge(s, a, 3)
    net.add_edge(s, b, 2)
    net.add_edge(a, b, 1)
    net.add_edge(a, t, 2)
    net.add_edge(b, t, 3)
    assert net.max_flow(s, t) == 5
    assert net.source_side(s) == {s}


def test_min_cut_infinite_edges_are_never_cut() -> None:
    net, (s, a, t) = _net(3)
    net.add_edge(s, a, INF)
    net.add_edge(a, t, 7)
    assert net.max_flow(s, t) == 7
    assert net.source_side(s) == {s, a}


def test_min_cut_chain_needs_one_cut() -> None:
    """A long chain between a LOW source and an FP32 sink is cut once, at its cheapest edge."""
    net, (s, t, *chain) = _net(52)
    net.add_edge(s, chain[0], INF)
    for i, (u, v) in enumerate(itertools.pairwise(chain)):
        net.add_edge(u, v, 10 if i != 30 else 4)
        net.add_edge(v, u, 10 if i != 30 else 4)
    net.add_edge(chain[-1], t, INF)
    assert net.max_flow(s, t) == 4
    assert net.source_side(s) == {s, *chain[:31]}


# ------------------------------------------------------ against the Dinic solver it replaced
_SHAPES = ("random", "chain with leaks", "ladder", "layered DAG")


def _reference_network(shape: str, n: int, seed: int) -> list[tuple[int, int, int]]:
    """Edges (u, v, capacity) on vertices 0..n+1 (0 = source, 1 = sink) of one of the network
    shapes assign builds: long chains whose vertices leak to the sink, two-rail ladders with
    rungs, layered DAGs of wide stages, and arbitrary graphs; INF edges pin a few vertices."""
    rnd = random.Random(seed)
    vs = list(range(2, n + 2))
    edges: list[tuple[int, int, int]] = []

    def cap() -> int:
        return rnd.choice([rnd.randint(1, 20), rnd.randint(1, 10**6), 10**12])

    if shape == "chain with leaks":
        edges += [(a, b, cap()) for a, b in itertools.pairwise(vs)]
        edges += [(v, 1, rnd.randint(1, 5)) for v in vs]
    elif shape == "ladder":
        rails = vs[0::2], vs[1::2]
        for rail in rails:
            edges += [(a, b, cap()) for a, b in itertools.pairwise(rail)]
        edges += [(a, b, cap()) for a, b in zip(rails[0], rails[1][1:], strict=False)]
        edges += [(b, a, cap()) for a, b in zip(rails[0][1:], rails[1], strict=False)]
    elif shape == "layered DAG":
        width = max(2, int(n**0.5))
        layers = [vs[i : i + width] for i in range(0, n, width)]
        for upper, lower in itertools.pairwise(layers):
            for v in lower:
                edges += [(u, v, cap()) for u in rnd.sample(upper, min(len(upper), 3))]
    else:
        edges += [(rnd.choice(vs), rnd.choice(vs), cap()) for _ in range(3 * n)]
    pinned = INF if rnd.random() < 0.3 else cap()
    edges += [(0, v, pinned) for v in rnd.sample(vs, max(1, n // 8))]
    edges += [(v, 1, INF if rnd.random() < 0.3 else cap()) for v in rnd.sample(vs, max(1, n // 8))]
    edges += [(v, rnd.choice(vs), cap()) for v in rnd.sample(vs, n // 10)]  # back and cross
    return edges


@settings(max_examples=150, deadline=None)
@given(
    shape=st.sampled_from(_SHAPES),
    n=st.integers(2, 400),
    seed=st.integers(0, 2**32 - 1),
    work=st.sampled_from([0, 1, mincut.AUGMENTING_WORK]),
)
def test_flow_and_side_equal_the_dinic_solver_on_random_networks(
    shape: str, n: int, seed: int, work: int
) -> None:
    """The solver against the Dinic-only solver it replaced (tests/placement/
    dinic_reference.py): the same maximum flow, and the same source side (the smallest of all
    minimum cuts, which every maximum flow's residual graph gives), whether push-relabel does it
    all (work 0), takes over after a pass of augmenting paths, or at the default budget."""
    saved, mincut.AUGMENTING_WORK = mincut.AUGMENTING_WORK, work
    try:
        _check_against_dinic(_reference_network(shape, n, seed), n)
    finally:
        mincut.AUGMENTING_WORK = saved


def _check_against_dinic(edges: list[tuple[int, int, int]], n: int) -> None:
    new, old = FlowNetwork(), DinicNetwork()
    for _ in range(n + 2):
        new.add_vertex()
        old.add_vertex()
    for u, v, c in edges:
        new.add_edge(u, v, c)
        old.add_edge(u, v, c)
    flow = new.max_flow(0, 1)
    assert flow == old.max_flow(0, 1)
    side = new.source_side(0)
    assert side == old.source_side(0)
    assert _cut_cost([e for e in edges if e[0] != e[1]], side) == flow  # a cut of that value
    assert new.max_flow(0, 1) == 0  # a maximum flow: nothing left to send


def test_chain_with_leaks_at_scale() -> None:
    """A chain whose every vertex leaks to the sink (the network Dinic needed n phases for):
    every leak is saturated and the rest returns to the source."""
    net = FlowNetwork()
    s, t = net.add_vertex(), net.add_vertex()
    chain = [net.add_vertex() for _ in range(20_000)]
    net.add_edge(s, chain[0], INF)
    for u, v in itertools.pairwise(chain):
        net.add_edge(u, v, 10**9)
    for v in chain:
        net.add_edge(v, t, 3)
    assert net.max_flow(s, t) == 3 * len(chain)
    assert net.source_side(s) == {s, *chain}
