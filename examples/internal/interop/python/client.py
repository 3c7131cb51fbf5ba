"""The gRPC C-core client of the interop suite (through grpcio).

It speaks the line protocol of the Go package
github.com/xdspush/xdspush/examples/internal/interop (see its doc.go) on
stdin and stdout. It calls the method with generic unary calls (bytes in,
bytes out), so it needs no generated code. Usage:

    GRPC_XDS_BOOTSTRAP_CONFIG='{...}' /usr/bin/python3 client.py \\
        xds:///ingress /xdspush.interop.Backend/Name
"""

import sys
import threading
import time

import grpc

RPC_TIMEOUT = 5.0  # the deadline of each RPC, in seconds
RPC_GAP = 0.002  # the pause between two RPCs, in seconds


def out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def format_seen(seen):
    if not seen:
        return "-"
    return ",".join("%s=%d" % (n, seen[n]) for n in sorted(seen))


def decode(buf):
    """A StringValue's bytes: 0x0a, the length, the string (shorter than 128)."""
    if len(buf) < 2 or buf[0] != 0x0A or buf[1] != len(buf) - 2:
        raise ValueError("unexpected response %s" % buf.hex())
    return buf[2:].decode("utf-8")


class Loop:
    """The RPC loop's state; commands arrive on another thread."""

    def __init__(self):
        self.lock = threading.Lock()  # protects cmd and stopping
        self.cmd = None
        self.stopping = False
        self.first = False
        self.rpcs = 0
        self.fails = 0

    def command(self, line):
        f = line.split()
        cmd = {"at": time.monotonic(), "seen": {}, "fails": 0, "results": 0}
        if len(f) == 3 and f[0] == "await":
            cmd.update(kind="await", name=f[1], deadline=cmd["at"] + float(f[2]))
        elif len(f) == 2 and f[0] == "count":
            cmd.update(kind="count", n=int(f[1]))
        else:
            out("error unknown command %r" % line)
            cmd = None
        with self.lock:
            self.cmd = cmd

    def result(self, seq, name, err, start):
        now = time.monotonic()
        self.rpcs += 1
        if err is not None:
            self.fails += 1
            out("fail %d %s" % (seq, str(err).replace("\n", " ")))
        elif not self.first:
            self.first = True
            out("first %s %d" % (name, (now - start) * 1000))
        with self.lock:
            cmd = self.cmd
            if cmd is None:
                return
            cmd["results"] += 1
            if err is not None:
                cmd["fails"] += 1
            else:
                cmd["seen"][name] = cmd["seen"].get(name, 0) + 1
            ms = int((now - cmd["at"]) * 1000)
            if cmd["kind"] == "await":
                if err is None and name == cmd["name"]:
                    out("await ok %d %s" % (ms, format_seen(cmd["seen"])))
                    self.cmd = None
                elif now > cmd["deadline"]:
                    out("await timeout %d %s" % (ms, format_seen(cmd["seen"])))
                    self.cmd = None
            elif cmd["results"] == cmd["n"]:
                out("count %s %d" % (format_seen(cmd["seen"]), cmd["fails"]))
                self.cmd = None


def read_commands(loop):
    for line in sys.stdin:
        loop.command(line.strip())
    with loop.lock:
        loop.stopping = True


def main():
    target, method = sys.argv[1], sys.argv[2]
    out("hello %s" % grpc.__version__)
    loop = Loop()
    threading.Thread(target=read_commands, args=(loop,), daemon=True).start()
    start = time.monotonic()
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(method)  # no serializers: bytes in, bytes out
        seq = 0
        while True:
            with loop.lock:
                if loop.stopping:
                    break
            seq += 1
            name, err = None, None
            try:
                name = decode(call(b"", timeout=RPC_TIMEOUT))
            except (grpc.RpcError, ValueError) as e:
                err = e
            loop.result(seq, name, err, start)
            time.sleep(RPC_GAP)
    out("bye %d %d" % (loop.rpcs, loop.fails))


if __name__ == "__main__":
    main()
