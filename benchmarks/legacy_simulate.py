"""Compaction-lab simulation time at 1x, 2x and 4x messages (three strategies).

Run: .venv/bin/python benchmarks/bench_simulate.py [BASE]   (BASE messages, default 25,000)

The items carry their token counts, as they do after the first pass over a session
(counts are cached per message), so this measures the simulation itself. A call is
made after every second message, as in a chat where each user message gets an answer.
"""

from __future__ import annotations

import random
import sys
import time

from analysis import Item, RollingMessages, RollingTokens, StripThinking, simulate_items


def synthetic_history(n: int, seed: int = 7) -> tuple[list[Item], list[int]]:
    rng = random.Random(seed)
    items = [Item("sys", 800, special=True, group=0), Item("tools", 1_500, special=True, group=1)]
    group = 2
    while len(items) < n:
        if rng.random() < 0.2:  # a tool call and its result share a group
            items += [
                Item(f"m{len(items)}", rng.randint(20, 120), group=group),
                Item(f"m{len(items) + 1}", rng.randint(50, 2_000), group=group),
            ]
        else:
            items.append(
                Item(f"m{len(items)}", rng.randint(10, 600), group=group, thinking=rng.choice([0, 0, 50]))
            )
        group += 1
    items = items[:n]
    return items, list(range(3, n + 1, 2))


def best_of(runs: int, items: list[Item], calls: list[int]) -> float:
    times = []
    for _ in range(runs):
        strategies = [RollingTokens(60_000, 0.5), RollingMessages(40), StripThinking()]
        started = time.perf_counter()
        simulate_items(items, calls, strategies)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    base = int(sys.argv[1]) if len(sys.argv) > 1 else 25_000
    print(f"{'messages':>10} {'calls':>8} {'seconds':>9} {'per message':>12} {'vs 1x':>6}")
    first = None
    for factor in (1, 2, 4):
        items, calls = synthetic_history(base * factor)
        seconds = best_of(3, items, calls)
        first = first or seconds
        print(
            f"{len(items):>10} {len(calls):>8} {seconds:>9.3f} {seconds / len(items) * 1e6:>10.2f}us {seconds / first:>6.2f}"
        )


if __name__ == "__main__":
    main()
