"""The Dinic max-flow solver placement/mincut.py used until push-relabel replaced it (kept as the
reference the new solver is checked against on random networks: same flow, same source side)."""

from __future__ import annotations

from collections import deque


class DinicNetwork:
    """Directed graph with integer capacities (augmenting paths in level graphs)."""

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
        level = [-1] * len(self.adj)
        level[s] = 0
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for e in self.adj[u]:
                v = self.head[e]
                if self.cap[e] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level if level[t] >= 0 else None

    def _augment(self, s: int, t: int, level: list[int], nxt: list[int]) -> int:
        """One augmenting path in the level graph (iterative DFS); its bottleneck, or 0."""
        path: list[int] = []  # edges
        u = s
        while True:
            if u == t:
                flow = min(self.cap[e] for e in path)
                for e in path:
                    self.cap[e] -= flow
                    self.cap[e ^ 1] += flow
                return flow
            adj = self.adj[u]
            while nxt[u] < len(adj):
                e = adj[nxt[u]]
                v = self.head[e]
                if self.cap[e] > 0 and level[v] == level[u] + 1:
                    break
                nxt[u] += 1
            if nxt[u] == len(adj):  # dead end: retreat
                if not path:
                    return 0
                level[u] = -1
                e = path.pop()
                u = self.head[e ^ 1]
                nxt[u] += 1
                continue
            e = adj[nxt[u]]
            path.append(e)
            u = self.head[e]

    def max_flow(self, s: int, t: int) -> int:
        total = 0
        while (level := self._levels(s, t)) is not None:
            nxt = [0] * len(self.adj)
            while flow := self._augment(s, t, level, nxt):
                total += flow
        return total

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
