"""Where the service's time goes under concurrent clients: py-spy on the service process.

Starts the stand-in upstream and the service as ``proxy.py`` does (``--memories`` seeded for
one user, maintenance on as configured by default), waits ``--settle`` seconds (0: measure
while the start-up decay sweep runs), then runs ``--clients`` closed-loop clients for
``--seconds`` with memory on while ``py-spy record`` samples the service, and prints:

- requests/s, p50/p95 and the answers with and without memory;
- the share of samples per thread and per function (inclusive), and the top self frames.

``--gil`` samples only the thread holding the interpreter lock (what Python code costs);
without it every thread that is not idle is sampled (a thread waiting for the lock counts).

    OPENBLAS_NUM_THREADS=1 python benchmarks/proxy_profile.py --settle 60 --gil

Needs ``py-spy`` (pip install py-spy) and the right to trace the child (root, or
``ptrace_scope`` 0). Sampling slows the service: compare runs made with the same flags.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import proxy  # benchmarks/proxy.py: the parties, the questions and the load loop


def _frame(raw: str) -> str:
    """``function (path:line)`` as ``function file``."""
    name = re.sub(r" \(.*?:\d+\)", "", raw)
    where = re.search(r"\((.*?):\d+\)", raw)
    return f"{name} {where.group(1).rsplit('/', 1)[-1]}" if where else name


def summarise(raw_path: Path, top: int) -> str:
    """Threads, inclusive functions and self frames of a py-spy ``raw`` file, as text."""
    threads: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw_path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        samples = int(count)
        frames = stack.split(";")
        total += samples
        threads[re.sub(r"\(\d+\)", "", frames[0])] += samples
        for name in {_frame(f) for f in frames[1:]}:
            inclusive[name] += samples
        own[_frame(frames[-1])] += samples
    if not total:
        return "no samples"
    out = [f"{total} samples"]
    for title, counts in (("threads", threads), ("inclusive", inclusive), ("self", own)):
        out.append(f"\n{title}:")
        out += [f"{100 * n / total:5.1f} %  {name}" for name, n in counts.most_common(top)]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--settle", type=float, default=0.0, help="seconds before the load")
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--gil", action="store_true", help="sample the lock holder only")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    parties = proxy.Parties(
        argparse.Namespace(
            in_process=False,
            backlog=1024,
            memories=args.memories,
            seed=args.seed,
            keep_alive=False,
        )
    )
    try:
        rng, seen = random.Random(args.seed + 2), set[str]()
        questions = [proxy.personal(rng, seen) for _ in range(3000)]
        bodies = [proxy.chat(q, 10**7 + n // 4) for n, q in enumerate(questions)]
        url = f"{parties.proxy}/v1/chat/completions"
        time.sleep(args.settle)
        asyncio.run(proxy.load(url, bodies[:200], 4, 3.0))  # warm the clients' connections
        with tempfile.TemporaryDirectory() as folder:
            raw = Path(folder) / "profile.txt"
            command = [spy, "record", "-p", str(parties.service_task.pid), "-r", str(args.rate)]
            command += ["-f", "raw", "--threads", "--nonblocking", "-o", str(raw)]
            command += ["--gil"] if args.gil else []
            sampler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            loaded = asyncio.run(proxy.load(url, bodies[200:], args.clients, args.seconds))
            sampler.send_signal(signal.SIGINT)
            sampler.wait(timeout=60)
            ms = loaded["ms"] or {}
            print(
                f"{loaded['requests_per_s']:.1f} requests/s, p50 {ms.get('p50', 0):.1f} ms,"
                f" p95 {ms.get('p95', 0):.1f} ms, outcomes {loaded['outcomes']}"
            )
            print(summarise(raw, args.top) if raw.exists() else "py-spy wrote nothing")
    finally:
        parties.close()


if __name__ == "__main__":
    main()
