"""A max-flow / min-cut solver: augmenting paths (Dinic) while they are cheap, then push-relabel.

The precision assignment is a two-label problem: which nodes go LOW (source side) and which stay
FP32 (sink side) so that the bytes Casts move are minimal. That is exactly a minimum s-t cut, so
we solve it exactly instead of flipping nodes one by one.

Why two algorithms: on the networks real models give, Dinic's algorithm finds the flow in one or
a few phases (a 10k-node transformer stack: 1 phase, 0.13 s; push-relabel takes 1.1 s there,
moving every unit of the source's excess back one edge at a time). But on a long chain whose every
vertex also leaks to the sink (or a ladder), Dinic needs one phase per path length, O(n) phases of
O(n) each: 28 s at 4k vertices. So augmenting paths run while their work stays within a few
passes over the network (AUGMENTING_WORK), and push-relabel (FIFO, exact labels recomputed by a
breadth-first search every O(n + m) units of work) finishes from the residual network they leave:
its work on such networks grows linearly.

The flow is carried to the end (push-relabel returns the excess that cannot reach the sink to the
source), so `source_side` is, whatever the solver, the vertices reachable from the source in the
residual graph of a maximum flow: the smallest source side of all minimum cuts (ties stay FP32).
"""

from __future__ import annotations

from collections import deque

INF = 1 << 200  # beyond any sum of finite capacities (cast costs are weighted bytes)
#: edge scans augmenting paths may spend, in passes over the network (vertices + edges), before
#: push-relabel takes over
AUGMENTING_WORK = 4


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

    def _levels(self, s: int, t: int) -> list[int] | None:
        """Breadth-first distances from s over edges with capacity left; None if t is cut off."""
        adj, head, cap = self.adj, self.head, self.cap
        level = [-1] * len(adj)
        level[s] = 0
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for e in adj[u]:
                v = head[e]
                if cap[e] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level if level[t] >= 0 else None

    def _augment(self, s: int, t: int, level: list[int], nxt: list[int]) -> int:
        """One augmenting path in the level graph (iterative DFS); its bottleneck, or 0."""
        adj, head, cap = self.adj, self.head, self.cap
        path: list[int] = []  # edges
        u = s
        while True:
            if u == t:
                flow = min(cap[e] for e in path)
                for e in path:
                    cap[e] -= flow
                    cap[e ^ 1] += flow
                return flow
            edges = adj[u]
            i = nxt[u]
            while i < len(edges):
                e = edges[i]
                if cap[e] > 0 and level[head[e]] == level[u] + 1:
                    break
                i += 1
            nxt[u] = i
            if i == len(edges):  # dead end: retreat
                if not path:
                    return 0
                level[u] = -1
                e = path.pop()
                u = head[e ^ 1]
                nxt[u] += 1
                continue
            e = edges[i]
            path.append(e)
            u = head[e]

    def max_flow(self, s: int, t: int) -> int:
        """Send as much flow from s to t as the residual capacities allow; the amount sent."""
        if s == t or not self.adj:
            return 0
        total = 0
        size = len(self.adj) + len(self.head)
        budget, spent = AUGMENTING_WORK * size, 0
        while spent < budget:
            level = self._levels(s, t)
            if level is None:
                return total  # no augmenting path left: a maximum flow
            nxt = [0] * len(self.adj)
            while flow := self._augment(s, t, level, nxt):
                total += flow
            spent += size + sum(nxt)  # the search, and the edges the paths passed over
        return total + self._push_relabel(s, t)

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

    def _push_relabel(self, s: int, t: int) -> int:
        """A maximum flow from s to t on the residual network (FIFO push-relabel); its amount."""
        adj, head, cap = self.adj, self.head, self.cap
        n = len(adj)
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
