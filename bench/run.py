"""The benchmark suite: a real daemon against the machine's own floor, measured in one run.

    .venv/bin/python bench/run.py              # full sizes: prints a table, writes JSON
    .venv/bin/python bench/run.py --smoke      # tiny sizes, for the test suite

Every figure comes with a baseline measured in the same run (where the issue names one) and
the ratio to it; latencies are medians over repeated rounds, with their p99 beside them.
Benchmarks are not tests: only the smoke mode runs in CI, so the suite cannot rot.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol import ClientConnection, FrameDecoder, SupervisorError, encode_frame
from supervisor.client import Client, open_client
from supervisor.pumps import FULL_PIPE_GROWS_TO

PY = sys.executable
F_SETPIPE_SZ = 1031  # Python 3.11 does not name it
#: Throughput figures are the median of this many runs (each beside its own baseline).
THROUGHPUT_ROUNDS = 3


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    baseline: float | None = None
    target: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        return self.value / self.baseline  # type: ignore[operator]


@dataclass
class Sizes:
    rounds: int
    capture_bytes: int
    delivery_bytes: int
    sleepers: int
    idle_seconds: float
    terminal_bytes: int


FULL = Sizes(rounds=500, capture_bytes=1 << 30, delivery_bytes=256 << 20, sleepers=1000,
             idle_seconds=30.0, terminal_bytes=64 << 20)  # fmt: skip
SMOKE = Sizes(rounds=20, capture_bytes=4 << 20, delivery_bytes=2 << 20, sleepers=20,
              idle_seconds=0.5, terminal_bytes=1 << 20)  # fmt: skip


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: list[float]) -> tuple[float, float]:
    return statistics.median(seconds) * 1000, pct(seconds, 0.99) * 1000


class Daemon:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-", dir="/tmp"))
        self.address = f"unix:{self.dir}/d.sock"
        self.proc = subprocess.Popen(
            [PY, "-m", "supervisor", "serve", "--listen", self.address,
             "--workspace", str(self.dir / "ws"), "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not (self.dir / "d.sock").exists():
            assert time.monotonic() < deadline, "daemon did not start"
            time.sleep(0.01)
        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        times = self.ps.cpu_times()
        return float(times.user + times.system)

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


# -- baselines ------------------------------------------------------------------------------


def spawn_wait_true() -> float:
    started = time.perf_counter()
    pid = os.posix_spawn("/bin/true", ["true"], os.environ)
    os.waitpid(pid, 0)
    return time.perf_counter() - started


def spawn_burst(n: int) -> float:
    """The floor for the burst: `n` posix_spawns of /bin/true back to back, in one process,
    with no RPC at all; then they are reaped."""
    started = time.perf_counter()
    pids = [os.posix_spawn("/bin/true", ["true"], os.environ) for _ in range(n)]
    elapsed = time.perf_counter() - started
    for pid in pids:
        os.waitpid(pid, 0)
    return elapsed


def spawn_rate(concurrency: int, seconds: float) -> float:
    """posix_spawn + waitpid per second with `concurrency` worker processes."""
    code = (
        "import os, time, sys\n"
        "end = time.monotonic() + float(sys.argv[1]); n = 0\n"
        "while time.monotonic() < end:\n"
        "    os.waitpid(os.posix_spawn('/bin/true', ['true'], os.environ), 0); n += 1\n"
        "print(n)\n"
    )
    workers = [
        subprocess.Popen([PY, "-c", code, str(seconds)], stdout=subprocess.PIPE, text=True)
        for _ in range(concurrency)
    ]
    total = sum(int(w.communicate()[0]) for w in workers)
    return total / seconds


def writer_argv(total: int, chunk: int = 1 << 20) -> list[str]:
    return [
        PY,
        "-c",
        f"import os\nb = bytes({chunk})\nfor _ in range({total // chunk}): os.write(1, b)",
    ]


async def bare_trio_capture(total: int) -> float:
    """The same writer, read by a bare trio loop in this process: the floor for capture. Its
    pipe has the size the daemon grows a full pipe to."""
    r, w = os.pipe()
    fcntl.fcntl(r, F_SETPIPE_SZ, FULL_PIPE_GROWS_TO)
    pid = os.posix_spawn(  # noqa: ASYNC221 - the bare baseline: one quick spawn
        PY, writer_argv(total), os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, w, 1)]
    )
    os.close(w)
    stream = trio.lowlevel.FdStream(r)
    started = time.perf_counter()
    while await stream.receive_some(1 << 20):
        pass
    elapsed = time.perf_counter() - started
    await stream.aclose()
    os.waitpid(pid, 0)  # noqa: ASYNC222 - the writer has closed its end: it is exiting
    return total / elapsed


def shell_pipe_rate(total: int) -> float:
    started = time.perf_counter()
    subprocess.run(["sh", "-c", f"head -c {total} /dev/zero | cat > /dev/null"], check=True)
    return total / (time.perf_counter() - started)


async def _receive_frame(stream: trio.SocketStream, decoder: FrameDecoder) -> dict[str, Any] | None:
    while (message := decoder.next_message()) is None:
        data = await stream.receive_some(1 << 16)
        if not data:
            return None
        decoder.feed(data)
    return message


@contextlib.asynccontextmanager
async def _bare_server(
    handle: Callable[[trio.SocketStream], Awaitable[None]],
) -> AsyncIterator[str]:
    """A bare trio server on a Unix socket (a task per connection, as `trio.serve_listeners`
    gives): yields the socket's path."""
    path = tempfile.mktemp(prefix="bare-", dir="/tmp")
    listener_sock = trio.socket.socket(socket.AF_UNIX)
    await listener_sock.bind(path)
    listener_sock.listen()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, handle, [trio.SocketListener(listener_sock)])
            yield path
            nursery.cancel_scope.cancel()
    finally:
        os.unlink(path)


async def bare_echo_rtt(rounds: int) -> list[float]:
    """A bare trio echo server and client on a Unix socket, with the same frames."""
    frame = encode_frame({"type": "request", "id": 1, "method": "runtime.ping", "params": {}})
    reply = encode_frame({"type": "response", "id": 1, "result": {"instance": "0" * 16}})

    async def echo(stream: trio.SocketStream) -> None:
        async with stream:
            decoder = FrameDecoder(1 << 24)
            while await _receive_frame(stream, decoder) is not None:
                await stream.send_all(reply)

    samples = []
    async with _bare_server(echo) as path:
        client, decoder = await trio.open_unix_socket(path), FrameDecoder(1 << 24)
        for _ in range(rounds):
            started = time.perf_counter()
            await client.send_all(frame)
            await _receive_frame(client, decoder)
            samples.append(time.perf_counter() - started)
        await client.aclose()
    return samples


async def bare_handshake(rounds: int) -> list[float]:
    """Connect, send a hello frame, receive a welcome frame: a bare trio server and client."""
    hello = encode_frame(ClientConnection("bench").hello())
    welcome = encode_frame({"type": "welcome", "version": 1, "instance": "0" * 16,
                            "server": "bare", "capabilities": ["runtime"],
                            "max_frame": 1 << 24})  # fmt: skip

    async def greet(stream: trio.SocketStream) -> None:
        async with stream:
            decoder = FrameDecoder(1 << 24)
            if await _receive_frame(stream, decoder) is not None:
                await stream.send_all(welcome)
                await _receive_frame(stream, decoder)  # until the client hangs up

    samples = []
    async with _bare_server(greet) as path:
        for _ in range(rounds):
            started = time.perf_counter()
            client, decoder = await trio.open_unix_socket(path), FrameDecoder(1 << 24)
            await client.send_all(hello)
            await _receive_frame(client, decoder)
            samples.append(time.perf_counter() - started)
            await client.aclose()
    return samples


def bare_pty_echo(rounds: int) -> list[float]:
    import pty
    import tty

    pid, fd = pty.fork()
    if pid == 0:
        os.execv("/bin/cat", ["cat"])
    tty.setraw(fd)
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        os.write(fd, b"x")
        os.read(fd, 16)
        samples.append(time.perf_counter() - started)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    os.close(fd)
    return samples


def bare_pty_throughput(total: int) -> float:
    import pty

    pid, fd = pty.fork()
    if pid == 0:
        os.execv("/usr/bin/head", ["head", "-c", str(total), "/dev/zero"])
    got, started = 0, time.perf_counter()
    try:
        while got < total:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            got += len(data)
    except OSError:
        pass
    elapsed = time.perf_counter() - started
    os.waitpid(pid, 0)
    os.close(fd)
    return got / elapsed


# -- daemon figures -------------------------------------------------------------------------


async def exec_latency(c: Client, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        p = await c.process.exec(["/bin/true"])
        await c.process.wait_exit(p["id"])
        samples.append(time.perf_counter() - started)
    return samples


async def exec_rate(address: str, concurrency: int, seconds: float) -> float:
    count = 0
    async with trio.open_nursery() as nursery:
        end = trio.current_time() + seconds

        async def worker() -> None:
            nonlocal count
            async with open_client(address) as c:
                while trio.current_time() < end:
                    p = await c.process.exec(["/bin/true"])
                    await c.process.wait_exit(p["id"])
                    count += 1

        for _ in range(concurrency):
            nursery.start_soon(worker)
    return count / seconds


async def burst_ack(c: Client, n: int) -> float:
    started = time.perf_counter()
    ids: list[str] = []
    async with trio.open_nursery() as nursery:

        async def one() -> None:
            ids.append((await c.process.exec(["/bin/true"]))["id"])

        for _ in range(n):
            nursery.start_soon(one)
    elapsed = time.perf_counter() - started
    for process_id in ids:
        await c.process.wait_exit(process_id)
    return elapsed


async def capture(c: Client, d: Daemon, total: int) -> tuple[float, float, int]:
    rss_before, cpu_before = d.rss(), d.cpu()
    started = time.perf_counter()
    p = await c.process.exec(writer_argv(total))
    await c.process.wait_exit(p["id"])
    elapsed = time.perf_counter() - started
    return total / elapsed, (d.cpu() - cpu_before) / (total / 1e9), d.rss() - rss_before


async def delivery(c: Client, total: int) -> tuple[float, bool]:
    p = await c.process.exec(writer_argv(total), flow="block")
    got = 0
    lost = False
    started = time.perf_counter()
    async with c.process.logs(p["id"], follow=True) as events:
        async for event in events:
            if event["type"] == "stdout":
                got += len(event["data"])
            lost |= event["type"] == "truncated"
    return got / (time.perf_counter() - started), lost or got != total


async def ping_rtt(c: Client, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await c.call("runtime.ping")
        samples.append(time.perf_counter() - started)
    return samples


async def handshake(address: str, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        async with open_client(address):
            samples.append(time.perf_counter() - started)
    return samples


async def port_readiness(c: Client, d: Daemon, rounds: int) -> tuple[list[float], float]:
    samples, cpu = [], []
    for round_ in range(rounds):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        gate = d.dir / f"gate-{round_}"  # ports can repeat between rounds; rounds cannot
        os.mkfifo(gate)
        code = (
            f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port}));"
            f"open({str(gate)!r}).read(); s.listen(); t = time.perf_counter(); "
            "print(repr(t), flush=True); time.sleep(60)"
        )
        p = await c.process.exec([PY, "-c", code])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, gate.write_text, "go")
            cpu_before = d.cpu()
            waited = trio.current_time()
            await c.process.wait_port(p["id"], port)
            waited = trio.current_time() - waited
            cpu.append((d.cpu() - cpu_before) / max(waited, 1e-6))
        listened = float((await c.process.wait_log(p["id"], r"\d+\.\d+"))["match"])
        samples.append(time.perf_counter() - listened)
        await c.process.kill(p["id"], 9)
    return samples, statistics.median(cpu)


async def poller_cpu(c: Client, d: Daemon, first: float, steady: float) -> tuple[float, float]:
    """Daemon CPU (fractions of a core) while one readiness wait polls a port that never
    listens: over the wait's first `first` seconds, while it backs off from 2 ms polling,
    and over the `steady` seconds after that."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing will listen there
    async with trio.open_nursery() as nursery:

        async def wait() -> None:
            with contextlib.suppress(SupervisorError):
                await c.port.wait(port, timeout_ms=int((first + steady + 1) * 1000))

        cpu = [d.cpu()]
        nursery.start_soon(wait)
        for window in (first, steady):
            await trio.sleep(window)  # a measurement window, not a wait for an event
            cpu.append(d.cpu())
        nursery.cancel_scope.cancel()
    return (cpu[1] - cpu[0]) / first, (cpu[2] - cpu[1]) / steady


async def terminal_echo(c: Client, rounds: int) -> list[float]:
    t = await c.terminal.create(["sh", "-c", "stty raw -echo; exec cat"])
    samples = []
    async with c.terminal.output(t["id"], follow=True, replay=False) as events:
        for _ in range(rounds):
            started = time.perf_counter()
            await c.terminal.write(t["id"], b"x")
            async for event in events:
                if event["type"] == "data" and b"x" in event["data"]:
                    break
            samples.append(time.perf_counter() - started)
    await c.terminal.terminate(t["id"])
    return samples


async def terminal_throughput(c: Client, total: int) -> float:
    started = time.perf_counter()
    t = await c.terminal.create(["head", "-c", str(total), "/dev/zero"])
    await c.terminal.wait_exit(t["id"])
    return total / (time.perf_counter() - started)


async def sleepers(c: Client, d: Daemon, n: int) -> tuple[int, list[float]]:
    ids = [(await c.process.exec(["sleep", "600"]))["id"] for _ in range(n)]
    rss = d.rss()
    samples = []
    for _ in range(20):
        started = time.perf_counter()
        await c.process.list()
        samples.append(time.perf_counter() - started)
    for process_id in ids:
        await c.process.kill(process_id, 9)
    return rss, samples


async def main(sizes: Sizes) -> list[Figure]:
    d = Daemon()
    figures: list[Figure] = []
    add = figures.append
    try:
        # First, a fresh daemon left alone: it must cost (almost) nothing.
        cpu_before = d.cpu()
        await trio.sleep(sizes.idle_seconds)
        idle_cpu = (d.cpu() - cpu_before) / sizes.idle_seconds * 100
        add(Figure("idle: CPU", idle_cpu, "%", None, "<= 0.1 %"))
        add(Figure("idle: RSS", d.rss() / 2**20, "MiB", None, "<= 40 MiB"))
        async with open_client(d.address) as c:
            base = [spawn_wait_true() for _ in range(sizes.rounds)]
            p50, p99 = ms(await exec_latency(c, sizes.rounds))
            b50, _ = ms(base)
            add(Figure("exec true + wait_exit p50", p50, "ms", b50, "<= 1.0 ms, <= 2.0x",
                       {"p99_ms": p99}))  # fmt: skip
            add(Figure("exec true + wait_exit p99", p99, "ms", None, "<= 3 ms"))
            seconds = 0.5 if sizes is SMOKE else 5.0
            for n in (2, 8):
                # Where the CPU goes: the daemon's, and the clients' (all in this process).
                daemon_before, clients_before = d.cpu(), own_cpu()
                rate = await exec_rate(d.address, n, seconds)
                execs = rate * seconds
                cpu = {
                    "daemon_cpu_ms_per_exec": (d.cpu() - daemon_before) / execs * 1000,
                    "client_cpu_ms_per_exec": (own_cpu() - clients_before) / execs * 1000,
                }
                add(Figure(f"execs/s, {n} clients", rate, "/s", spawn_rate(n, seconds), ">= 0.6x",
                           cpu))  # fmt: skip
            bursts, floors = [], []
            for _ in range(THROUGHPUT_ROUNDS):
                bursts.append(await burst_ack(c, 100))
                floors.append(spawn_burst(100))
            add(Figure("100 execs at once: all acked", statistics.median(bursts) * 1000, "ms",
                       statistics.median(floors) * 1000, "<= 50 ms"))  # fmt: skip
            # Throughputs: the median of ROUNDS runs, each beside its baseline, alternating,
            # so that a noisy moment on a shared machine does not decide a figure.
            captures, bare, growths, cpus = [], [], [], []
            for _ in range(THROUGHPUT_ROUNDS):
                rate, cpu_per_gb, growth = await capture(c, d, sizes.capture_bytes)
                captures.append(rate)
                cpus.append(cpu_per_gb)
                growths.append(growth)
                bare.append(await bare_trio_capture(sizes.capture_bytes))
            pipe = f"{FULL_PIPE_GROWS_TO >> 10} KiB pipe"
            add(Figure(f"capture (1 MiB writes, {pipe})", statistics.median(captures) / 1e9,
                       "GB/s", statistics.median(bare) / 1e9, ">= 2 GB/s, >= 0.5x",
                       {"cpu_s_per_gb": statistics.median(cpus), "shell_pipe_gbps":
                        shell_pipe_rate(sizes.capture_bytes) / 1e9}))  # fmt: skip
            add(Figure("capture, no reader: RSS growth", max(growths) / 2**20, "MiB", None,
                       "<= ring (1 MiB) + 20 MiB"))  # fmt: skip
            deliveries = [await delivery(c, sizes.delivery_bytes) for _ in range(THROUGHPUT_ROUNDS)]
            add(Figure("delivery, flow block", statistics.median(r for r, _ in deliveries) / 2**20,
                       "MiB/s", None, ">= 500 MiB/s",
                       {"lost": any(lost for _, lost in deliveries)}))  # fmt: skip
            p50, p99 = ms(await ping_rtt(c, sizes.rounds))
            e50, _ = ms(await bare_echo_rtt(sizes.rounds))
            add(Figure("runtime.ping p50", p50, "ms", e50, "<= 2x", {"p99_ms": p99}))
            h50, p99 = ms(await handshake(d.address, min(sizes.rounds, 200)))
            b50, _ = ms(await bare_handshake(min(sizes.rounds, 200)))
            add(Figure("handshake p50", h50, "ms", b50, "<= 0.3 ms", {"p99_ms": p99}))
            samples, cpu = await port_readiness(c, d, min(sizes.rounds, 50))
            p50, p99 = ms(samples)
            add(Figure("port readiness p50", p50, "ms", None, "<= 5 ms",
                       {"daemon_cpu_during_the_wait": cpu, "p99_ms": p99}))  # fmt: skip
            first, steady = await poller_cpu(c, d, *((0.2, 0.2) if sizes is SMOKE else (1, 3)))
            add(Figure("port poller, one waiter, first second: daemon CPU", first * 100, "%",
                       None, "report"))  # fmt: skip
            add(Figure("port poller, one waiter, after that: daemon CPU", steady * 100, "%",
                       None, "report"))  # fmt: skip
            p50, p99 = ms(await terminal_echo(c, sizes.rounds))
            add(Figure("terminal echo p50", p50, "ms", ms(bare_pty_echo(sizes.rounds))[0],
                       "<= 1 ms", {"p99_ms": p99}))  # fmt: skip
            ours, floor = [], []
            for _ in range(THROUGHPUT_ROUNDS):
                ours.append(await terminal_throughput(c, sizes.terminal_bytes))
                floor.append(bare_pty_throughput(sizes.terminal_bytes))
            add(Figure("terminal throughput", statistics.median(ours) / 2**20, "MiB/s",
                       statistics.median(floor) / 2**20, ">= 0.7x"))  # fmt: skip
            rss, samples = await sleepers(c, d, sizes.sleepers)
            add(Figure(f"{sizes.sleepers} sleeping processes: RSS", rss / 2**20, "MiB", None,
                       "<= 150 MiB"))  # fmt: skip
            p50, p99 = ms(samples)
            add(Figure(f"process.list of {sizes.sleepers}", p50, "ms", None, "<= 20 ms",
                       {"p99_ms": p99}))  # fmt: skip
    finally:
        d.stop()
    return figures


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (for the tests)")
    parser.add_argument("--json", type=Path, default=Path("bench/results/latest.json"))
    args = parser.parse_args()
    figures = trio.run(main, SMOKE if args.smoke else FULL)
    report(figures, args.json)


def report(figures: list[Figure], out: Path | None) -> None:
    head = ("figure", "value", "unit", "p99", "baseline", "ratio")
    print("{:<42} {:>10} {:<6} {:>8} {:>10} {:>7}  target".format(*head))
    for f in figures:
        p99 = f.extra.get("p99_ms")
        tail = "" if p99 is None else f"{p99:.3f}"
        baseline = "" if f.baseline is None else f"{f.baseline:.3f}"
        ratio = "" if f.ratio is None else f"{f.ratio:.2f}x"
        print(f"{f.name:<42} {f.value:>10.3f} {f.unit:<6} {tail:>8} {baseline:>10} {ratio:>7}  "
              f"{f.target}")  # fmt: skip
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps([asdict(f) | {"ratio": f.ratio} for f in figures], indent=2))
        print(f"\nwrote {out}")


if __name__ == "__main__":
    cli()
