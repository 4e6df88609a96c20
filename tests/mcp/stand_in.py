"""A small stdio MCP server for brain's registry tests: the faults the reference servers
cannot be asked for. Its tools are named by STAND_IN_TOOLS (comma-separated; default
echo,crash); it appends its pid to STAND_IN_PIDFILE when set. `crash` exits mid-call;
`add_tool` {"name"} lists one more tool and says so (notifications/tools/list_changed);
`slow` {"seconds"?: 30} answers after that long on its own thread (it keeps listening,
and stops without answering when the call is cancelled); `hang` blocks the whole server
(it answers nothing any more, a cancel and a ping included); `deaf` stops reading its
input and asks brain for 300,000 pings it never reads the answers to (a server whose
stdin fills up); `big` {"bytes"?: 300000} answers that many bytes of text; `flood`
{"bytes"?: 20000000} writes that many bytes on one line that never ends, then hangs; `env` answers the names of its environment variables, sorted; every other
tool answers its name and arguments. STAND_IN_DELAY_S delays its answer to `initialize` (a slow start).
STAND_IN_LOG names a file it appends every message it receives to (one JSON line each);
STAND_IN_START_ONCE names a file that makes every start after the first fail."""
import json
import os
import sys
import threading
import time

tools = [t for t in os.environ.get("STAND_IN_TOOLS", "echo,crash").split(",") if t]
pidfile = os.environ.get("STAND_IN_PIDFILE")
if pidfile:
    with open(pidfile, "a") as f:
        f.write(f"{os.getpid()}\n")
# STAND_IN_START_ONCE names a file: the first start creates it, every later start fails
# (a server that cannot come back after a crash).
once = os.environ.get("STAND_IN_START_ONCE")
if once:
    if os.path.exists(once):
        sys.stderr.write("stand-in: refusing to start again\n")
        sys.exit(1)
    open(once, "w").close()
log = os.environ.get("STAND_IN_LOG")
out = threading.Lock()
cancelled = set()


def send(message):
    with out:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def answer(i, result):
    send({"jsonrpc": "2.0", "id": i, "result": result})


def text(i, t):
    answer(i, {"content": [{"type": "text", "text": t}]})


def slow(i, seconds):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if i in cancelled:
            return
        time.sleep(0.02)
    text(i, f"slow done after {seconds} s")


for line in sys.stdin:
    m = json.loads(line)
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(m) + "\n")
    if m.get("method") == "notifications/cancelled":
        cancelled.add((m.get("params") or {}).get("requestId"))
        continue
    if "id" not in m or "method" not in m:
        continue
    i, method, params = m["id"], m["method"], m.get("params") or {}
    if method == "initialize":
        time.sleep(float(os.environ.get("STAND_IN_DELAY_S", "0")))
        answer(i, {"protocolVersion": params["protocolVersion"],
                   "capabilities": {"tools": {"listChanged": True}},
                   "serverInfo": {"name": "stand-in", "version": "1"}})
    elif method == "ping":
        answer(i, {})
    elif method == "tools/list":
        answer(i, {"tools": [{"name": t, "description": f"stand-in {t}",
                              "inputSchema": {"type": "object"}} for t in tools]})
    elif method == "tools/call":
        name, args = params["name"], params.get("arguments") or {}
        if name == "crash":
            sys.stderr.write("stand-in: crashing as asked\n")
            os._exit(3)
        if name == "hang":
            time.sleep(3600)
        if name == "deaf":
            for n in range(300_000):
                send({"jsonrpc": "2.0", "id": f"p{n}", "method": "ping"})
            time.sleep(3600)
        if name == "big":
            text(i, "x" * int(args.get("bytes", 300_000)))
            continue
        if name == "flood":
            with out:
                sys.stdout.write("x" * int(args.get("bytes", 20_000_000)))
                sys.stdout.flush()
            time.sleep(3600)
        if name == "env":
            text(i, " ".join(sorted(os.environ)))
            continue
        if name == "slow":
            threading.Thread(target=slow, args=(i, float(args.get("seconds", 30))),
                             daemon=True).start()
            continue
        if name == "add_tool":
            tools.append(args["name"])
            text(i, "added")
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            continue
        text(i, f"{name} {json.dumps(args)}")
    else:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "no such method"}})
