"""Memory over time: ``chatmem serve`` under steady chat and REST load, its resident memory
(RSS) sampled every ``--sample-s`` seconds, to show whether it levels off (issue 11.7).

Two processes: ``chatmem serve`` (a subprocess, one worker, the embedded defaults: SQLite
files in a temp dir, the local embedder, the offline extractor) and this one, which runs the
scripted upstream (``chatmem.testing.ScriptedOpenAIServer`` answering with the demo's model,
in a thread, recording nothing) and the load. ``serve --scripted-upstream`` is not used
because that upstream records every request it answers, inside the measured process.

The load: ``--rate`` requests a second on a fixed schedule (at most ``--in-flight`` open at
once; a tick with none free is counted as skipped), over ``--users`` users and ``--sessions``
sessions, with messages of 1 to ``--message-kb`` KB of distinct text. Per 20 requests:
10 chat completions (``memory_context`` user and session, the session's last turns resent
as history), 2 Responses API calls continuing each user's chain, 3 searches, 2 memories
added, 2 session appends, 1 list. RSS is read from ``/proc/<pid>/status`` (VmRSS, the
server and any children).

Output, rewritten at every sample (a run cut short keeps what it had): ``<out>.json`` (the
samples and the summary), ``<out>.csv``, and the figures: ``--figure`` as an SVG line chart
(drawn here, no plotting library needed) and a Markdown table beside it. Run::

    python benchmarks/soak.py --minutes 30 --rate 10 \
        --out bench-results/soak --figure docs/images/soak-rss.svg
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

try:
    import chatmem  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from chatmem.server.demo import scripted_model
from chatmem.testing import ScriptedOpenAIServer

WORDS = [
    "trip",
    "budget",
    "Lisbon",
    "flight",
    "hotel",
    "sister",
    "Ines",
    "dog",
    "Pixel",
    "meeting",
    "Monday",
    "project",
    "Orion",
    "report",
    "deadline",
    "invoice",
    "garden",
    "tomatoes",
    "marathon",
    "training",
    "knee",
    "doctor",
    "piano",
    "lesson",
    "recipe",
    "lentils",
    "birthday",
    "gift",
    "camera",
    "lens",
    "apartment",
    "lease",
    "Berlin",
    "conference",
    "talk",
    "slides",
    "bicycle",
    "repair",
    "allergy",
    "peanuts",
    "newsletter",
    "draft",
    "tax",
    "return",
    "pension",
    "savings",
    "account",
]

#: Kinds of request in one round of 20.
MIX = ["chat"] * 10 + ["responses"] * 2 + ["search"] * 3 + ["add"] * 2 + ["append"] * 2
MIX += ["list"]


@dataclass
class Sample:
    t_s: float
    rss_mib: float
    sent: int
    errors: int
    skipped: int
    by_kind: dict[str, int] = field(default_factory=dict)
    #: SQLite's heap in the server (``sqlite3_memory_used``, via benchmarks/sqlite_probe.py).
    sqlite_mib: float = -1.0
    #: The server's threads, native ones included (/proc).
    threads: int = 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its children (MiB), from /proc."""
    total_kb = 0
    for each in [pid, *_children(pid)]:
        try:
            status = Path(f"/proc/{each}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total_kb += int(line.split()[1])
    return total_kb / 1024


def threads_of(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines()
                 if line.startswith("Threads:")), 0)  # fmt: skip


def sqlite_mib(probe: Path) -> float:
    """SQLite's heap in the server as its probe last wrote it (MiB; -1 when unknown)."""
    try:
        used = int(probe.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0
    return used / 2**20 if used >= 0 else -1.0


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    found = [int(child) for child in text.split()]
    return found + [grand for child in found for grand in _children(child)]


def message(rng: random.Random, n: int, max_kb: int) -> str:
    """Distinct text of 1 to ``max_kb`` KB, opening with a statement about the user."""
    size = rng.randint(1, max_kb) * 1024
    opening = (
        f"Note {n}: my {rng.choice(WORDS)} for the {rng.choice(WORDS)} is "
        f"{rng.randint(10, 99_999)} and I like {rng.choice(WORDS)}. "
    )
    body = " ".join(rng.choice(WORDS) for _ in range(size // 6))
    return (opening + body)[:size]


class Load:
    """The requests, their schedule, and what they did."""

    def __init__(self, base: str, args: argparse.Namespace) -> None:
        self.base = base
        self.args = args
        self.rng = random.Random(args.seed)
        self.sent = 0
        self.errors = 0
        self.skipped = 0
        self.by_kind: Counter[str] = Counter()
        self.error_kinds: Counter[str] = Counter()
        self.history: dict[str, list[dict[str, str]]] = {}
        self.chains: dict[str, str] = {}
        self.open = 0

    def _who(self) -> tuple[str, str]:
        session = self.rng.randrange(self.args.sessions)
        return f"user{session % self.args.users}", f"session{session}"

    def request(self, kind: str, n: int) -> tuple[str, str, dict[str, Any]]:
        user, session = self._who()
        max_kb = self.args.message_kb
        if kind == "chat":
            said = self.history.setdefault(session, [])
            said.append({"role": "user", "content": message(self.rng, n, max_kb)})
            del said[:-6]  # the client resends its last turns, as chat clients do
            context = {"user_id": user, "session_id": session}
            return "POST", "/v1/chat/completions", {
                "model": "m", "messages": list(said), "memory_context": context,
            }  # fmt: skip
        if kind == "responses":
            body: dict[str, Any] = {
                "model": "m",
                "input": message(self.rng, n, max(1, max_kb // 4)),
                "memory_context": {"user_id": user},
            }
            if user in self.chains and self.rng.random() < 0.8:
                body["previous_response_id"] = self.chains[user]
            return "POST", "/v1/responses", body
        if kind == "search":
            query = f"what is my {self.rng.choice(WORDS)} for the {self.rng.choice(WORDS)}?"
            return "POST", "/v1/memory/search", {"user_id": user, "query": query}
        if kind == "add":
            content = message(self.rng, n, min(8, max_kb))
            return "POST", "/v1/memory", {"user_id": user, "content": content}
        if kind == "append":
            said_now = [{"role": "user", "content": message(self.rng, n, max_kb)}]
            return "POST", f"/v1/sessions/{session}/messages", {
                "user_id": f"rest-{user}", "messages": said_now,
            }  # fmt: skip
        return "GET", f"/v1/memory?user_id={user}&limit=20", {}

    async def one(self, client: httpx.AsyncClient, kind: str, n: int) -> None:
        method, path, body = self.request(kind, n)
        try:
            if method == "GET":
                answer = await client.get(path)
            else:
                answer = await client.post(path, json=body)
            if answer.status_code >= 400:
                self.errors += 1
                self.error_kinds[f"{kind} {answer.status_code}"] += 1
            elif kind == "responses":
                user = body["memory_context"]["user_id"]
                self.chains[user] = answer.json()["id"]
            elif kind == "chat":
                session = body["memory_context"]["session_id"]
                reply = answer.json()["choices"][0]["message"]["content"]
                self.history[session].append({"role": "assistant", "content": reply})
        except httpx.HTTPError as exc:
            self.errors += 1
            self.error_kinds[f"{kind} {type(exc).__name__}"] += 1
        finally:
            self.open -= 1

    async def run(self, until: float) -> None:
        limits = httpx.Limits(max_connections=self.args.in_flight)
        async with httpx.AsyncClient(base_url=self.base, timeout=60, limits=limits) as client:
            tasks: set[asyncio.Task[None]] = set()
            period = 1.0 / self.args.rate
            next_at = time.monotonic()
            n = 0
            while time.monotonic() < until:
                kind = MIX[n % len(MIX)]
                n += 1
                if self.open >= self.args.in_flight:
                    self.skipped += 1
                else:
                    self.open += 1
                    self.sent += 1
                    self.by_kind[kind] += 1
                    task = asyncio.create_task(self.one(client, kind, n))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                next_at += period
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if tasks:
                await asyncio.wait(tasks, timeout=60)


def start_server(port: int, upstream: str, data: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATMEM")}
    env.update(XDG_DATA_HOME=str(data), CHATMEM__LOG_LEVEL="warning")
    probe = Path(__file__).resolve().with_name("sqlite_probe.py")
    command = [sys.executable, str(probe), str(data / "sqlite.probe"), "serve", "--port", str(port)]
    command += ["--upstream", upstream]
    log = open(data / "serve.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


def wait_up(server: subprocess.Popen[str], base: str) -> None:
    deadline = time.monotonic() + 180
    while True:
        if server.poll() is not None:
            raise SystemExit(f"chatmem serve exited with {server.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("chatmem serve did not start in 180 s")
        time.sleep(0.3)


def at_minute(samples: list[Sample], minute: float) -> Sample | None:
    """The sample nearest ``minute`` (None when the run did not get that far)."""
    reached = [s for s in samples if s.t_s <= minute * 60 + 5]
    if not reached or reached[-1].t_s < minute * 60 - 15:
        return None
    return min(reached, key=lambda s: abs(s.t_s - minute * 60))


def slope(samples: list[Sample], start_s: float, end_s: float) -> float | None:
    """Least-squares growth of RSS between two times (MiB per minute)."""
    part = [s for s in samples if start_s <= s.t_s <= end_s]
    if len(part) < 3:
        return None
    mean_t = sum(s.t_s for s in part) / len(part)
    mean_r = sum(s.rss_mib for s in part) / len(part)
    num = sum((s.t_s - mean_t) * (s.rss_mib - mean_r) for s in part)
    den = sum((s.t_s - mean_t) ** 2 for s in part)
    return num / den * 60 if den else None


def summary(samples: list[Sample], minutes: float) -> dict[str, Any]:
    marks = {}
    for minute in (0, 5, 10, 20, 30, minutes):
        found = at_minute(samples, minute)
        marks[f"{minute:g} min"] = round(found.rss_mib, 1) if found else None
    end = samples[-1].t_s if samples else 0.0
    first_half = slope(samples, 0, end / 2)
    last_third = slope(samples, end * 2 / 3, end)
    plateau = last_third is not None and abs(last_third) < 0.25
    return {
        "rss_mib_at": marks,
        "peak_rss_mib": round(max((s.rss_mib for s in samples), default=0.0), 1),
        "slope_first_half_mib_per_min": round(first_half, 3) if first_half is not None else None,
        "slope_last_third_mib_per_min": round(last_third, 3) if last_third is not None else None,
        "plateau": plateau,
        "ran_s": round(end, 1),
    }


def svg(samples: list[Sample], title: str) -> str:
    """A line chart of RSS over minutes, as SVG text."""
    width, height, pad = 720, 360, 56
    if not samples:
        return ""
    t_max = max(s.t_s for s in samples) / 60 or 1.0
    r_max = max(s.rss_mib for s in samples) * 1.1 or 1.0

    def x(t_min: float) -> float:
        return pad + (width - 2 * pad) * t_min / t_max

    def y(rss: float) -> float:
        return height - pad - (height - 2 * pad) * rss / r_max

    points = " ".join(f"{x(s.t_s / 60):.1f},{y(s.rss_mib):.1f}" for s in samples)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="14">{title}</text>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        'stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
    ]
    for i in range(6):
        t_min, rss = t_max * i / 5, r_max * i / 5
        parts.append(
            f'<text x="{x(t_min):.1f}" y="{height - pad + 18}" text-anchor="middle">'
            f"{t_min:.0f}</text>"
        )
        parts.append(f'<text x="{pad - 6}" y="{y(rss) + 4:.1f}" text-anchor="end">{rss:.0f}</text>')
        parts.append(
            f'<line x1="{pad}" y1="{y(rss):.1f}" x2="{width - pad}" y2="{y(rss):.1f}" '
            'stroke="#ddd"/>'
        )
    parts += [
        f'<text x="{width / 2}" y="{height - 14}" text-anchor="middle">minutes</text>',
        f'<text x="16" y="{height / 2}" transform="rotate(-90 16 {height / 2})" '
        'text-anchor="middle">RSS (MiB)</text>',
        f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="2"/>',
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def table(samples: list[Sample], result: dict[str, Any]) -> str:
    lines = ["| minute | RSS (MiB) | requests sent | errors |", "|---:|---:|---:|---:|"]
    for s in samples:
        if round(s.t_s) % 60 < 10 or s is samples[-1]:  # one row a minute
            lines.append(f"| {s.t_s / 60:.1f} | {s.rss_mib:.1f} | {s.sent} | {s.errors} |")
    marks = ", ".join(f"{k}: {v}" for k, v in result["rss_mib_at"].items())
    lines += [
        "",
        f"RSS at {marks}; peak {result['peak_rss_mib']} MiB; growth "
        f"{result['slope_first_half_mib_per_min']} MiB/min over the first half, "
        f"{result['slope_last_third_mib_per_min']} MiB/min over the last third "
        f"({'a plateau' if result['plateau'] else 'still growing'}).",
    ]
    return "\n".join(lines) + "\n"


def write(out: Path, figure: Path | None, samples: list[Sample], args: argparse.Namespace,
          load: Load, final: bool) -> dict[str, Any]:  # fmt: skip
    result = summary(samples, args.minutes)
    record = {
        "command": " ".join(sys.argv),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "figure")},
        "finished": final,
        "summary": result,
        "errors_by_kind": dict(load.error_kinds),
        "samples": [asdict(s) for s in samples],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1))
    with out.with_suffix(".csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["t_s", "rss_mib", "sqlite_mib", "threads", "sent", "errors", "skipped"])
        for s in samples:
            writer.writerow([round(s.t_s, 1), round(s.rss_mib, 1), round(s.sqlite_mib, 1),
                             s.threads, s.sent, s.errors, s.skipped])  # fmt: skip
    if figure is not None:
        figure.parent.mkdir(parents=True, exist_ok=True)
        title = f"chatmem serve RSS, {args.rate:g} requests/s, messages up to {args.message_kb} KB"
        figure.write_text(svg(samples, title))
        figure.with_suffix(".md").write_text(table(samples, result))
    return result


async def sample_loop(pid: int, load: Load, began: float, until: float, every: float,
                      on_sample: Any, probe: Path) -> None:  # fmt: skip
    samples: list[Sample] = []
    while True:
        now = time.monotonic()
        samples.append(
            Sample(
                now - began,
                rss_mib(pid),
                load.sent,
                load.errors,
                load.skipped,
                dict(load.by_kind),
                sqlite_mib(probe),
                threads_of(pid),
            )  # fmt: skip
        )
        on_sample(samples)
        if now >= until:
            return
        await asyncio.sleep(min(every, max(0.0, until - time.monotonic())))


async def main_async(args: argparse.Namespace) -> None:
    out, figure = Path(args.out), Path(args.figure) if args.figure else None
    with (
        tempfile.TemporaryDirectory(prefix="chatmem-soak-") as tmp,
        ScriptedOpenAIServer(responder=scripted_model, record=False) as upstream,
    ):
        port = args.port or free_port()
        base = f"http://127.0.0.1:{port}"
        server = start_server(port, upstream.base_url, Path(tmp))
        try:
            wait_up(server, base)
            load = Load(base, args)
            began = time.monotonic()
            until = began + args.minutes * 60

            def on_sample(samples: list[Sample]) -> None:
                last = samples[-1]
                print(f"{last.t_s / 60:6.1f} min  RSS {last.rss_mib:7.1f} MiB  SQLite "
                      f"{last.sqlite_mib:6.1f} MiB  threads {last.threads}  sent {last.sent}"
                      f"  errors {last.errors}  skipped {last.skipped}", flush=True)  # fmt: skip
                write(out, figure, samples, args, load, final=last.t_s >= args.minutes * 60)

            await asyncio.gather(
                load.run(until), sample_loop(server.pid, load, began, until, args.sample_s,
                                             on_sample, Path(tmp) / "sqlite.probe"),
            )  # fmt: skip
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
    print(out.with_suffix(".json").read_text().split('"samples"')[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=10.0, help="requests a second")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=400)
    parser.add_argument("--sessions", type=int, default=4000)
    parser.add_argument("--message-kb", type=int, default=24, help="largest message (KB)")
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--out", default="bench-results/soak")
    parser.add_argument("--figure", default="docs/images/soak-rss.svg")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
