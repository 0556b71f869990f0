"""A max-flow / min-cut solver (push-relabel, FIFO, with global relabelling; integer capacities).

The precision assignment is a two-label problem: which nodes go LOW (source side) and which stay
FP32 (sink side) so that the bytes Casts move are minimal. That is exactly a minimum s-t cut, so
we solve it exactly instead of flipping nodes one by one.

Why push-relabel rather than augmenting paths: model graphs are long chains and ladders whose
every value can leak to the sink (a Cast to an FP32 reader). Dinic's algorithm needs one phase per
path length there, O(n) phases of O(n) each: 23 s at 4k vertices on a chain with leaks.
Push-relabel moves excess one edge at a time along exact distance labels; with the labels
recomputed by a breadth-first search every O(n + m) units of work (global relabelling) its work on
such networks grows linearly.

The flow is carried to the end (the excess that cannot reach the sink is returned to the source),
so `source_side` is, whatever the solver, the vertices reachable from the source in the residual
graph of a maximum flow: the smallest source side of all minimum cuts (ties stay FP32).
"""

from __future__ import annotations

from collections import deque

INF = 1 << 200  # beyond any sum of finite capacities (cast costs are weighted bytes)


class FlowNetwork:
    """Directed graph with integer capacities; vertices are 0..n-1."""

    def __init__(self) -> None:
        self.adj: list[list[int]] = []
        self.head: list[int] = []  # edge -> target vertex
        self.cap: list[int] = []  # edge -> residual capacity (edge ^ 1 is its reverse)

    def add_vertex(self) -> int:
        self.adj.append([])
        return len(self.adj) - 1

    def add_edge(self, u: int, v: int, capacity: int) -> None:
        if u == v or capacity <= 0:
            return
        self.adj[u].append(len(self.head))
        self.head.append(v)
        self.cap.append(capacity)
        self.adj[v].append(len(self.head))
        self.head.append(u)
        self.cap.append(0)

    def _labels(self, s: int, t: int) -> list[int]:
        """Exact distance labels in the residual graph: to t; else n + the distance to s; else 2n.

        A breadth-first search backwards from t (then from s) over residual edges: v gets a label
        from w when the edge v -> w still has capacity (the reverse of an edge out of w).
        """
        adj, head, cap = self.adj, self.head, self.cap
        n = len(adj)
        label = [2 * n] * n
        for root, base in ((t, 0), (s, n)):
            label[root] = base
            frontier = [root]
            while frontier:
                nxt = []
                for w in frontier:
                    d = label[w] + 1
                    for e in adj[w]:
                        v = head[e]
                        if label[v] == 2 * n and cap[e ^ 1] > 0:
                            label[v] = d
                            nxt.append(v)
                frontier = nxt
        label[s] = n
        return label

    def max_flow(self, s: int, t: int) -> int:
        """Send as much flow from s to t as the residual capacities allow; the amount sent."""
        adj, head, cap = self.adj, self.head, self.cap
        n = len(adj)
        if s == t or n == 0:
            return 0
        label = self._labels(s, t)
        excess = [0] * n
        active = [False] * n
        queue: deque[int] = deque()
        for e in adj[s]:  # saturate every edge out of the source
            c = cap[e]
            if c > 0:
                v = head[e]
                cap[e] = 0
                cap[e ^ 1] += c
                excess[v] += c
                if v != t and v != s and not active[v]:
                    active[v] = True
                    queue.append(v)
        current = [0] * n  # the next edge to try, per vertex
        budget = 6 * n + len(head) // 2  # work between two global relabellings
        work = 0
        while queue:
            u = queue.popleft()
            active[u] = False
            if work > budget:  # labels drifted from the distances: recompute them exactly
                label = self._labels(s, t)
                current = [0] * n
                work = 0
            ex = excess[u]
            edges = adj[u]
            size = len(edges)
            lu = label[u]
            i = current[u]
            while ex > 0:
                if i == size:  # relabel: one above the lowest neighbour with capacity left
                    low = 2 * n
                    for e in edges:
                        if cap[e] > 0:
                            lv = label[head[e]]
                            if lv < low:
                                low = lv
                    work += size + 12
                    lu = label[u] = low + 1
                    i = 0
                    if lu > 2 * n:  # nowhere to go (cannot happen for a preflow's excess)
                        break
                    continue
                e = edges[i]
                c = cap[e]
                if c > 0:
                    v = head[e]
                    if lu == label[v] + 1:
                        sent = ex if ex < c else c
                        cap[e] = c - sent
                        cap[e ^ 1] += sent
                        ex -= sent
                        excess[v] += sent
                        if not active[v] and v != s and v != t:
                            active[v] = True
                            queue.append(v)
                        if ex == 0:
                            break
                i += 1
            excess[u] = ex
            current[u] = i
        return excess[t]

    def source_side(self, s: int) -> set[int]:
        """Vertices reachable from s in the residual graph (after max_flow: the cut's S side)."""
        seen = {s}
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for e in self.adj[u]:
                v = self.head[e]
                if self.cap[e] > 0 and v not in seen:
                    seen.add(v)
                    queue.append(v)
        return seen
